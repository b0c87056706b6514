"""Did this PR break the cell, or was it already broken on the merge base? (cf. Dr. CI's "broken trunk")

A failed or blocked cell is compared with the same cell run on the PR's merge base: the same cell id,
and where both runs recorded them, the same image digest, verl commit and runner kind (otherwise the
two runs are not the same experiment and the answer is "unknown"). Outcomes:

* new: the base passed, so this PR broke it;
* pre-existing: the base failed the same way (same failure class and the same first exception, with
  numbers and addresses masked), so the PR is not to blame;
* changed: the base failed differently;
* unknown: there is no base result (or not a comparable one);
* behind: the merge base fails the same way, but it is not the base branch's tip (the PR branched
  from an older commit): it has never met current main, so nothing excuses it; rebase and rerun.
A base result counts only if its provenance shows it tested the merge base itself (a run dir left
by an older run on a runner that is not wiped tested some other commit).
Pure; base verdicts come from run dirs that were re-judged, never from a stored verdict.json.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from verl_e2e.judge.verdict import Verdict

Outcome = Literal["new", "pre-existing", "changed", "unknown", "behind"]
SAYS = {
    "new": "new in this PR",
    "pre-existing": "already failing on the merge base",
    "changed": "changed failure (the merge base failed differently)",
    "unknown": "unknown (no comparable result on the merge base)",
    "behind": "failing on an old merge base (not the base branch's tip): rebase and rerun",
}
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|\b\d+(?:\.\d+)?\b|/tmp/\S+|pid=\d+")


def _runner(v: Verdict) -> str:
    return ",".join(sorted(str(x) for x in (v.repos.get("runner") or [])))


def _key(v: Verdict) -> dict[str, str]:
    """What must match for two runs of a cell to be the same experiment (where both recorded it)."""
    image = v.repos.get("image") or {}
    verl = v.repos.get("verl") or {}
    return {
        "image digest": str(image.get("id") or "") if isinstance(image, dict) else "",
        "verl commit": str(verl.get("full_commit") or verl.get("commit") or "") if isinstance(verl, dict) else "",
        "runner": _runner(v),
    }


def _same_failure(a: Verdict, b: Verdict) -> bool:
    def first(v: Verdict) -> str:
        return _VOLATILE.sub("N", v.exception or "")

    return a.failure_class == b.failure_class and first(a) == first(b)


def compare(v: Verdict, base: Verdict | None, merge_base: str = "", base_tip: str = "") -> dict[str, str] | None:
    """The comparison of a failed or blocked cell with its merge-base run; None for a Pass.

    `merge_base`: the commit the base run must have tested; `base_tip`: the base branch's tip, where
    known (a failure is pre-existing only when the merge base is that tip)."""
    if v.result == "Pass":
        return None
    if base is None:
        return {"outcome": "unknown", "reason": "no result for this cell on the merge base"}
    if base.cell_id != v.cell_id:
        return {"outcome": "unknown", "reason": f"the base result is for {base.cell_id}, not {v.cell_id}"}
    tested = str((base.repos.get("bridge") or {}).get("full_commit") or "")
    if merge_base and tested != merge_base:
        what = f"Bridge {tested[:12]}" if tested else "no recorded Bridge commit"
        return {"outcome": "unknown", "reason": f"the base run tested {what}, not the merge base {merge_base[:12]}"}
    here, there = _key(v), _key(base)
    differs = [k for k in here if here[k] and there[k] and here[k] != there[k]]
    if differs:
        return {"outcome": "unknown", "reason": f"the merge-base run differs in {', '.join(differs)}"}
    shown = f"base: {base.result}" + (f", {base.failure_class}: {base.exception}" if base.exception else "")
    if base.result == "Pass":
        return {"outcome": "new", "reason": "the merge base passed this cell", "base": shown}
    if _same_failure(v, base):
        if merge_base and base_tip and merge_base != base_tip:
            reason = (
                f"the merge base {merge_base[:12]} fails the same way, but the base branch is now at "
                f"{base_tip[:12]}: rebase onto it so the change meets current main"
            )
            return {"outcome": "behind", "reason": reason, "base": shown}
        return {"outcome": "pre-existing", "reason": "the merge base fails the same way", "base": shown}
    return {"outcome": "changed", "reason": "the merge base fails differently", "base": shown}


def annotate(
    verdicts: Sequence[Verdict], base: Mapping[str, Verdict], merge_base: str = "", base_tip: str = ""
) -> list[Verdict]:
    """Each verdict with its comparison against the base verdict of the same cell id."""
    return [replace(v, comparison=compare(v, base.get(v.cell_id), merge_base, base_tip)) for v in verdicts]


def counts_against_the_pr(v: Verdict, pre_existing_fails: bool) -> bool:
    """Whether a cell's failure fails the check: a pre-existing one does only where the site says so."""
    if v.result == "Pass":
        return False
    outcome = (v.comparison or {}).get("outcome")
    return pre_existing_fails or outcome != "pre-existing"


def says(v: Verdict) -> str:
    outcome = (v.comparison or {}).get("outcome")
    return SAYS.get(outcome, "") if outcome else ""
