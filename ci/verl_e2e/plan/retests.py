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
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import replace

from verl_e2e.plan import layout
from verl_e2e.plan.branches import VOCABULARY
from verl_e2e.plan.layout import CellLayout

_TEST = re.compile(r"^\s*(?:if|elif|while)\b\s*(.*?)\s*:\s*(?:#.*)?$|^\s*return\s+(.*\S)\s*$")


_HEADER = re.compile(r"^\s*(?:if|elif|while)\b")
MAX_ASSIGNMENTS = 256  # joint values of the two tests' parts tried per cell before falling back to their sets


def _test(line: str, any_header: bool = False) -> ast.expr | None:
    """The layout test a line holds; `any_header`: any `if`/`elif`/`while` test (the other side of a
    rewrite that dropped or added the layout part: `if self.post_process and norm:` made `if norm:`)."""
    m = _TEST.match(line)
    text = (m.group(1) or m.group(2)) if m else None
    if not text:
        return None
    node = layout.parse(text)
    if node is None:
        return None
    if any_header and _HEADER.match(line):
        return node
    return node if VOCABULARY.search(text) and layout.reads(node) else None


def _pairs(removed: Sequence[str], added: Sequence[str]) -> list[tuple[tuple[ast.expr, str], tuple[ast.expr, str]]]:
    """Removed and added tests paired in order, where either side reads the layout."""
    old = [(t, line.strip()) for line in removed if (t := _test(line, any_header=True)) is not None]
    new = [(t, line.strip()) for line in added if (t := _test(line, any_header=True)) is not None]
    return [(a, b) for a, b in zip(old, new, strict=False) if layout.reads(a[0]) or layout.reads(b[0])]


def first_cell(
    cells: Sequence[CellLayout], removed: Sequence[str], added: Sequence[str], moe_family: bool
) -> tuple[CellLayout, str, str] | None:
    """(the first cell whose layout decides a rewritten test differently, old test, new test), or None."""
    for (was, was_text), (now, now_text) in _pairs(removed, added):
        found = [c for c in cells if not c.scheduled and _decides_differently(c, was, now, moe_family)]
        if found and not (found[0].level == 0 and found[0].kind == "all"):
            return found[0], was_text, now_text
    return None


def deciding_levels(cells: Sequence[CellLayout], removed: Sequence[str], added: Sequence[str]) -> tuple[int, set[int]]:
    """(how many changed lines are paired rewritten layout tests, the levels with a PR cell that decides
    some pair differently on a dense or a MoE model). A level that decides every pair as before runs the
    rewritten test and sees nothing new: `if self.pre_process:` made `if self.post_process:` is the same
    test at PP = 1, whatever the file's family or words."""
    pairs = [(a[0], b[0]) for a, b in _pairs(removed, added)]
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
    """Whether some rank of the cell's layout can take the two tests to different values: tried jointly
    over the values their parts can take (a part both tests share takes one value in both), else from
    the two tests' value sets apart."""
    lay = cell.layout if cell.kind == "moe" or not moe_family else replace(cell.layout, moe=True)
    joint = _jointly_differ(lay, was, now)
    if joint is not None:
        return joint
    before, after = layout.can_truths(was, lay), layout.can_truths(now, lay)
    return before != after or (len(before) > 1 and len(after) > 1)


def _leaves(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BoolOp):
        return [leaf for v in node.values for leaf in _leaves(v)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _leaves(node.operand)
    return [node]


def _truth(node: ast.expr, env: dict[str, bool]) -> bool:
    if isinstance(node, ast.BoolOp):
        parts = [_truth(v, env) for v in node.values]
        return all(parts) if isinstance(node.op, ast.And) else any(parts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _truth(node.operand, env)
    return env[ast.unparse(node)]


def _jointly_differ(lay: layout.Layout, was: ast.expr, now: ast.expr) -> bool | None:
    """Whether the two tests differ for some joint value of their parts: a part that reads the layout
    takes the values the layout allows, any other part either truth value, the same in both tests.
    At PP = 1 `post_process and norm` and `norm` agree for every `norm`; at PP = 2 they do not."""
    parts = {ast.unparse(leaf): leaf for leaf in [*_leaves(was), *_leaves(now)]}
    choices = {k: sorted(layout.can_truths(v, lay)) if layout.reads(v) else [False, True] for k, v in parts.items()}
    if math.prod(len(c) for c in choices.values()) > MAX_ASSIGNMENTS:
        return None
    for combo in itertools.product(*choices.values()):
        env = dict(zip(choices, combo, strict=True))
        if _truth(was, env) != _truth(now, env):
            return True
    return False
