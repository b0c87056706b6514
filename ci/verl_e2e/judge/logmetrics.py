"""verl's metrics in a log: `step:N - key:value` lines, NaN/Inf, grad norms, validation dicts.

Only a few series are kept (what Level 5 judges) and every value form verl has printed is read:
v0.4's `{v:.3f}`, v0.5+ raw reprs, numpy's `np.float64(...)`. Validation dicts are pprinted, quoted
and sometimes split over lines; the parser hands their lines over until the closing brace.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from verl_e2e.judge.logtext import parse_number

MAX_SERIES = 20_000  # points kept per metric series
MAX_ITEMS = 50
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
    "rollout_corr/k3_kl",  # rollout engine vs trainer log-probs: does the rollout run the trained weights?
    "training/rollout_actor_probs_pearson_corr",
    "timing_s/step",  # where a step's time went (judge/timing.py)
    "timing_s/gen",
    "timing_s/update_actor",
    "timing_s/update_weights",
)
NAN_WATCHED = re.compile(r"loss|reward|score|kl|entropy|grad_norm|log_?prob|advantage")
STEP = re.compile(r"step:(\d+)(?: - |\s*$)")
_PAIR = re.compile(r"([^\s:][^:]*?):(\S+)(?: - |\s*$)")
# one regex for the kept keys: the literal " - " prefix lets `re` skip quickly between pairs
# every key under these (MTP: Level 4's check; verl's top-level step timers: judge/timing.py sums them)
_PREFIXED = r"|val-core/[^:\s]*|val/[^:\s]*|actor/mtp_losses/[^:\s]*|timing_s/[^:\s/]*"
_SERIES_RX = re.compile(r" - (" + "|".join(re.escape(k) for k in SERIES_KEYS) + _PREFIXED + r"):(\S*)")
VALIDATION = re.compile(r"(Initial|Final) validation metrics: ")
_DANGLING_QUOTE = re.compile(r"""(':\s*)["']""")
_VAL_PAIR = re.compile(r"'([^']+)':\s*(?:np\.float\d*\()?(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")


@dataclass
class Metrics:
    """Step lines and validation dicts, line by line; `absorb` folds in a later range."""

    step_lines: int = 0
    max_step: int | None = None
    nan: bool = False
    nan_metrics: list[str] = field(default_factory=list)
    grad_norms: list[tuple[float, bool]] = field(default_factory=list)  # (value, printed unrounded)
    series: dict[str, list[float]] = field(default_factory=dict)  # key -> [step, value, step, value, ...]
    points: int = 0
    initial_validation: dict[str, float] | None = None
    final_validation: dict[str, float] | None = None
    pending: tuple[str, list[str]] | None = None  # a validation dict still being read

    def step(self, line: str) -> bool:
        m = STEP.match(line)
        if not m:
            return False
        step = int(m.group(1))
        self.step_lines += 1
        self.max_step = step if self.max_step is None else max(self.max_step, step)
        room, at = self.points < MAX_SERIES * 8, float(step)
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
                self.grad_norms.append((value, "." not in raw or len(raw.rsplit(".", 1)[1]) != 3))
            flat = self.series.setdefault(key, [])
            if room and len(flat) < 2 * MAX_SERIES:
                flat.append(at)  # flat floats: no object per point for the GC to walk
                flat.append(value)
                self.points += 1
        if "nan" in line:  # kept keys were checked above; this catches a NaN in any other metric
            for key, raw in _PAIR.findall(line, m.end()):
                parsed = parse_number(raw)
                if parsed is not None and math.isnan(parsed):
                    self._non_finite(step, key, raw)
        return True

    def _non_finite(self, step: int, key: str, raw: str) -> None:
        if not NAN_WATCHED.search(key):
            return
        self.nan = True
        entry = f"step {step}: {key}={raw}"
        if len(self.nan_metrics) < MAX_ITEMS and entry not in self.nan_metrics:
            self.nan_metrics.append(entry)

    def start_validation(self, line: str) -> str | None:
        """A validation header; returns its key line, or None. Sets `pending` while lines are due."""
        m = VALIDATION.search(line)
        if not m:
            return None
        text = line[m.end() :]
        if "None" in text[:6]:
            return None
        self.pending = (m.group(1), [text])
        if "}" in text:
            self.close_validation()
        return f"{m.group(1)} validation metrics logged"

    def continue_validation(self, line: str) -> bool:
        """One more line of the pending dict; True when the dict is complete."""
        assert self.pending is not None
        parts = self.pending[1]
        parts.append(line)
        if "}" in line or len(parts) > 40:
            self.close_validation()
            return True
        return False

    def close_validation(self) -> None:
        assert self.pending is not None
        which, parts = self.pending
        self.pending = None
        values = {k: float(v) for k, v in _VAL_PAIR.findall(_unquote(parts))}
        if which == "Initial":
            self.initial_validation = values
        else:
            self.final_validation = values

    def absorb(self, later: Metrics) -> None:
        self.step_lines += later.step_lines
        if later.max_step is not None:
            self.max_step = later.max_step if self.max_step is None else max(self.max_step, later.max_step)
        self.nan = self.nan or later.nan
        self.nan_metrics = (self.nan_metrics + later.nan_metrics)[:MAX_ITEMS]
        self.grad_norms += later.grad_norms
        for key, flat in later.series.items():
            into = self.series.setdefault(key, [])
            into += flat[: 2 * MAX_SERIES - len(into)]
        self.initial_validation = self.initial_validation or later.initial_validation
        self.final_validation = later.final_validation or self.final_validation

    def zero_grad_norm(self) -> bool:
        """Grad norm stuck at zero: several steps all exactly zero, or one step printed unrounded as 0."""
        values = self.grad_norms
        if not values or any(v != 0 for v, _ in values):
            return False
        return len(values) >= 2 or values[0][1]

    def series_points(self) -> dict[str, list[list[float]]]:
        return {k: [[f[i], f[i + 1]] for i in range(0, len(f), 2)] for k, f in self.series.items()}


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
