"""A rewritten test on the parallel layout: the first cell whose layout it now decides differently.

`if pp_size > 1 and vp_size is not None:` rewritten to `... or ...` is entered, or not, exactly as before
at TP = PP = 1: Level 0 runs the line and sees nothing. At PP = 2 without VPP the new test holds where the
old did not. For each removed test paired with an added one (in order, from `if`/`elif`/`while` headers
and `return`ed conditions that read a layout dimension), the layouts of the PR's cells are tried,
cheapest first: the first cell where the two tests can come out differently is the level that sees the
change. Nothing when Level 0's layout already decides them differently (Level 0 sees it), or when no cell
does (the branch rules and records decide as before). Pure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import replace

from verl_e2e.plan import layout
from verl_e2e.plan.branches import VOCABULARY
from verl_e2e.plan.layout import CellLayout

_TEST = re.compile(r"^\s*(?:if|elif|while)\b\s*(.*?)\s*:\s*(?:#.*)?$|^\s*return\s+(.*\S)\s*$")


def _test(line: str) -> ast.expr | None:
    m = _TEST.match(line)
    text = (m.group(1) or m.group(2)) if m else None
    if not text or not VOCABULARY.search(text):
        return None
    node = layout.parse(text)
    return node if node is not None and layout.reads(node) else None


def first_cell(
    cells: Sequence[CellLayout], removed: Sequence[str], added: Sequence[str], moe_family: bool
) -> tuple[CellLayout, str, str] | None:
    """(the first cell whose layout decides a rewritten test differently, old test, new test), or None."""
    old = [(t, line.strip()) for line in removed if (t := _test(line)) is not None]
    new = [(t, line.strip()) for line in added if (t := _test(line)) is not None]
    for (was, was_text), (now, now_text) in zip(old, new, strict=False):
        found = [c for c in cells if not c.scheduled and _decides_differently(c, was, now, moe_family)]
        if found and not (found[0].level == 0 and found[0].kind == "all"):
            return found[0], was_text, now_text
    return None


def deciding_levels(cells: Sequence[CellLayout], removed: Sequence[str], added: Sequence[str]) -> tuple[int, set[int]]:
    """(how many changed lines are paired rewritten layout tests, the levels with a PR cell that decides
    some pair differently on a dense or a MoE model). A level that decides every pair as before runs the
    rewritten test and sees nothing new: `if self.pre_process:` made `if self.post_process:` is the same
    test at PP = 1, whatever the file's family or words."""
    old = [t for line in removed if (t := _test(line)) is not None]
    new = [t for line in added if (t := _test(line)) is not None]
    pairs = list(zip(old, new, strict=False))
    levels = {
        c.level
        for was, now in pairs
        for c in cells
        for moe in (False, True)
        if not c.scheduled and _decides_differently(c, was, now, moe)
    }
    # no cell telling the two apart means the layouts cannot see what changed (`isinstance(x, DTensor)` is
    # the Megatron-FSDP test whatever `x` is): no claim that any level sees nothing
    return (2 * len(pairs), levels) if levels else (0, set())


def _decides_differently(cell: CellLayout, was: ast.expr, now: ast.expr, moe_family: bool) -> bool:
    """Whether some rank of the cell's layout can take the two tests to different values."""
    lay = cell.layout if cell.kind == "moe" or not moe_family else replace(cell.layout, moe=True)
    before, after = layout.can_truths(was, lay), layout.can_truths(now, lay)
    return before != after or (len(before) > 1 and len(after) > 1)
