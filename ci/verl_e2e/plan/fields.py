"""Class-level defaults, dataclass fields and module-level values a change sets.

A failure raised in code the PR never touched can still be the PR's doing: a provider dataclass whose
default the PR changed is read when the model is built, and the weight import that then finds a shape
mismatch sits far from the changed line. The judge can name such a line as the likely cause only if the
plan recorded it, so every changed assignment outside a function body is kept with its file, line,
owner (the class, or "" for the module) and name, its value at head and at the merge base, and the
owner's bases and line span (a frame inside that span runs that class's code).

From both ASTs (`plan --repo`) the record is exact; from a diff alone (`plan --diff`) it is read from
the hunk's text and the `class`/`def` lines it shows, so a plan made without a clone still has it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from verl_e2e.plan import pyparse

MAX_VALUE = 60  # characters of a value's source kept (a default is short; a factory call need not be)
MAX_PER_FILE = 50


@dataclass(frozen=True)
class ChangedDefault:
    """One assignment outside any function that the change added, altered or removed."""

    path: str
    line: int  # its first line at head; for a removed one, its class's line at head
    owner: str  # qualified class name, "" at module level
    name: str
    value: str | None = None  # source of the value at head; None when removed (or declared without one)
    was: str | None = None  # source of the value at the merge base; None when new
    removed: bool = False
    bases: tuple[str, ...] = ()  # the owner class's bases as written (`GPTModelProvider`)
    span: tuple[int, int] | None = None  # the owner class's lines at head

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "owner": self.owner,
            "name": self.name,
            "value": self.value,
            "was": self.was,
            "removed": self.removed,
            "bases": list(self.bases),
            "span": list(self.span) if self.span else None,
        }


@dataclass(frozen=True)
class _Assigned:
    owner: str
    name: str
    first: int
    last: int
    value: str | None
    dump: str | None  # the value's AST, to tell a changed value from a reformatted line
    bases: tuple[str, ...]
    span: tuple[int, int] | None


def _cut(text: str | None) -> str | None:
    if text is None:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_VALUE else flat[: MAX_VALUE - 1] + "…"


def _targets(node: ast.stmt) -> tuple[list[str], ast.expr | None]:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id], node.value
    if isinstance(node, ast.Assign):
        names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        return names, node.value
    return [], None


# each line with its end, split at the line ends Python's tokenizer counts (str.splitlines knows more)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def source_lines(text: str) -> list[str]:
    return _LINE.findall(text)


def segment(lines: Sequence[str], node: ast.expr) -> str | None:
    """`ast.get_source_segment` on lines split once: that function splits the whole source on every call,
    which made a 2,900-line file's plan take seconds (columns are UTF-8 byte offsets, as there)."""
    end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None:
        return None
    first, last = node.lineno - 1, end_line - 1
    if first == last:
        return lines[first].encode()[node.col_offset : end_col].decode()
    head = lines[first].encode()[node.col_offset :].decode()
    tail = lines[last].encode()[:end_col].decode()
    return "".join([head, *lines[first + 1 : last], tail])


def _walk(body: list[ast.stmt], owner: str, cls: ast.ClassDef | None, source: Sequence[str]) -> Iterator[_Assigned]:
    """Assignments directly in a module or class body (through if/try/with blocks), never in a def."""
    bases = tuple(ast.unparse(b) for b in cls.bases) if cls else ()
    span = (cls.lineno, cls.end_lineno or cls.lineno) if cls else None
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield from _walk(node.body, f"{owner}.{node.name}" if owner else node.name, node, source)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from _walk(getattr(node, block, []), owner, cls, source)
            for handler in getattr(node, "handlers", []):
                yield from _walk(handler.body, owner, cls, source)
        else:
            names, value = _targets(node)
            for name in names:
                if name.startswith("__") and name.endswith("__"):
                    continue  # __all__, __slots__: bookkeeping, not a value code reads as a default
                text = segment(source, value) if value is not None else None
                dump = ast.dump(value) if value is not None else None
                yield _Assigned(owner, name, node.lineno, node.end_lineno or node.lineno, text, dump, bases, span)


def _assigned(source: bytes | None) -> dict[tuple[str, str], _Assigned]:
    tree = pyparse.tree(source) if source is not None else None
    if tree is None or source is None:
        return {}
    lines = source_lines(source.decode("utf-8", errors="replace"))
    return {(a.owner, a.name): a for a in _walk(tree.body, "", None, lines)}


def _class_lines(source: bytes | None) -> dict[str, tuple[int, int, tuple[str, ...]]]:
    """Qualified class name -> (first line, last line, bases) at head, for a removed field's class."""
    tree = pyparse.tree(source) if source is not None else None
    out: dict[str, tuple[int, int, tuple[str, ...]]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = f"{prefix}{node.name}"
                bases = tuple(ast.unparse(b) for b in node.bases)
                out[name] = (node.lineno, node.end_lineno or node.lineno, bases)
                visit(node.body, name + ".")

    if tree is not None:
        visit(tree.body, "")
    return out


def from_sources(
    path: str, old: bytes | None, new: bytes | None, added_at: Iterable[int], removed_at: Iterable[int]
) -> tuple[ChangedDefault, ...] | None:
    """The changed assignments of one file, from its source at the merge base and at head; None when
    the head does not parse (the caller keeps what the diff's text said)."""
    if new is not None and pyparse.tree(new) is None:
        return None
    before, after = _assigned(old), _assigned(new)
    added, removed = set(added_at), set(removed_at)
    out: list[ChangedDefault] = []
    for key, a in after.items():
        b = before.get(key)
        touched = any(a.first <= n <= a.last for n in added)
        if not touched or (b is not None and b.dump == a.dump):
            continue
        was = _cut(b.value) if b is not None else None
        out.append(ChangedDefault(path, a.first, a.owner, a.name, _cut(a.value), was, False, a.bases, a.span))
    classes = _class_lines(new)
    for key, b in before.items():
        gone = key not in after and any(b.first <= n <= b.last for n in removed)
        if gone and (not b.owner or b.owner in classes):
            first, last, bases = classes.get(b.owner, (b.first, b.first, ()))
            out.append(ChangedDefault(path, first, b.owner, b.name, None, _cut(b.value), True, bases, (first, last)))
    return tuple(sorted(out, key=lambda d: d.line)[:MAX_PER_FILE])


# the diff-only reading: `name = value` or `name: annotation = value` at module level or one level into a class
_ASSIGN = re.compile(r"^(?P<indent>[ \t]*)(?P<name>[A-Za-z_]\w*)\s*(?::\s*(?P<ann>[^=]+?))?\s*=(?!=)\s*(?P<value>.*)$")
_SCOPE = re.compile(
    r"^(?P<indent>[ \t]*)(?:async\s+)?(?P<kind>def|class)\s+(?P<name>[A-Za-z_]\w*)\s*(?:\((?P<bases>[^)]*)\))?"
)


@dataclass
class TextScopes:
    """The `class`/`def` lines a hunk has shown so far, innermost last, as (indent, kind, name, bases)."""

    stack: list[tuple[int, str, str, tuple[str, ...]]]

    @classmethod
    def of_header(cls, context: str) -> TextScopes:
        """Git's hunk header names the last unindented `class`/`def` line above the hunk."""
        scopes = cls([])
        scopes.see(context)
        return scopes

    def see(self, text: str) -> None:
        m = _SCOPE.match(text)
        if m is None:
            return
        indent = len(m.group("indent").expandtabs(4))
        self.stack = [s for s in self.stack if s[0] < indent]
        bases = tuple(b.strip() for b in (m.group("bases") or "").split(",") if b.strip() and "=" not in b)
        self.stack.append((indent, m.group("kind"), m.group("name"), bases))

    def assignment(self, text: str) -> tuple[str, str, str, tuple[str, ...]] | None:
        """(owner, name, value, bases) when `text` assigns at module level or directly in a class body."""
        m = _ASSIGN.match(text)
        if m is None or m.group("name") in ("return", "yield", "lambda") or m.group("name").startswith("__"):
            return None
        indent = len(m.group("indent").expandtabs(4))
        if indent == 0:
            return "", m.group("name"), m.group("value").strip(), ()
        around = [s for s in self.stack if s[0] < indent]
        if not around or around[-1][1] != "class" or indent != around[-1][0] + 4:
            return None
        owner = ".".join(s[2] for s in around if s[1] == "class")
        return owner, m.group("name"), m.group("value").strip(), around[-1][3]


Assigned = tuple[int, str, str, str, tuple[str, ...]]  # (line, owner, name, value, bases) read from a diff's text


def from_text(path: str, added: list[Assigned], removed: list[Assigned]) -> tuple[ChangedDefault, ...]:
    """Changed assignments from a diff's text alone; a removed line with the same owner and name gives
    the value it had."""
    before = {(owner, name): value for _, owner, name, value, _ in removed}
    seen: dict[tuple[str, str], ChangedDefault] = {}
    for line, owner, name, value, bases in added:
        was = _cut(before.get((owner, name)))
        if was == _cut(value):
            continue
        seen.setdefault((owner, name), ChangedDefault(path, line, owner, name, _cut(value), was, False, bases))
    return tuple(list(seen.values())[:MAX_PER_FILE])
