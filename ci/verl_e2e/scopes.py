"""The functions and classes a change sits in, read from the ASTs of both sides of a Python file.

A hunk header names one function, and only the one above the hunk's first line; a one-line fix deep in
`finalize()` or in a nested helper still belongs to the function verl calls. With the file's source at
base and head (`plan --repo`), each removed line is looked up in the base AST and each added line in
the head AST, and every enclosing `def`/`class` from the outermost in is recorded as a scope name.
"""

from __future__ import annotations

import ast
from bisect import bisect_right
from collections.abc import Iterable


def _spans(tree: ast.AST) -> list[tuple[int, int, str]]:
    """(first line incl. decorators, last line, qualified name) of every def/class, outermost first."""
    out: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                name = f"{prefix}{child.name}"
                out.append((start, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    out.sort()
    return out


def enclosing(source: bytes | None, lines: Iterable[int]) -> list[str]:
    """Qualified names of the defs/classes that contain any of `lines` (1-based), without duplicates."""
    wanted = sorted(set(lines))
    if source is None or not wanted:
        return []
    try:
        spans = _spans(ast.parse(source))
    except (SyntaxError, ValueError):
        return []
    starts = [s for s, _, _ in spans]
    found: dict[str, None] = {}
    for line in wanted:
        for start, end, name in spans[: bisect_right(starts, line)]:
            if start <= line <= end:
                found[name] = None
    return list(found)


def innermost(source: bytes | None, lines: Iterable[int]) -> list[str]:
    """The qualified name of the innermost def/class around each of `lines` (module-level lines add none).

    This is the code object a changed line belongs to, as a tracer names it (less `<locals>`): a
    line of `Cls.method` is `Cls.method`'s code, not the class body's, though both enclose it."""
    wanted = sorted(set(lines))
    if source is None or not wanted:
        return []
    try:
        spans = _spans(ast.parse(source))
    except (SyntaxError, ValueError):
        return []
    starts = [s for s, _, _ in spans]
    found: dict[str, None] = {}
    for line in wanted:
        around = [(s, name) for s, e, name in spans[: bisect_right(starts, line)] if s <= line <= e]
        if around:
            found[max(around, key=lambda a: (a[1].count("."), a[0]))[1]] = None
    return list(found)


def outside_defs(source: bytes | None, lines: Iterable[int]) -> bool:
    """Whether any of `lines` lies outside every def/class (module-level code); unknown source: True."""
    wanted = set(lines)
    if not wanted:
        return False
    if source is None:
        return True
    try:
        spans = _spans(ast.parse(source))
    except (SyntaxError, ValueError):
        return True
    return any(not any(s <= line <= e for s, e, _ in spans) for line in wanted)


def scope_names(qualified: Iterable[str]) -> list[str]:
    """`GPTModelProvider.finalize` -> both parts, as the aspect patterns match plain identifiers."""
    out: dict[str, None] = {}
    for q in qualified:
        for part in q.split("."):
            out[part] = None
    return list(out)
