"""Which lines of the base file stand for a change, so it can be compared with the lines real cells ran.

A cell's line records (`bridge-functions.json` "lines") name lines of the Bridge file the cell ran. A
change that rewrites or removes lines is represented by those old lines. A pure insertion has no old
line of its own: it runs when control reaches the insertion point, which the neighbouring old code
lines say where indentation allows: the next context line when it is indented at least as deep as the
inserted code (same block), else the previous one when it is as deep and opens no block. Where neither
is safe (an insertion at a block's end after its header, a diff without context lines), the change has
no anchor and the plan falls back to whole functions for that file, never to "not executed".
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
