"""Where a changed value goes: the statements after a changed assignment, in the same function, that
read what it assigned (and what those assign in turn).

`is_grouped = ".experts.linear_fc" in name` narrowed to `linear_fc1` holds no parallel word, yet its value
decides, two statements on, whether `_get_ep_group(models)` runs: the renumbering of experts across
expert-parallel ranks. Level 0 runs the line and never sees the difference, which shows only at EP > 1.
The layout aspects read these statements beside the changed lines (select.py); a statement that merely
runs after the change, without reading its value, is not read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from verl_e2e.plan import pyparse

MOST = 12  # statements after the change that are read: a value used at the end of a long function is not near
HOPS = 3  # assignments the value may pass through


def flow_lines(source: bytes | None, changed: Iterable[int]) -> tuple[str, ...]:
    """The source lines of statements after each changed assignment, in its function, that read its value."""
    wanted = set(changed)
    tree = pyparse.tree(source) if source is not None and wanted else None
    if source is None or tree is None:
        return ()
    text = source.decode("utf-8", "replace").splitlines()
    out: list[str] = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            out += _follow(_statements(fn.body), wanted, text)
    return tuple(dict.fromkeys(out))


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The function's statements in source order, a compound one before those inside it (nested
    functions and classes left out: theirs are read on their own)."""
    out: list[ast.stmt] = []
    for st in body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        out.append(st)
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(st, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                out += _statements(inner)
        for handler in getattr(st, "handlers", []):
            out += _statements(handler.body)
    return out


def _follow(statements: list[ast.stmt], wanted: set[int], text: list[str]) -> list[str]:
    start = next((i for i, st in enumerate(statements) if _simple(st) and wanted & set(_span(st))), None)
    if start is None:
        return []
    tainted = _targets(statements[start])
    out: list[str] = []
    hops = 0
    for st in statements[start + 1 : start + 1 + MOST]:
        head = _head(st)
        if not tainted & _reads(st, head):
            continue
        out += [text[n - 1] for n in head if 0 < n <= len(text)]
        new = _targets(st) - tainted
        if new and hops < HOPS:
            tainted |= new
            hops += 1
    return out


def _simple(st: ast.stmt) -> bool:
    return isinstance(st, ast.Assign | ast.AugAssign | ast.AnnAssign)


def _span(st: ast.stmt) -> range:
    return range(st.lineno, (st.end_lineno or st.lineno) + 1)


def _head(st: ast.stmt) -> range:
    """The lines a statement runs by itself: a compound statement's header, a simple one's whole span."""
    body = getattr(st, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return range(st.lineno, max(st.lineno, body[0].lineno - 1) + 1)
    return _span(st)


def _targets(st: ast.stmt) -> set[str]:
    targets: list[ast.expr] = []
    if isinstance(st, ast.Assign):
        targets = st.targets
    elif isinstance(st, ast.AugAssign | ast.AnnAssign):
        targets = [st.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _reads(st: ast.stmt, head: range) -> set[str]:
    """The names the statement's own lines read."""
    return {n.id for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno in head}
