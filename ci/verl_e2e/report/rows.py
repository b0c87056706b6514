"""One table row per cell: result, duration, how much changed code ran, where it failed, the key line.

The culprit frame (file:line and function) is the first thing a maintainer looks for in a failed
row, so it has a column of its own and is never cut; the cause beside it is cut instead. A verdict
carries the culprit only inside its headline (the judge appends it as a trailing parenthesis), so
the row reads it back from there, in the judge's four forms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from verl_e2e.judge.verdict import Verdict
from verl_e2e.report.markup import span
from verl_e2e.report.regression import says

ICON = {"Pass": "✅", "Fail": "❌", "Blocked": "⛔", "Skipped": "⏭️", "Not requested": "·"}
ORDER = {"Fail": 0, "Blocked": 1, "Pass": 2, "Skipped": 3}
CAUSE_CHARS = 240  # the cause beside the culprit is cut here; the block below repeats it whole only then

_CHANGED_LINE, _CHANGED_FUNCTION, _UNCHANGED = (
    "a line this PR changed",
    "in a function this PR changed",
    "not changed by this PR",
)
_CULPRIT = (  # (pattern at the end of a headline, what the row says about the PR's part in it)
    (re.compile(r" \(in code this PR changed: `(?P<loc>[^`]+)` in `(?P<fn>[^`]+)`\)$"), _CHANGED_LINE),
    (re.compile(r" \(in a function this PR changed: `(?P<fn>[^`]+)` at `(?P<loc>[^`]+)`\)$"), _CHANGED_FUNCTION),
    (re.compile(r" \(at (?P<loc>[^()]+?) in (?P<fn>[^();]+); not in code this PR changed\)$"), _UNCHANGED),
    (re.compile(r" \(at (?P<loc>[^()]+?) in (?P<fn>[^();]+)\)$"), ""),
    (re.compile(r" \((?P<where>raised in .+)\)$"), ""),
    (re.compile(r" \(changed code this cell ran: (?P<where>.+)\)$"), "no traceback: changed code this cell ran"),
)


@dataclass(frozen=True)
class Culprit:
    where: str  # "path:line in function", or the owner chain when no Bridge frame was named
    changed: str  # what the PR had to do with it, where the judge said
    cause: str  # the headline's cause with the culprit taken off


def culprit(v: Verdict) -> Culprit:
    """The failing frame the judge named in the headline, and the cause without it."""
    cause = v.headline.split(": ", 1)[-1] if v.result in ("Fail", "Blocked") else ""
    for pattern, changed in _CULPRIT:
        m = pattern.search(cause)
        if m is None:
            continue
        found = m.groupdict()
        where = (found.get("where") or "").replace("`", "") or f"{found['loc']} in {found['fn']}"
        return Culprit(where, changed, cause[: m.start()])
    return Culprit("", "", cause)


def key_line(v: Verdict) -> str:
    """The row's last column: the cause of a failure (versus the merge base, where known), or the
    last training step of a pass."""
    if v.result in ("Fail", "Blocked"):
        versus = says(v)
        cause = culprit(v).cause
        cause = cause if len(cause) <= CAUSE_CHARS else cause[: CAUSE_CHARS - 1] + "…"
        return ((versus + ": ") if versus else "") + cause
    return next(
        (k for k in reversed(v.key_lines) if "training/global_step" in k),
        v.key_lines[-1] if v.key_lines else "",
    )[:CAUSE_CHARS]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def time_spent(v: Verdict) -> str:
    """The cell's wall time and, where verl timed its steps, how much of it was the steps themselves:
    '6m 20s (steps 1m 21s)' says the start-up, not the PPO step, is what a faster cell must cut."""
    phases = (v.timings or {}).get("phases") or []
    steps = sum(p.get("steps_s", 0.0) for p in phases if isinstance(p, dict))
    return duration(v.duration_s) + (f" (steps {duration(steps)})" if steps else "")


def changed_code(v: Verdict) -> str:
    """How much of the PR's changed code the cell ran: '3 of 4', or a warning when none."""
    cov = v.coverage or {}
    ran, missed = len(cov.get("executed") or ()), len(cov.get("not_executed") or ())
    if not ran + missed:
        return "-"
    return f"{ran} of {ran + missed}" + (" (none ran)" if not ran else "")


def _where(v: Verdict) -> str:
    found = culprit(v)
    if not found.where:
        return ""
    return span(found.where) + (f" ({found.changed})" if found.changed else "")


def ordered(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Failures first, then by level and cell id: the rows a reader needs are at the top."""
    return sorted(verdicts, key=lambda v: (ORDER.get(v.result, 9), v.level, v.cell_id))


def table(verdicts: Sequence[Verdict]) -> list[str]:
    """The header, the alignment row and one row per cell; the "Changed code ran" column appears
    once the plan named changed functions, "Where it failed" once a cell failed."""
    if not verdicts:
        return []
    covered = any(v.coverage for v in verdicts)
    failed = any(v.result in ("Fail", "Blocked") for v in verdicts)
    head = ["Cell", "Model", "Result", "Duration"] + ["Changed code ran"] * covered
    head += ["Where it failed"] * failed + ["Key line"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in ordered(verdicts):
        cols = [span(v.cell_id), span(v.model), f"{ICON.get(v.result, '')} {v.result}", time_spent(v)]
        cols += [changed_code(v)] * covered + [_where(v)] * failed + [span(key_line(v))]
        rows.append("| " + " | ".join(cols) + " |")
    return rows
