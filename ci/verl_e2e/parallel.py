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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_e2e.evidence import CHUNK, MAX_ITEMS, MAX_SERIES, Evidence, LogParser, parse_stream
from verl_e2e.signatures import Signature

PARALLEL_MIN_BYTES = 48 << 20  # below this, forking costs more than it saves


@dataclass
class Partial:
    """What one range produced: its Evidence plus the parser state the merge needs."""

    ev: Evidence
    grad_norms: list[tuple[float, bool]]
    series: dict[str, list[float]]
    signature_hits: dict[str, str]
    frames: list[str]
    residual: list[tuple[str, bool]]
    exception_standalone: bool
    awaiting_message: str | None


def _parse_range(path: str, start: int, end: int, signatures: tuple[Signature, ...] | None) -> Partial:
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
            if parser._pending_validation is None:
                break
            parser.feed(fh.readline())
    parser.flush()
    return Partial(
        parser.ev,
        parser._grad_norms,
        parser._series,
        parser._signature_hits,
        list(parser._frames),
        parser._residual,
        parser._exception_standalone,
        parser._awaiting_message,
    )


def _exception(parts: list[Partial]) -> dict[str, str] | None:
    """First traceback-backed exception, else the first standalone one; fill a message left pending."""
    chosen = next((i for i, p in enumerate(parts) if p.ev.exception and not p.exception_standalone), None)
    if chosen is None:
        chosen = next((i for i, p in enumerate(parts) if p.ev.exception), None)
    if chosen is None:
        return None
    exc = dict(parts[chosen].ev.exception or {})
    waiting = parts[chosen].awaiting_message
    if waiting and not exc.get("message"):
        for later in parts[chosen + 1 :]:
            if later.ev.exception and later.ev.exception["type"] == waiting and later.ev.exception["message"]:
                exc["message"] = later.ev.exception["message"]
                break
    return exc


def merge(parts: list[Partial], signatures: tuple[Signature, ...] | None) -> Evidence:
    out = LogParser(signatures)
    ev = out.ev
    steps_before = False
    for p in parts:
        e = p.ev
        ev.bytes_read += e.bytes_read
        ev.step_lines += e.step_lines
        if e.max_step is not None:
            ev.max_step = e.max_step if ev.max_step is None else max(ev.max_step, e.max_step)
        if e.progress_final is not None:
            ev.progress_final, ev.progress_total = e.progress_final, e.progress_total
        ev.saves += e.saves
        ev.resumed_from = e.resumed_from if e.resumed_from is not None else ev.resumed_from
        for flag in (
            "from_scratch",
            "tracker_missing",
            "interrupted",
            "unhandled_error",
            "nan_or_inf_in_metrics",
        ):
            setattr(ev, flag, getattr(ev, flag) or getattr(e, flag))
        ev.nan_metrics = (ev.nan_metrics + e.nan_metrics)[:MAX_ITEMS]
        ev.traced_env.update(e.traced_env)
        ev.command = ev.command or e.command
        _merge_bridge(ev.bridge_imports, e.bridge_imports)
        ev.initial_validation = ev.initial_validation or e.initial_validation
        ev.final_validation = e.final_validation or ev.final_validation
        for key, flat in p.series.items():
            into = out._series.setdefault(key, [])
            into += flat[: 2 * MAX_SERIES - len(into)]
        ev.key_lines = list(dict.fromkeys(ev.key_lines + e.key_lines))[:MAX_ITEMS]
        out._grad_norms += p.grad_norms
        for name, line in p.signature_hits.items():
            out._signature_hits.setdefault(name, line)
        out._frames.update(dict.fromkeys(p.frames))
        ev.residual_noise += [line for line, after in p.residual if after or steps_before]
        steps_before = steps_before or e.step_lines > 0
    ev.residual_noise = ev.residual_noise[:MAX_ITEMS]
    ev.exception = _exception(parts)
    return out.summarize()


def _merge_bridge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in new.items():
        if key in ("other", "processes"):
            into[key] = list(dict.fromkeys([*into.get(key, []), *value]))[:MAX_ITEMS]
        else:
            into.setdefault(key, value)


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
