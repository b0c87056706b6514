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
from functools import lru_cache

from verl_e2e.plan import pyparse


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


@lru_cache(maxsize=256)
def _spans_of(source: bytes) -> list[tuple[int, int, str]] | None:
    tree = pyparse.tree(source)
    return None if tree is None else _spans(tree)


def _around(source: bytes | None, lines: Iterable[int]) -> list[list[str]]:
    """For each of `lines` (1-based, sorted, once), the qualified names of the defs/classes around it,
    outermost first; nothing for a source that does not parse."""
    wanted = sorted(set(lines))
    if source is None or not wanted:
        return []
    spans = _spans_of(source)
    if spans is None:
        return []
    starts = [s for s, _, _ in spans]
    return [[name for s, e, name in spans[: bisect_right(starts, line)] if s <= line <= e] for line in wanted]


def parses(source: bytes | None) -> bool:
    """True when the source is there and parses: its scopes can replace the hunk headers' guesses."""
    return source is not None and _spans_of(source) is not None


def enclosing(source: bytes | None, lines: Iterable[int]) -> list[str]:
    """Qualified names of the defs/classes that contain any of `lines` (1-based), without duplicates."""
    return list(dict.fromkeys(name for names in _around(source, lines) for name in names))


def innermost(source: bytes | None, lines: Iterable[int]) -> list[str]:
    """The qualified name of the innermost def/class around each of `lines` (module-level lines add none).

    This is the code object a changed line belongs to, as a tracer names it (less `<locals>`): a
    line of `Cls.method` is `Cls.method`'s code, not the class body's, though both enclose it."""
    return list(dict.fromkeys(max(names, key=lambda n: n.count(".")) for names in _around(source, lines) if names))


def outside_defs(source: bytes | None, lines: Iterable[int]) -> bool:
    """Whether any of `lines` lies outside every def/class (module-level code); unknown source: True."""
    wanted = set(lines)
    if not wanted:
        return False
    if source is None:
        return True
    spans = _spans_of(source)
    if spans is None:
        return True
    return any(not any(s <= line <= e for s, e, _ in spans) for line in wanted)


def scope_names(qualified: Iterable[str]) -> list[str]:
    """`GPTModelProvider.finalize` -> both parts, as the aspect patterns match plain identifiers."""
    out: dict[str, None] = {}
    for q in qualified:
        for part in q.split("."):
            out[part] = None
    return list(out)
