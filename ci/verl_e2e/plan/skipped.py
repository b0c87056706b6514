"""Why a level was not selected, in words a PR author can act on (and how to ask for it anyway).

Split from `select` so the selection walk stays one screen per step; pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from verl_e2e.config.matrix import Matrix


def skip_reason(
    matrix: Matrix,
    level: int,
    requested: str,
    *,
    changed: int,
    ignored: Mapping[str, Sequence[str]],
    undecided: Mapping[int, set[str]],
) -> str:
    """`changed`: how many files changed; `ignored`: ignore group -> paths; `undecided`: level -> the
    rules and aspects that needed the diff to decide and did not have it."""
    if requested != "auto":
        return "not requested"
    if not changed:
        return "no changed files"
    if sum(map(len, ignored.values())) == changed:
        return "every changed path is ignored (" + ", ".join(sorted(ignored)) + ")"
    rules = [r.name for r in (*matrix.escalations, *matrix.rules) if level in r.levels]
    if level == 4:
        rules.append("architecture (MoE/VLM/MTP families)")
    listed = ", ".join(rules)
    text = f"no changed path matched its rules ({listed})" if rules else "no rule selects it"
    if matrix.levels[level].optional:
        text = f"optional: runs only on request or when a changed path matches its rules ({listed})"
    if undecided.get(level):
        text += "; " + ", ".join(sorted(undecided[level])) + " needs the diff to decide (plan with --diff or --repo)"
    return text
