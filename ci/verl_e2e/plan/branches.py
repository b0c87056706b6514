"""The branch conditions a changed line runs under, when they read the parallel layout.

A line inside `if self.tp_size > 1:` runs only where the tensor-parallel size is above one: Level 0
runs its function and never that line. For each changed line this records every enclosing
`if`/`elif`/`while` test (negated in its `else`), the test of a ternary whose branch is on other
lines, a `match` case's value, and the early-return guards before it in the same block
(`if pp_size == 1: return`), keeping only the tests that read a parallel-layout name (layout.py);
which cell's layout can take them is layout.py's answer. With the file at head (`plan --repo`) they
come from its AST; from a diff alone, from the hunk's text above the line (`TextBranches`), as far
as the hunk shows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from verl_e2e.plan import layout, pyparse

VOCABULARY = re.compile(
    r"(?i)(parallel|tp_|pp_|cp_|ep_|_tp|_pp|_cp|_ep|vp_|stage|pre_process|post_process|fsdp|dtensor|moe_|expert|recompute_|p2p_comm"
    r"|variable_seq|\.(tp|pp|cp|ep)\b|megatron_module\b)"
)
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


@dataclass(frozen=True)
class Condition:
    test: str  # the test's source
    holds: bool  # the line runs when the test is true (False: in its `else`, or after its guard)
    kind: str  # if, elif, while, else, guard, ternary, case, operand

    def shown(self) -> str:
        if self.kind == "else":
            return f"the else of `if {self.test}`"
        if self.kind == "guard":
            return f"`if {self.test}: return` before it"
        if self.kind == "ternary":
            return f"the {'true' if self.holds else 'false'} side of `... if {self.test} else ...`"
        if self.kind == "case":
            return f"`case` where `{self.test}`"
        if self.kind == "operand":
            return f"the right side of `{self.test} {'and' if self.holds else 'or'} ...`"
        return f"`{self.kind} {self.test}`"


@dataclass(frozen=True)
class Branch:
    """One changed line (new-side number, or old-side for a removed one) under layout conditions."""

    line: int
    removed: bool
    function: str  # the innermost def's name ("": outside any or not shown; "Class.": a method not shown)
    conditions: tuple[Condition, ...]

    def tests(self) -> list[tuple[ast.expr, bool]]:
        return [(t, c.holds) for c in self.conditions if (t := layout.parse(c.test)) is not None]


def _condition(test: ast.expr, holds: bool, kind: str) -> Condition | None:
    return Condition(ast.unparse(test), holds, kind) if layout.reads(test) else None


class _Walk:
    """Conditions of the wanted lines, walking only the statements that contain one."""

    def __init__(self, source: bytes, wanted: Iterable[int]) -> None:
        self.lines = source.decode("utf-8", "replace").splitlines()
        self.wanted = sorted(set(wanted))
        self.found: dict[int, tuple[str, tuple[Condition, ...]]] = {}
        self.defs: set[str] = set()  # the qualified names that are functions (their defs are closures)

    def _hits(self, first: int, last: int) -> list[int]:
        return [n for n in self.wanted if first <= n <= last]

    def block(self, body: Sequence[ast.stmt], conds: tuple[Condition, ...], func: str) -> None:
        guards: tuple[Condition, ...] = ()
        for st in body:
            first = min([st.lineno, *(d.lineno for d in getattr(st, "decorator_list", []))])
            if self._hits(first, st.end_lineno or st.lineno):
                self.stmt(st, conds + guards, func)
            if isinstance(st, ast.If) and not st.orelse and isinstance(st.body[-1], _EXITS):
                guard = _condition(st.test, False, "guard")
                guards += (guard,) if guard else ()

    def stmt(self, st: ast.stmt, conds: tuple[Condition, ...], func: str) -> None:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._mark(st.lineno, st.body[0].lineno - 1, conds, func)
            # a def inside a function exists only where that function reached it: its conditions hold
            name = f"{func}.<locals>.{st.name}" if func in self.defs else f"{func}.{st.name}" if func else st.name
            if not isinstance(st, ast.ClassDef):
                self.defs.add(name)
            self.block(st.body, conds, name)
            return
        if isinstance(st, (ast.If, ast.While)):
            self._mark(st.lineno, st.body[0].lineno - 1, conds, func)
            kind = "while" if isinstance(st, ast.While) else self._if_kind(st)
            inside = _condition(st.test, True, kind)
            self.block(st.body, conds + ((inside,) if inside else ()), func)
            outside = _condition(st.test, False, "else") if isinstance(st, ast.If) else None
            self.block(st.orelse, conds + ((outside,) if outside else ()), func)
            return
        if isinstance(st, ast.Match):
            self._mark(st.lineno, st.lineno, conds, func)
            for case in st.cases:
                value = getattr(case.pattern, "value", None)
                test = ast.Compare(st.subject, [ast.Eq()], [value]) if isinstance(value, ast.expr) else None
                cond = _condition(test, True, "case") if test is not None else None
                self.block(case.body, conds + ((cond,) if cond else ()), func)
            return
        bodies = [getattr(st, f, None) for f in ("body", "orelse", "finalbody")]
        bodies += [h.body for h in getattr(st, "handlers", [])]
        inner = [b for b in bodies if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]
        if inner:
            self._mark(st.lineno, inner[0][0].lineno - 1, conds, func)
            for b in inner:
                self.block(b, conds, func)
            return
        self._simple(st, conds, func)

    def _if_kind(self, st: ast.If) -> str:
        text = self.lines[st.lineno - 1].lstrip() if st.lineno <= len(self.lines) else ""
        return "elif" if text.startswith("elif") else "if"

    def _simple(self, st: ast.stmt, conds: tuple[Condition, ...], func: str) -> None:
        for n in self._hits(st.lineno, st.end_lineno or st.lineno):
            extra: tuple[Condition, ...] = ()
            for node in ast.walk(st):
                if isinstance(node, ast.IfExp) and not node.test.lineno <= n <= (node.test.end_lineno or 0):
                    for side, holds in ((node.body, True), (node.orelse, False)):
                        if side.lineno <= n <= (side.end_lineno or side.lineno):
                            cond = _condition(node.test, holds, "ternary")
                            extra += (cond,) if cond else ()
            self.found[n] = (func, conds + extra)

    def _mark(self, first: int, last: int, conds: tuple[Condition, ...], func: str) -> None:
        for n in self._hits(first, max(first, last)):
            self.found[n] = (func, conds)


def from_source(source: bytes | None, lines: Iterable[int], removed: bool) -> list[Branch]:
    """The changed `lines` of a file (head side, or base side when `removed`) that run under layout
    conditions; nothing for a source that does not parse."""
    wanted = list(lines)
    if source is None or not wanted or not VOCABULARY.search(source.decode("utf-8", "replace")):
        return []
    tree = pyparse.tree(source)
    if tree is None:
        return []
    walk = _Walk(source, wanted)
    walk.block(tree.body, (), "")
    return [Branch(n, removed, f, c) for n, (f, c) in sorted(walk.found.items()) if c]


def short_circuit(tree: ast.Module, line: int, mentions: Callable[[ast.AST], bool]) -> tuple[Condition, ...]:
    """The layout tests an `and`/`or` evaluates before the operand that holds a mention on `line`: in
    `if self.tp_size == 1 or _module_uses_fsdp(module):` the helper is called only at TP > 1, a condition
    on the call that no enclosing block shows (every column and row export short-circuits so)."""
    found: tuple[Condition, ...] = ()
    for node in ast.walk(tree):
        if not isinstance(node, ast.BoolOp) or not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        for i, operand in enumerate(node.values[1:], 1):
            if any(getattr(n, "lineno", 0) == line and mentions(n) for n in ast.walk(operand)):
                conds = (_condition(v, isinstance(node.op, ast.And), "operand") for v in node.values[:i])
                found += tuple(c for c in conds if c is not None)
                break
    return found


_HEADER = re.compile(r"^(if|elif|while)\b\s*(.*?)\s*:\s*(#.*)?$", re.S)
_DEF = re.compile(r"^(async\s+def|def|class)\s+([A-Za-z_]\w*)")


class TextBranches:
    """The same from a hunk's text: an indentation stack of the `if`/`elif`/`while`/`else` headers
    above each line on one side of the hunk, fed line by line (what the hunk shows, no more)."""

    def __init__(self, function: str = "") -> None:
        self.function = function  # what git names in the hunk header: a def, or "Class." (method unknown)
        self.stack: list[tuple[int, Condition | None, str]] = []  # (indent, condition, def name)
        self.tests: dict[int, str] = {}  # indent -> the last if/elif test opened there (for its else)
        self.pending: tuple[int, str] | None = None  # a header spread over several lines

    def see(self, text: str) -> tuple[str, tuple[Condition, ...]]:
        """Feed one line; returns (enclosing def, the layout conditions it runs under)."""
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            return self._now()
        if self.pending is not None:
            indent, joined = self.pending[0], f"{self.pending[1]} {stripped}"
            self.pending = None if stripped.endswith(":") or len(joined) > 600 else (indent, joined)
            if self.pending is None:
                self._open(indent, joined)
            return self._now()
        indent = len(text) - len(text.lstrip())
        while self.stack and self.stack[-1][0] >= indent:
            self.stack.pop()
        now = self._now()
        if stripped.startswith(("if ", "elif ", "while ", "if(", "while(")) and not stripped.endswith(":"):
            self.pending = (indent, stripped)
        elif stripped.endswith(":") or _DEF.match(stripped):
            self._open(indent, stripped)
        return now

    def _open(self, indent: int, header: str) -> None:
        d = _DEF.match(header)
        m = _HEADER.match(header)
        cond: Condition | None = None
        if m:
            self.tests[indent] = m.group(2)
            test = layout.parse(m.group(2)) if VOCABULARY.search(m.group(2)) else None
            cond = _condition(test, True, m.group(1)) if test is not None else None
        elif header.startswith("else") and indent in self.tests and VOCABULARY.search(self.tests[indent]):
            test = layout.parse(self.tests[indent])
            cond = _condition(test, False, "else") if test is not None else None
        self.stack.append((indent, cond, d.group(2) if d else ""))

    def _now(self) -> tuple[str, tuple[Condition, ...]]:
        inner = next((name for _, _, name in reversed(self.stack) if name), "")
        func = (self.function + inner if self.function.endswith(".") else inner) if inner else self.function
        return func, tuple(c for _, c, _ in self.stack if c is not None)
