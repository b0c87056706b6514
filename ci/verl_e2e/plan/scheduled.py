"""The scheduled full run's plan: what replaces a hand-run weekly verl job on the default branch.

Every model family's Level 0 (does each registered architecture still build and train one step in verl
with the current Bridge and Megatron?) and the multi-GPU layouts Bridge's weekly job runs (matrix.yaml
variants marked `scheduled`), once each on the default family. No change is diffed, no budget applies:
the run's purpose is coverage of the base branch itself, and its records refresh selection's index.
"""

from __future__ import annotations

from dataclasses import replace

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.cells import Cell, scheduled_cells
from verl_e2e.plan.select import Reason, Selection, select

WHY = "scheduled full run: every family's Level 0 and the weekly multi-GPU layouts"


def plan(matrix: Matrix) -> tuple[Selection, list[Cell]]:
    cells = scheduled_cells(matrix)
    base = select(matrix, [], requested=[0], family_override=sorted(matrix.families))
    targets = {lv: dict(fams) for lv, fams in base.targets.items()}
    reasons = {lv: list(rs) for lv, rs in base.reasons.items()}
    for cell in cells:
        if cell.level == 0:
            continue
        kinds = set(targets.setdefault(cell.level, {}).get(cell.family, frozenset())) | {cell.variant}
        targets[cell.level][cell.family] = frozenset(kinds)
        reasons.setdefault(cell.level, []).append(Reason("scheduled", f"{WHY} ({cell.variant})", cell.family, ()))
    levels = tuple(sorted(targets))
    return (
        replace(
            base,
            levels=levels,
            targets=targets,
            reasons={lv: tuple(rs) for lv, rs in sorted(reasons.items())},
            skipped={lv: why for lv, why in base.skipped.items() if lv not in levels},
            requested="scheduled",
        ),
        cells,
    )
