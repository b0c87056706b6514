"""Which lines of the base file stand for a change, so it can be compared with the lines real cells ran.

A cell's line records (`bridge-functions.json` "lines") name lines of the Bridge file the cell ran. A
change that rewrites or removes lines is represented by those old lines. A pure insertion has no old
line of its own: it runs when control reaches the insertion point, which the neighbouring old code
lines say where indentation allows: the next context line when it is indented at least as deep as the
inserted code (same block), else the previous one when it is as deep and opens no block. Where neither
is safe (an insertion at a block's end after its header, a diff without context lines), the change has
no anchor and the plan falls back to whole functions for that file, never to "not executed".

Where the base file's source is at hand (checkout mode), each such line also brings the other lines of
the statement it sits in (`whole_statements`): Python reports one line for a statement spanning
several, and none for the rows of a constant table folded into one value (a mapping list of string
tuples runs as a single constant at its first line), so a changed row is matched by its statement.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from verl_e2e.plan.pyparse import tree


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")


@dataclass
class Anchors:
    """Fed the body lines of one file's hunks in order (tag, text, old-side line number)."""

    lines: list[int] = field(default_factory=list)  # old-side line numbers that stand for the change
    unanchored: bool = False  # an insertion had no safe neighbour
    _prev: tuple[int, str] | None = None  # the last old-side code line seen (number, text)
    _run_indent: int | None = None  # indentation of a pending insertion (no removed line in its block)
    _removed_in_block: bool = False

    def see(self, tag: str, text: str, old_no: int) -> None:
        if tag == "-":
            self.lines.append(old_no)
            self._removed_in_block = True
            return
        if tag == "+":
            if not self._removed_in_block and self._run_indent is None and _code(text):
                self._run_indent = _indent(text)
            return
        if _code(text):
            self._settle((old_no, text))
            self._prev = (old_no, text)

    def finish(self) -> None:
        """The hunk ended: settle what is pending; the next hunk's neighbours are its own."""
        self._settle(None)
        self._prev = None

    def base_lines(self) -> tuple[int, ...] | None:
        """The sorted base lines standing for the whole change, or None where one part has none."""
        return None if self.unanchored or not self.lines else tuple(sorted(set(self.lines)))

    def _settle(self, following: tuple[int, str] | None) -> None:
        """Close the pending change block at a context line (or the hunk's end)."""
        indent, self._run_indent = self._run_indent, None
        self._removed_in_block = False
        if indent is None:
            return
        if following is not None and _indent(following[1]) >= indent:
            self.lines.append(following[0])
        elif self._prev is not None and _indent(self._prev[1]) >= indent and not self._prev[1].rstrip().endswith(":"):
            self.lines.append(self._prev[0])
        else:
            self.unanchored = True


def whole_statements(source: bytes | None, lines: Sequence[int] | None) -> tuple[int, ...] | None:
    """`lines` plus every other line of the innermost statement each one sits in (of a compound
    statement, only its header: `if cond(` ... `):`, never its body); unchanged where the source does
    not parse or there are no lines."""
    module = tree(source) if source is not None and lines else None
    if module is None or not lines:
        return None if lines is None else tuple(lines)
    wanted, spans = set(lines), []
    for node in ast.walk(module):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        body = getattr(node, "body", None)
        head = body[0] if isinstance(body, list) and body and isinstance(body[0], ast.stmt) else None
        last = head.lineno - 1 if head is not None else node.end_lineno
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        if any(first <= n <= last for n in wanted):
            spans.append((first, last))
    out = set(wanted)
    for n in lines:  # the innermost (shortest) statement holding the line, not the def around it
        holding = [s for s in spans if s[0] <= n <= s[1]]
        if holding:
            first, last = min(holding, key=lambda s: s[1] - s[0])
            out.update(range(first, last + 1))
    return tuple(sorted(out))
