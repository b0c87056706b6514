"""Layout conditions the line records refute: a recorded cell ran the code around a change in a layout
its conditions allow and still did not take the changed lines.

`if use_grouped_expert_adapter:` reads like a MoE-only branch (layout.py counts `expert` as the model's
kind), so a change under it would go to the MoE variants. But the MoE cells that recorded their lines ran
`LoRA.transform` on a MoE model and never entered that block: what keeps it off is a setting every cell
shares (verl never asks for grouped expert adapters), not the layout. Such lines run in no cell, and the
plan says so instead of running the MoE levels for them. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import layout
from verl_e2e.plan.branches import Branch
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.layout import Layout
from verl_e2e.plan.runtime import Ran, executed


def refuted(matrix: Matrix, file: ChangedFile, ran: Sequence[Ran]) -> str | None:
    """Why no cell runs a change whose every changed line sits under layout conditions that the layout of
    a recorded cell with line records for the same base file satisfies, where that cell ran the code
    around the change and none of the recorded cells took its lines; None otherwise, and None under a test
    on a handed-over type or tensor rank, which records of one library version and model kind cannot settle."""
    if not file.functions or file.module_level or not file.branches or not file.base_lines or file.typed_conditions:
        return None
    base = file.old_path or file.path
    only, unnamed = file.methods_only, file.unnamed_methods
    around = executed(ran, base, file.scopes, False, file.functions, methods_only=only, unnamed_methods=unnamed)
    recorded = [(r, lines) for r, _ in around if (lines := r.ran_lines(base, file.old_blob)) is not None]
    if not recorded or any(lines & set(file.base_lines) for _, lines in recorded):
        return None
    allowing = {r.cell for r, _ in recorded if all(_allows(_layout(matrix, r), b) for b in file.branches)}
    if not allowing:
        return None
    shown = ", ".join(sorted(allowing)[:3])
    return (
        f"{shown} ran the code around them in a layout their conditions allow and did not take them: what keeps "
        "them off is a setting every cell shares, not the layout"
    )


def _allows(cell_layout: Layout | None, branch: Branch) -> bool:
    return cell_layout is not None and all(layout.can_hold(t, holds, cell_layout) for t, holds in branch.tests())


def _layout(matrix: Matrix, r: Ran) -> Layout | None:
    """The layout a recorded cell ran in (a MoE family's model has experts); None for a variant the matrix
    no longer has."""
    level = matrix.levels.get(r.level)
    variant = next((v for v in level.variants if v.name == r.variant), None) if level is not None else None
    if variant is None:
        return None
    found = layout.layout_of(matrix, r.level, variant)
    family = matrix.families.get(r.family)
    return replace(found, moe=True) if family is not None and family.has("moe") else found


def refute_callers(matrix: Matrix, file: ChangedFile, ran: Sequence[Ran]) -> ChangedFile:
    """The file with each Bridge call of the change that sits under layout conditions turned "untaken"
    where a recorded cell whose layout holds those conditions ran the calling function and not the call
    (`if adapter_task.requires_expert_splits:` reads as MoE-only; the MoE cells' adapter exports ran
    around it at every sync). Its branches no longer pick a level; the plan says no cell runs it."""
    if not file.callers or not file.caller_skipped:
        return file
    cells = {r.cell: r for r in ran}
    refuted_at = {
        (path, line)
        for path, line, skipped in file.caller_skipped
        if any(
            all(_allows(_layout(matrix, cells[c]), b) for b in file.caller_branches if b.line == line)
            for c in skipped
            if c in cells
        )
    }
    if not refuted_at:
        return file
    callers = tuple((p, n, f, "untaken" if (p, n) in refuted_at else how) for p, n, f, how in file.callers)
    lines = {n for _, n in refuted_at}
    kept = tuple(b for b in file.caller_branches if b.line not in lines)
    return replace(file, callers=callers, caller_branches=kept)
