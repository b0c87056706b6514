"""Read a verl run's console log into Evidence: one pass, constant memory, every log form since v0.2.

Speed comes from not looking at most lines. verl logs are dominated by worker chatter; the facts we
need sit on lines that contain one of a few literals ("needles": `step:`, `Training Progress`,
`rror`, ...). Each chunk is searched for all needles at once with RE2 (google-re2: a DFA, so the cost
does not grow with the number of needles; a pure-Python `bytes.find` loop is the fallback), only the
hit lines are decoded and cleaned, and those lines go to the part that owns them, in log order:
`logstages` (trace, imports, progress, saves, resume), `logmetrics` (step lines, validation),
`tracebacks` (frames and the root exception) and the signatures; `classify` decides at the end.
Config dumps, pprints and Hydra's override list are recognised (`logtext.is_dump`) and read by none.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from verl_e2e.config.signatures import Signature, default_signatures
from verl_e2e.judge.classify import classify, root_role
from verl_e2e.judge.culprit import hint as owner_hint
from verl_e2e.judge.culprit import locate
from verl_e2e.judge.logmetrics import Metrics
from verl_e2e.judge.logstages import Stages, stage
from verl_e2e.judge.logtext import clean_line, is_dump, skipped_in
from verl_e2e.judge.tracebacks import Tracebacks

try:  # RE2 scans for every needle in one linear pass; without it each needle costs its own pass
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _re2 = None

CHUNK = 4 << 20  # bytes read at a time
MAX_LINE = 64 << 10  # longer lines are cut (a 1 GB line must not become a 1 GB string)
MAX_ITEMS = 50  # residual-noise lines, key lines kept

# "Training Progress" is not a needle: only the last progress line counts, so each chunk is searched
# backwards for it once (tqdm prints one per step, which would double the lines to look at).
PROGRESS = b"Training Progress"
# exception names that end in neither Error nor Exception (tracebacks.QUALIFIED_EXCEPTION_LINE)
QUALIFIED_KEYS = ("OutOfResources", "BackendCompilerFailed", "exc.Unsupported", "StopIteration")
BASE_NEEDLES = (
    b"step:",
    b"resource_tracker",
    b"global_step",
    b"rror",
    b"xception",
    b"nterrupt",
    b"Traceback",
    b"scratch",
    b"heckpoint",
    b"validation metrics",
    b'File "',
    b"bridge/__init__",
    b"Enabling LoRA",
    b"Enabling LORA",
    b"in hf_keys",
    *(k.encode() for k in QUALIFIED_KEYS),
)
# The wrapper's `set -x` trace comes before training starts; it is looked for until the trainer's
# command line has been traced (a `\n+` needle over a whole log would cost a pass per newline).
TRACE_NEEDLES = (b"\n+", b"\r+")
FAILURE_KEYS = ("rror", "xception", "nterrupt", 'File "', "Traceback", "resource_tracker", *QUALIFIED_KEYS)
RESIDUAL = re.compile(
    r"resource_tracker|DataLoader worker \(pid|Exception ignored in|atexit|during shutdown|"
    r"Ray is shutting down|worker_pool\.cc|core_worker\.cc.*(?:Exiting|shutdown)|leaked semaphore"
)


@dataclass
class Evidence:
    """What a log shows. JSON keys are a contract (`verl-e2e evidence LOG --format json`)."""

    max_step: int | None = None
    step_lines: int = 0
    progress_final: str | None = None
    progress_total: int | None = None
    saves: list[int] = field(default_factory=list)
    resumed_from: int | None = None
    from_scratch: bool = False
    tracker_missing: bool = False
    exception: dict[str, str] | None = None
    failure_class: str = "none"
    failure_signature: str | None = None
    failure_line: str | None = None
    hint: str | None = None
    interrupted: bool = False
    unhandled_error: bool = False
    nan_or_inf_in_metrics: bool = False
    nan_metrics: list[str] = field(default_factory=list)
    zero_grad_norm: bool = False
    stage: str = "setup"
    traced_env: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    bridge_imports: dict[str, Any] = field(default_factory=dict)
    initial_validation: dict[str, float] | None = None
    final_validation: dict[str, float] | None = None
    series: dict[str, list[list[float]]] = field(default_factory=dict)
    frames: list[str] = field(default_factory=list)  # the root traceback's functions, outermost first
    failed_in: str | None = None  # the role of the innermost known frame (save, load, model_build, ...)
    culprit: dict[str, Any] | None = None  # whose frame failed, where, and the owner chain (`culprit.locate`)
    residual_noise: list[str] = field(default_factory=list)
    key_lines: list[str] = field(default_factory=list)
    skipped_weights: list[str] = field(default_factory=list)  # mapped HF weights the checkpoint lacked
    bytes_read: int = 0

    def to_json(self) -> dict[str, Any]:
        """Strict JSON: a non-finite metric value becomes the string verl printed ("nan", "inf")."""
        data = asdict(self)
        data["series"] = {k: [[s, _json_number(v)] for s, v in pts] for k, pts in self.series.items()}
        return data


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


@dataclass
class State:
    """Everything a parse collected: picklable, so a byte range parsed elsewhere can be folded in."""

    metrics: Metrics = field(default_factory=Metrics)
    stages: Stages = field(default_factory=Stages)
    tracebacks: Tracebacks = field(default_factory=Tracebacks)
    hits: dict[str, str] = field(default_factory=dict)  # signature name -> first line it matched
    residual: list[tuple[str, bool]] = field(default_factory=list)  # (line, a step line came before it)
    key_lines: list[str] = field(default_factory=list)
    skipped_weights: list[str] = field(default_factory=list)  # HF names Bridge's import could not find
    bytes_read: int = 0

    def key(self, line: str) -> None:
        text = line[:300]
        if len(self.key_lines) < MAX_ITEMS and text not in self.key_lines:
            self.key_lines.append(text)

    def absorb(self, later: State) -> None:
        """Fold in the state of the byte range that follows this one."""
        steps_before = self.metrics.step_lines
        self.tracebacks.absorb(later.tracebacks, steps_before)
        self.metrics.absorb(later.metrics)
        self.stages.absorb(later.stages)
        for name, line in later.hits.items():
            self.hits.setdefault(name, line)
        self.residual += [(line, after or steps_before > 0) for line, after in later.residual]
        self.key_lines = list(dict.fromkeys(self.key_lines + later.key_lines))[:MAX_ITEMS]
        self.skipped_weights = list(dict.fromkeys(self.skipped_weights + later.skipped_weights))[:MAX_ITEMS]
        self.bytes_read += later.bytes_read


def following_lines(buf: bytes, pos: int, limit: int) -> Iterator[str]:
    """Lines after the separator at `pos` in the same chunk (for multi-line validation dicts)."""
    n = len(buf)
    for _ in range(limit):
        if pos >= n:
            return
        nl = buf.find(b"\n", pos + 1)
        nl = n if nl == -1 else nl
        cr = buf.find(b"\r", pos + 1, nl)
        nxt = nl if cr == -1 else cr
        yield clean_line(buf[pos + 1 : nxt].decode("utf-8", errors="replace"))
        pos = nxt


def record_failure(st: State, signatures: Iterable[Signature], line: str) -> None:
    """A line with a failure keyword: signature hits, residual noise, or a traceback line."""
    for sig in signatures:
        if sig.name not in st.hits and sig.needle in line and sig.regex.search(line):
            st.hits[sig.name] = line[:500]
    if RESIDUAL.search(line):
        if "Exception ignored in" in line or "Error in atexit" in line:
            st.tracebacks.ignore_next()
        if len(st.residual) < MAX_ITEMS:
            st.residual.append((line[:300], st.metrics.step_lines > 0))
        return
    if st.tracebacks.line(line, st.metrics.step_lines):
        st.key(line)


class LogParser:
    """Feed bytes in chunks; `finish()` returns the Evidence. Memory stays flat whatever the size."""

    def __init__(self, signatures: Iterable[Signature] | None = None, *, use_re2: bool = True) -> None:
        self.signatures = tuple(signatures) if signatures is not None else default_signatures()
        needles = set(BASE_NEEDLES) | {s.needle.encode() for s in self.signatures}
        self.needles = tuple(sorted(needles))
        self._failure_keys = tuple({*FAILURE_KEYS, *(s.needle for s in self.signatures)} - {"heckpoint"})
        self._line_rx = self._line_rx_trace = None
        if _re2 is not None and use_re2:
            alternatives = b"|".join(re.escape(n) for n in self.needles)
            self._line_rx = _re2.compile(b"(?m)^[^\n]*(?:" + alternatives + b")[^\n]*")
            self._line_rx_trace = _re2.compile(b"(?m)^(?:(?:[^\n]*\r)?\\+[^\n]*|[^\n]*(?:" + alternatives + b")[^\n]*)")
        self.state = State()
        self._carry = b""
        self._first_line = True
        self.scan_trace = True  # a range after the first of a parallel parse has no wrapper trace

    # ------------------------------------------------------------------------------------ scanning

    def feed(self, chunk: bytes) -> None:
        self.state.bytes_read += len(chunk)
        buf = self._carry + chunk
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut == -1:
            self._carry = buf[-MAX_LINE:] if len(buf) > MAX_LINE else buf
            return
        self._carry = buf[cut + 1 :]
        if len(self._carry) > MAX_LINE:
            self._carry = self._carry[:MAX_LINE]
        self._scan(buf[: cut + 1])

    def _scan(self, buf: bytes) -> None:
        if self._first_line:
            buf = b"\n" + buf  # so a needle anchored on "\n" also sees the very first line
            self._first_line = False
        if self.state.metrics.pending is not None:
            self._continue_validation(buf, -1)
        tracing = self.scan_trace and self.state.stages.command is None
        rx = self._line_rx_trace if tracing else self._line_rx
        if rx is not None:
            for m in rx.finditer(buf):
                self._hit(buf, m.start(), m.end())
        else:
            self._find_hits(buf, tracing)
        last = buf.rfind(PROGRESS)
        if last != -1:
            text = buf[last : last + 300].split(b"\n", 1)[0].split(b"\r", 1)[0].decode(errors="replace")
            self.state.stages.progress(clean_line(text))

    def _find_hits(self, buf: bytes, tracing: bool) -> None:
        """The fallback scan: one `bytes.find` pass per needle."""
        starts: set[int] = set()
        find, rfind = buf.find, buf.rfind
        needles = (*self.needles, *TRACE_NEEDLES) if tracing else self.needles
        for needle in needles:
            i = find(needle)
            while i != -1:
                at = i + 1 if needle[0:1] in (b"\n", b"\r") else i
                nl_before = rfind(b"\n", 0, at)
                start = max(nl_before, rfind(b"\r", nl_before + 1, at)) + 1
                starts.add(start)
                nl = find(b"\n", at)
                if nl == -1:
                    break
                i = find(needle, nl)
        for start in sorted(starts):
            nl = find(b"\n", start)
            self._hit(buf, start, len(buf) if nl == -1 else nl)

    def _hit(self, buf: bytes, start: int, end: int) -> None:
        """Handle the line buf[start:end]; tqdm's carriage-return updates are separate lines."""
        raw = buf[start : min(end, start + MAX_LINE)]
        if b"\r" not in raw:
            self._line(clean_line(raw.decode("utf-8", errors="replace")), buf, end)
            return
        segments, pos = [], start
        for segment in raw.split(b"\r"):
            segments.append((segment, pos + len(segment)))
            pos += len(segment) + 1
        if len(segments) > 40:  # a long run of progress updates: the first and last ones tell it all
            segments = segments[:20] + segments[-20:]
        for segment, seg_end in segments:
            if segment.strip():
                self._line(clean_line(segment.decode("utf-8", errors="replace")), buf, seg_end)

    def _continue_validation(self, buf: bytes, pos: int) -> None:
        for follow in following_lines(buf, pos, 40):
            if self.state.metrics.continue_validation(follow):
                return

    # ------------------------------------------------------------------------------------ dispatch

    def _line(self, line: str, buf: bytes, end: int) -> None:
        if not line:
            return
        st = self.state
        if line.startswith("step:") and st.metrics.step(line):
            return
        if line.startswith("+"):
            st.stages.trace(line)
            return
        if is_dump(line):  # the resolved config, a pprint, Hydra's override list: no evidence here
            if "Error executing job with overrides" in line:
                st.tracebacks.line(line, st.metrics.step_lines)
            return
        marks = "global_step" in line or "global step" in line or "scratch" in line or "tracker" in line
        if marks and (key := st.stages.checkpoint(line)) is not None:
            st.key(key)
        if "bridge" in line and (key := st.stages.bridge(line)) is not None:
            st.key(key)
        if "Enabling" in line:
            st.stages.model_marker(line)
        if "in hf_keys" in line:
            st.skipped_weights = list(dict.fromkeys(st.skipped_weights + skipped_in(line)))[:MAX_ITEMS]
        if any(k in line for k in self._failure_keys):
            record_failure(self.state, self.signatures, line)
        if "validation metrics: " in line:  # last: it may read ahead into the following lines
            key = st.metrics.start_validation(line)
            if key is not None:
                st.key(key)
                if st.metrics.pending is not None:
                    self._continue_validation(buf, end)

    # ------------------------------------------------------------------------------------ summary

    def flush(self) -> None:
        """Scan a last line that had no newline."""
        if self._carry:
            self._scan(self._carry + b"\n")
            self._carry = b""

    def finish(self) -> Evidence:
        self.flush()
        return summarize(self.state, self.signatures)


def summarize(st: State, signatures: Iterable[Signature]) -> Evidence:
    """Evidence from a parse's collected state (sequential, or folded from parallel ranges)."""
    m, sg, tb = st.metrics, st.stages, st.tracebacks
    root = tb.root(m.step_lines)
    exception = tb.exception(m.step_lines)
    role = root_role(root)
    ev = Evidence(
        max_step=m.max_step,
        step_lines=m.step_lines,
        progress_final=sg.progress_final,
        progress_total=sg.progress_total,
        # a save the root traceback broke off counts only if it printed its completion
        saves=sorted(s for s in set(sg.saves) if role != "save" or s in sg.saves_done),
        resumed_from=sg.resumed_from,
        from_scratch=sg.from_scratch,
        tracker_missing=sg.tracker_missing,
        exception=exception,
        interrupted=tb.interrupted,
        unhandled_error=tb.unhandled,
        nan_or_inf_in_metrics=m.nan,
        nan_metrics=m.nan_metrics,
        skipped_weights=list(st.skipped_weights),
        zero_grad_norm=m.zero_grad_norm(),
        traced_env=sg.traced_env,
        command=sg.command,
        bridge_imports=sg.bridge_imports,
        initial_validation=m.initial_validation,
        final_validation=m.final_validation,
        series=m.series_points(),
        frames=[f for f, _ in root.frames][-MAX_ITEMS:] if root else [],
        failed_in=role,
        residual_noise=[line for line, after_step in st.residual if after_step][:MAX_ITEMS],
        key_lines=st.key_lines,
        bytes_read=st.bytes_read,
    )
    ev.stage = stage(
        sg,
        max_step=m.max_step,
        step_lines=m.step_lines,
        validated=m.final_validation is not None,
        role=role,
        empty=st.bytes_read == 0,
    )
    failed = tb.unhandled or (root is not None and exception is not None)
    ev.failure_class, ev.failure_signature, ev.failure_line, ev.hint = classify(
        root,
        exception,
        st.hits,
        tuple(signatures),
        interrupted=tb.interrupted,
        failed=failed,
        finished=ev.stage == "done",
        nan=m.nan,
    )
    ev.culprit = locate(root) if exception is not None or failed else None
    ev.hint = owner_hint(ev.failure_class, ev.hint, ev.culprit)
    return ev


def parse_stream(stream: BinaryIO, signatures: Iterable[Signature] | None = None) -> Evidence:
    parser = LogParser(signatures)
    while chunk := stream.read(CHUNK):
        parser.feed(chunk)
    return parser.finish()


def parse_bytes(data: bytes, signatures: Iterable[Signature] | None = None) -> Evidence:
    parser = LogParser(signatures)
    for i in range(0, len(data), CHUNK):
        parser.feed(data[i : i + CHUNK])
    return parser.finish()
