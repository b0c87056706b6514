"""The code a changed condition decides on: the blocks of an `if`, `elif` or `while` whose test changed.

`if not training: self.freeze_model(...)` flipped to `if training:` changes no line that says what it
does; the block it guards does (freezing the adapters in every training step). Aspects read these lines
beside the changed ones, but only those selecting Level 5: what trains and what a step computes are
decided by which of those blocks run, while a layout or kind word under a changed test is already the
branch rules' and the records' to judge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from verl_e2e.plan import pyparse

MOST = 40  # lines of one block read: a test around a whole function is not a switch around one call


def guarded_lines(source: bytes | None, changed: Iterable[int]) -> tuple[str, ...]:
    """Source lines of the body and else of every `if`/`elif`/`while` whose test holds a changed line."""
    wanted = set(changed)
    if source is None or not wanted:
        return ()
    tree = pyparse.tree(source)
    if tree is None:
        return ()
    text = source.decode("utf-8", "replace").splitlines()
    out: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If | ast.While):
            continue
        test = range(node.test.lineno, (node.test.end_lineno or node.test.lineno) + 1)
        if wanted.isdisjoint(test):
            continue
        for block in (node.body, node.orelse):
            if not block:
                continue
            first, last = block[0].lineno, block[-1].end_lineno or block[-1].lineno
            out += text[first - 1 : min(last, first + MOST - 1)]
    return tuple(out)
