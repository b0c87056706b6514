"""Read a verl run's console log into Evidence: one pass, constant memory, every log form since v0.2.

Speed comes from not looking at most lines. verl logs are dominated by worker chatter; the facts we
need sit on lines that contain one of a few literals ("needles": `step:`, `Training Progress`,
`rror`, ...). Each chunk is searched for all needles at once with RE2 (google-re2: a DFA, so the cost
does not grow with the number of needles; a pure-Python `bytes.find` loop is the fallback), only the
hit lines are decoded and cleaned (Ray prefixes, ANSI colours, `[repeated Nx across cluster]`,
carriage returns), and those lines go through the handlers below in log order. Signature needles come
from the signature data, so a signature added in matrix.yaml is seen without touching this code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from verl_e2e.signatures import Signature, default_signatures

try:  # RE2 scans for every needle in one linear pass; without it each needle costs its own pass
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _re2 = None

CHUNK = 4 << 20  # bytes read at a time
MAX_LINE = 64 << 10  # longer lines are cut (a 1 GB line must not become a 1 GB string)
MAX_SERIES = 20_000  # points kept per metric series
MAX_ITEMS = 50  # residual-noise lines, frames, key lines kept

# "Training Progress" is not a needle: only the last progress line counts, so each chunk is searched
# backwards for it once (tqdm prints one per step, which would double the lines to look at).
PROGRESS = b"Training Progress"
BASE_NEEDLES = (
    b"step:",
    b"resource_tracker",
    b"global_step",
    b"rror",
    b"xception",
    b"nterrupt",
    b"scratch",
    b"heckpoint",
    b"validation metrics",
    b'File "',
    b"bridge/__init__",
)
# The wrapper's `set -x` trace comes before training starts; it is looked for until the trainer's
# command line has been traced (a `\n+` needle over a whole log would cost a pass per newline).
TRACE_NEEDLES = (b"\n+", b"\r+")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_RAY_PREFIX = re.compile(
    r"(?:\x1b\[[0-9;]*m)?\((?:[A-Za-z_][\w.]*(?: pid=\d+)?(?:, ip=[\w.:-]+)?|pid=\d+(?:, ip=[\w.:-]+)?"
    r"|autoscaler[^)]*)\)(?:\x1b\[[0-9;]*m)? ?"
)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

_STEP = re.compile(r"step:(\d+)(?: - |\s*$)")
_PAIR = re.compile(r"([^\s:][^:]*?):(\S+)(?: - |\s*$)")
_PROGRESS = re.compile(r"Training Progress:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_SAVE = re.compile(
    r"local_global_step_folder: \S*global_step_(\d+)|Saving checkpoint to \S*global_step_(\d+)"
    r"|(?:[Ss]aving|[Ss]aved|save completed|Checkpoint save completed for)\b.*?global_step_(\d+)"
)
_RESUME = re.compile(
    r"setting global step to (\d+)|Setting global step to (\d+)"
    r"|(?:Found checkpoint: (?:%s )?|Load from checkpoint folder: |Resuming from )\S*global_step_(\d+)"
)
_SCRATCH = re.compile(r"Training from scratch")
_VALIDATION = re.compile(r"(Initial|Final) validation metrics: ")
_DANGLING_QUOTE = re.compile(r"""(':\s*)["']""")
_VAL_PAIR = re.compile(r"'([^']+)':\s*(?:np\.float\d*\()?(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")
_RAY_TASK_ERROR = re.compile(r"RayTaskError\((\w+)\)")
_EXCEPTION = re.compile(
    r"^(?:\[[Rr]ank[ -]?\d+\]:?\s*)?(?:[A-Za-z_]\w*\.)*"
    r"([A-Za-z_]\w*(?:Error|Exception|Interrupt)|Exception|KeyboardInterrupt|SystemExit)(?::\s?(.*))?$"
)
_UNHANDLED = re.compile(r"Unhandled error \(suppress with|Error executing job with overrides")
_FRAME = re.compile(r'File "[^"]*", line \d+, in (\w+)|ray::\w+\.(\w+)\(\)')
_TRACE = re.compile(r"^\++ (?:export |declare -x )?([A-Z_][A-Z0-9_]*)=(.*)$")
_TRACE_CMD = re.compile(r"^\++ (.*verl\.trainer\.main_ppo.*)$")
_BRIDGE = re.compile(r"(\S*/megatron/bridge/__init__\.py)")
_DRIVER_RECORD = re.compile(r"verl-e2e: bridge import \((driver|ray-worker(?: pid \d+)?|pid \d+)\): (.+?)\s*$")
_NUMBER = re.compile(r"^(?:np\.float\d*\(|tensor\()?(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf))\)?$", re.I)
_RESIDUAL = re.compile(
    r"resource_tracker|DataLoader worker \(pid|Exception ignored in|atexit|during shutdown|"
    r"Ray is shutting down|worker_pool\.cc|core_worker\.cc.*(?:Exiting|shutdown)|leaked semaphore"
)

SERIES_KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/entropy_loss",
    "actor/kl_loss",
    "actor/ppo_kl",
    "actor/lr",
    "critic/vf_loss",
    "critic/grad_norm",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "critic/returns/mean",
    "response_length/mean",
    "training/global_step",
)
# One regex for the kept keys: the literal " - " prefix lets `re` skip quickly between pairs.
_SERIES_RX = re.compile(r" - (" + "|".join(re.escape(k) for k in SERIES_KEYS) + r"|val-core/[^:\s]*|val/[^:\s]*):(\S*)")


NAN_WATCHED = re.compile(r"loss|reward|score|kl|entropy|grad_norm|log_?prob|advantage")
MODEL_BUILD_FRAMES = frozenset(
    {
        "init_model",
        "_build_model_optimizer",
        "make_megatron_module",
        "get_model",
        "provide",
        "provide_distributed_model",
        "finalize",
        "_build_model",
        "build_model",
        "from_hf_pretrained",
        "to_megatron_provider",
        "get_peft_model",
        "create_peft",
    }
)
SAVE_FRAMES = frozenset({"save_checkpoint", "_save_checkpoint", "save_hf_weights", "save_hf_pretrained"})
LOAD_FRAMES = frozenset({"load_checkpoint", "_load_checkpoint", "load_hf_weights"})
IGNORED_EXCEPTIONS = frozenset({"KeyboardInterrupt", "SystemExit"})


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
    frames: list[str] = field(default_factory=list)
    residual_noise: list[str] = field(default_factory=list)
    key_lines: list[str] = field(default_factory=list)
    bytes_read: int = 0

    def to_json(self) -> dict[str, Any]:
        """Strict JSON: a non-finite metric value becomes the string verl printed ("nan", "inf")."""
        data = asdict(self)
        data["series"] = {k: [[s, _json_number(v)] for s, v in pts] for k, pts in self.series.items()}
        return data


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def clean_line(raw: str) -> str:
    """Strip Ray's actor prefix, ANSI codes and the `[repeated Nx across cluster]` suffix."""
    line = raw.strip("\r\n")
    if line.startswith(("(", "\x1b")):
        m = _RAY_PREFIX.match(line)
        if m:
            line = line[m.end() :]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.endswith("cluster]"):
        line = _REPEATED.sub("", line)
    return line


def parse_number(text: str) -> float | None:
    """verl's metric values: `0.123`, `2e-06`, `nan`, `-inf`, `np.float64(0.55)`."""
    m = _NUMBER.match(text.strip())
    return float(m.group(1)) if m else None


class LogParser:
    """Feed bytes in chunks; `finish()` returns the Evidence. Memory stays flat whatever the size."""

    def __init__(self, signatures: Iterable[Signature] | None = None, *, use_re2: bool = True) -> None:
        self.signatures = tuple(signatures) if signatures is not None else default_signatures()
        needles = set(BASE_NEEDLES) | {s.needle.encode() for s in self.signatures}
        self.needles = tuple(sorted(needles))
        self._failure_keys = tuple(
            {
                "rror",
                "xception",
                "nterrupt",
                'File "',
                "resource_tracker",
                *(s.needle for s in self.signatures),
            }
            - {"heckpoint"}
        )
        self._line_rx = self._line_rx_trace = None
        if _re2 is not None and use_re2:
            alternatives = b"|".join(re.escape(n) for n in self.needles)
            self._line_rx = _re2.compile(b"(?m)^[^\n]*(?:" + alternatives + b")[^\n]*")
            self._line_rx_trace = _re2.compile(b"(?m)^(?:(?:[^\n]*\r)?\\+[^\n]*|[^\n]*(?:" + alternatives + b")[^\n]*)")
        self.ev = Evidence()
        self._carry = b""
        self._first_line = True
        self._pending_validation: tuple[str, list[str]] | None = None
        self._awaiting_message: str | None = None
        self._grad_norms: list[tuple[float, bool]] = []  # (value, printed raw rather than rounded)
        self._signature_hits: dict[str, str] = {}
        self._frames: dict[str, None] = {}
        self._last_step_seen = False
        self._series_points = 0
        # An exception line inside a traceback (after frames, a RayTaskError or "Unhandled error") is a
        # real failure; a standalone `XError: ...` line may be a logged warning, so it is kept only
        # until a traceback-backed one appears.
        self._in_traceback = False
        self._exception_standalone = False
        self._residual: list[tuple[str, bool]] = []  # (line, a step line came before it)
        self._series: dict[str, list[float]] = {}  # key -> [step, value, step, value, ...]
        self.scan_trace = True  # a range after the first of a parallel parse has no wrapper trace

    # ------------------------------------------------------------------------------------ scanning

    def feed(self, chunk: bytes) -> None:
        self.ev.bytes_read += len(chunk)
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
        if self._pending_validation is not None:
            self._continue_validation(buf, -1)
        tracing = self.scan_trace and self.ev.command is None
        rx = self._line_rx_trace if tracing else self._line_rx
        if rx is not None:
            for m in rx.finditer(buf):
                self._hit(buf, m.start(), m.end())
        else:
            self._find_hits(buf, tracing)
        last = buf.rfind(PROGRESS)
        if last != -1:
            self._progress(
                clean_line(buf[last : last + 300].split(b"\n", 1)[0].split(b"\r", 1)[0].decode(errors="replace"))
            )

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

    def _following_lines(self, buf: bytes, pos: int, limit: int) -> Iterator[str]:
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

    # ------------------------------------------------------------------------------------ handlers

    def _line(self, line: str, buf: bytes, end: int) -> None:
        if not line:
            return
        if line.startswith("step:") and self._step(line):
            return
        if line.startswith("+"):
            self._trace(line)
            return
        if "global_step" in line or "global step" in line or "scratch" in line or "tracker" in line:
            self._checkpoint(line)
        if "bridge" in line:
            self._bridge(line)
        if any(k in line for k in self._failure_keys):
            self._failure(line)
        if "validation metrics: " in line:  # last: it may read ahead into the following lines
            self._validation(line, buf, end)

    def _progress(self, line: str) -> None:
        for m in _PROGRESS.finditer(line):
            self.ev.progress_final = f"{m.group(1)}/{m.group(2)}"
            self.ev.progress_total = int(m.group(2))

    def _step(self, line: str) -> bool:
        m = _STEP.match(line)
        if not m:
            return False
        step = int(m.group(1))
        ev = self.ev
        ev.step_lines += 1
        ev.max_step = step if ev.max_step is None else max(ev.max_step, step)
        self._last_step_seen = True
        # Only a few metrics are kept as series (what Level 5 judges) and validation scores: one
        # C-level findall instead of splitting ~100 pairs per line in Python.
        series, room, at = self._series, self._series_points < MAX_SERIES * 8, float(step)
        for key, raw in _SERIES_RX.findall(line, m.end() - 3):
            try:
                value = float(raw)
            except ValueError:
                parsed = parse_number(raw)
                if parsed is None:
                    continue
                value = parsed
            if value - value != 0.0:  # NaN or +-Inf
                self._non_finite(step, key, raw)
            if key == "actor/grad_norm":
                self._grad_norms.append((value, "." not in raw or len(raw.rsplit(".", 1)[1]) != 3))
            flat = series.get(key)
            if flat is None:
                flat = series[key] = []
            if room and len(flat) < 2 * MAX_SERIES:
                flat.append(at)  # flat floats: no object per point for the GC to walk
                flat.append(value)
                self._series_points += 1
        if "nan" in line:  # kept keys were checked above; this catches a NaN in any other metric
            for key, raw in _PAIR.findall(line, m.end()):
                parsed = parse_number(raw)
                if parsed is not None and math.isnan(parsed):
                    self._non_finite(step, key, raw)
        return True

    def _non_finite(self, step: int, key: str, raw: str) -> None:
        if not NAN_WATCHED.search(key):
            return
        ev = self.ev
        ev.nan_or_inf_in_metrics = True
        entry = f"step {step}: {key}={raw}"
        if len(ev.nan_metrics) < MAX_ITEMS and entry not in ev.nan_metrics:
            ev.nan_metrics.append(entry)

    def _trace(self, line: str) -> None:
        m = _TRACE.match(line)
        if m and len(self.ev.traced_env) < 500:
            self.ev.traced_env[m.group(1)] = m.group(2).strip().strip("'\"")
            return
        c = _TRACE_CMD.match(line)
        if c and self.ev.command is None:
            self.ev.command = c.group(1)[:4000]

    def _validation(self, line: str, buf: bytes, end: int) -> None:
        m = _VALIDATION.search(line)
        if not m:
            return
        text = line[m.end() :]
        if "None" in text[:6]:
            return
        self._pending_validation = (m.group(1), [text])
        self._key(f"{m.group(1)} validation metrics logged")
        if "}" in text:
            self._close_validation()
        else:
            self._continue_validation(buf, end)

    def _continue_validation(self, buf: bytes, pos: int) -> None:
        """Collect the pprint-wrapped lines of a validation dict, across a chunk boundary if needed."""
        assert self._pending_validation is not None
        parts = self._pending_validation[1]
        for follow in self._following_lines(buf, pos, 40):
            parts.append(follow)
            if "}" in follow or len(parts) > 40:
                self._close_validation()
                return

    def _close_validation(self) -> None:
        assert self._pending_validation is not None
        which, parts = self._pending_validation
        self._pending_validation = None
        values = {k: float(v) for k, v in _VAL_PAIR.findall(_unquote(parts))}
        if which == "Initial":
            self.ev.initial_validation = values
        else:
            self.ev.final_validation = values

    def _checkpoint(self, line: str) -> None:
        ev = self.ev
        if _SCRATCH.search(line):
            ev.from_scratch = True
            self._key(line)
            return
        if "tracker file does not exist" in line:
            ev.tracker_missing = True
            return
        if line.startswith(("Loading from", "Loaded", "Loading")) or ("[rank" in line and "Loading" in line):
            return
        s = _SAVE.search(line)
        if s:
            step = int(next(g for g in s.groups() if g is not None))
            if step not in ev.saves:
                ev.saves.append(step)
                self._key(line)
            return
        r = _RESUME.search(line)
        if r:
            step = int(next(g for g in r.groups() if g is not None))
            if ev.resumed_from != step:
                ev.resumed_from = step
                self._key(line)

    def _bridge(self, line: str) -> None:
        rec = _DRIVER_RECORD.search(line)
        if rec:
            where, path = rec.group(1), rec.group(2)
            if where.startswith("ray-worker pid "):  # the probe in one of verl's Ray workers
                self.ev.bridge_imports.setdefault("ray-worker", path)
                where = "pid"
            if where.startswith("pid"):  # the import probe inside verl's own processes
                seen = self.ev.bridge_imports.setdefault("processes", [])
                if path not in seen and len(seen) < MAX_ITEMS:
                    seen.append(path)
                    self._key(line)
            else:
                self.ev.bridge_imports[where] = path
                self._key(line)
            return
        b = _BRIDGE.search(line)
        if b:
            others = self.ev.bridge_imports.setdefault("other", [])
            if b.group(1) not in others and len(others) < MAX_ITEMS:
                others.append(b.group(1))

    def _failure(self, line: str) -> None:
        ev = self.ev
        for f in _FRAME.finditer(line):
            self._in_traceback = True
            name = f.group(1) or f.group(2)
            if name and len(self._frames) < 500:
                self._frames[name] = None
                if name.startswith("actor_rollout_"):
                    self._frames[name.removeprefix("actor_rollout_")] = None
        for sig in self.signatures:
            if sig.name not in self._signature_hits and sig.needle in line and sig.regex.search(line):
                self._signature_hits[sig.name] = line[:500]
        if _RESIDUAL.search(line):
            if len(self._residual) < MAX_ITEMS:
                self._residual.append((line[:300], self._last_step_seen))
            return
        if _UNHANDLED.search(line):
            ev.unhandled_error = True
            self._in_traceback = True
        ray = _RAY_TASK_ERROR.search(line)
        if ray:
            self._in_traceback = True
            if ev.exception is None or self._exception_standalone:
                self._exception_standalone = False
                ev.exception = {"type": ray.group(1), "message": ""}
                self._awaiting_message = ray.group(1)
                self._key(line)
            return
        m = _EXCEPTION.match(line.strip())
        if not m:
            return
        in_traceback, self._in_traceback = self._in_traceback, False
        etype, message = m.group(1), (m.group(2) or "").strip()
        if etype in IGNORED_EXCEPTIONS:
            ev.interrupted = ev.interrupted or etype == "KeyboardInterrupt"
            return
        if ev.exception is None or (self._exception_standalone and in_traceback):
            ev.exception = {"type": etype, "message": message[:500]}
            self._exception_standalone = not in_traceback
            self._key(line)
        elif self._awaiting_message == etype and not ev.exception["message"] and message:
            ev.exception["message"] = message[:500]
            self._awaiting_message = None
            self._key(line)

    def _key(self, line: str) -> None:
        text = line[:300]
        if len(self.ev.key_lines) < MAX_ITEMS and text not in self.ev.key_lines:
            self.ev.key_lines.append(text)

    # ------------------------------------------------------------------------------------ summary

    def flush(self) -> None:
        """Scan a last line that had no newline."""
        if self._carry:
            self._scan(self._carry + b"\n")
            self._carry = b""

    def finish(self) -> Evidence:
        self.flush()
        self.ev.residual_noise = [line for line, after_step in self._residual if after_step]
        return self.summarize()

    def summarize(self) -> Evidence:
        """Derive the summary fields (stage, failure class, ...) from what was collected."""
        ev = self.ev
        ev.saves = sorted(set(ev.saves))
        ev.frames = list(self._frames)[:MAX_ITEMS]
        ev.zero_grad_norm = _stuck_at_zero(self._grad_norms)
        ev.series = {k: [[f[i], f[i + 1]] for i in range(0, len(f), 2)] for k, f in self._series.items()}
        ev.stage = self._stage()
        ev.failure_class, ev.failure_signature, ev.failure_line, ev.hint = self._classify()
        return ev

    def _stage(self) -> str:
        """How far the run got: setup < model_build < training < checkpoint < done."""
        ev, frames = self.ev, self._frames.keys()
        done = ev.progress_total is not None and ev.max_step is not None and ev.max_step >= ev.progress_total
        if done or ev.final_validation is not None:
            return "done"
        if ev.saves or frames & SAVE_FRAMES:
            return "checkpoint"
        if ev.step_lines or ev.progress_final is not None or ev.resumed_from is not None:
            return "training"
        if frames & (MODEL_BUILD_FRAMES | LOAD_FRAMES):
            return "model_build"
        return "setup"

    def _classify(self) -> tuple[str, str | None, str | None, str | None]:
        ev = self.ev
        failed = ev.exception is not None or ev.unhandled_error
        by_name = {s.name: s for s in self.signatures}
        strong = [s for s in self.signatures if s.failure_class != "runtime" and s.name in self._signature_hits]
        if strong:
            s = strong[0]
            return s.failure_class, s.name, self._signature_hits[s.name], s.hint
        if ev.interrupted and ev.exception is None:
            return "interrupted", None, None, "the run was interrupted (Ctrl-C or a cancelled job); rerun it"
        frames = self._frames.keys()
        if failed or self._signature_hits:
            if frames & LOAD_FRAMES:
                return "checkpoint_load", None, None, "rerun Level 1 to separate saving from loading"
            if frames & SAVE_FRAMES:
                return (
                    "checkpoint_save",
                    None,
                    None,
                    "rerun with SAVE_FREQ=-1 to separate construction from checkpointing",
                )
            if frames & MODEL_BUILD_FRAMES:
                return (
                    "model_build",
                    None,
                    None,
                    "check the provider is finalized with verl's mpu parallel sizes",
                )
        if ev.exception is not None and ev.exception["type"] in ("ImportError", "ModuleNotFoundError"):
            return (
                "setup",
                None,
                None,
                "a dependency is missing or mismatched in the image; fix the environment",
            )
        if ev.exception is not None and ev.exception["type"] == "FileNotFoundError" and ev.stage == "setup":
            return "setup", None, None, "a data or model file is missing; run the cache warm-up"
        weak = [by_name[n] for n in self._signature_hits if by_name[n].failure_class == "runtime"]
        if weak and (failed or ev.stage != "done"):
            s = weak[0]
            return "runtime", s.name, self._signature_hits[s.name], s.hint
        if failed:
            return "runtime", None, None, None
        if ev.nan_or_inf_in_metrics:
            return (
                "nan",
                None,
                None,
                "NaN/Inf in training metrics; check loss scaling, LR and the provider's init",
            )
        return "none", None, None, None


def _unquote(parts: list[str]) -> str:
    """Join pprint-wrapped string fragments: `("Final ...: {'a': "` + ` '0.8}')` -> `{'a': 0.8}`."""
    out = []
    for part in parts:
        p = part.strip()
        if p.startswith("("):
            p = p[1:]
        if p.endswith(")"):
            p = p[:-1]
        if len(p) >= 2 and p[0] in "'\"" and p[-1] == p[0]:
            p = p[1:-1]
        out.append(p)
    # The header's remainder still ends in the quote that opened pprint's next fragment: `...': "`.
    return _DANGLING_QUOTE.sub(r"\1", "".join(out))


def _stuck_at_zero(values: list[tuple[float, bool]]) -> bool:
    """Grad norm stuck at zero: several steps all exactly zero, or one step printed unrounded as 0."""
    if not values or any(v != 0 for v, _ in values):
        return False
    return len(values) >= 2 or values[0][1]


def render_evidence(ev: Evidence) -> str:
    """A short human reading of a log's evidence."""
    exc = f"{ev.exception['type']}: {ev.exception['message'][:200]}" if ev.exception else "none"
    rows = [
        ("stage reached", ev.stage),
        ("failure class", ev.failure_class + (f" ({ev.failure_signature})" if ev.failure_signature else "")),
        ("first exception", exc),
        ("steps", f"{ev.step_lines} step lines, last step {ev.max_step}"),
        ("progress", ev.progress_final or "none"),
        ("saves", ", ".join(map(str, ev.saves)) or "none"),
        (
            "resume",
            f"from step {ev.resumed_from}"
            if ev.resumed_from is not None
            else ("from scratch" if ev.from_scratch else "not shown"),
        ),
        ("NaN/Inf", ", ".join(ev.nan_metrics[:3]) or "none"),
        ("VANILLA_MBRIDGE", ev.traced_env.get("VANILLA_MBRIDGE", "not traced")),
        (
            "Bridge imports",
            ", ".join(f"{k}={v}" for k, v in ev.bridge_imports.items() if k != "other") or "not recorded",
        ),
        ("hint", ev.hint or "none"),
    ]
    width = max(len(k) for k, _ in rows)
    return "".join(f"{k:<{width}}  {v}\n" for k, v in rows)


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
