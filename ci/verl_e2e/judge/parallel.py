"""Parse a large log on several cores: byte ranges in worker processes, partial results merged in order.

Each range is parsed by its own `LogParser` (the first line of a range belongs to the range before
it, which reads past its end to finish that line and any validation dict it started). The partial
states are then folded in log order so the result matches a sequential parse: counts add up, "first"
facts (exception, signature hits, command) come from the earliest range that has them, "last" facts
(progress, resume, final validation) from the latest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from verl_e2e.config.signatures import Signature, default_signatures
from verl_e2e.judge.evidence import CHUNK, Evidence, LogParser, State, parse_stream, summarize

PARALLEL_MIN_BYTES = 48 << 20  # below this, forking costs more than it saves


def _parse_range(path: str, start: int, end: int, signatures: tuple[Signature, ...] | None) -> State:
    parser = LogParser(signatures)
    parser.scan_trace = start == 0
    with Path(path).open("rb") as fh:
        fh.seek(start)
        if start > 0:
            fh.readline()  # the line in progress at `start` belongs to the previous range
        pos = fh.tell()
        while pos < end:
            chunk = fh.read(min(CHUNK, end - pos))
            if not chunk:
                break
            pos += len(chunk)
            parser.feed(chunk)
        parser.feed(fh.readline())  # finish the line in progress at `end`
        for _ in range(40):  # a validation dict may continue on the next lines
            if parser.state.metrics.pending is None:
                break
            parser.feed(fh.readline())
    parser.flush()
    return parser.state


def merge(parts: list[State], signatures: tuple[Signature, ...] | None) -> Evidence:
    """Fold the ranges' states in log order, then summarize as a sequential parse would."""
    total = parts[0]
    for later in parts[1:]:
        total.absorb(later)
    return summarize(total, signatures if signatures is not None else default_signatures())


def parse_file(
    path: str | Path, signatures: Iterable[Signature] | None = None, *, workers: int | None = None
) -> Evidence:
    """Parse a log file; a large one is split into byte ranges parsed by `workers` processes."""
    path = Path(path)
    sigs = tuple(signatures) if signatures is not None else None
    size = path.stat().st_size
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n <= 1 or size < PARALLEL_MIN_BYTES:
        with path.open("rb") as fh:
            return parse_stream(fh, sigs)
    step = -(-size // n)  # one range per worker: equal shares of the file
    bounds = [(a, min(a + step, size)) for a in range(0, size, step)]
    with ProcessPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(_parse_range, str(path), a, b, sigs) for a, b in bounds]
        parts = [f.result() for f in futures]
    return merge(parts, sigs)
