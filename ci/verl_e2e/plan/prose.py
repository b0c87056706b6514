"""Docstring lines in a diff's hunks: prose, which computes nothing, so no aspect or rule reads it.

A renamed provider's new docstring says "kept for backward compatibility", and `backward` is a word of
the learning-numerics aspect: read as code, that one sentence schedules Level 5. From the hunk's text
alone (diff mode has nothing else), a line is prose when it sits in a docstring whose opening the hunk
shows: a string that starts a line right after a `def`/`class` header (or on a file's first line) and
runs until its closing quotes. A hunk that starts inside a docstring shows only a closing quote, which
nothing here can tell from an opening: its lines stay code, so an unknown state never hides code.
"""

from __future__ import annotations

import re

_OPENING = re.compile(r"""^\s*[rRuU]?("{3}|'{3})""")
_HEADER = re.compile(r"^\s*(?:async\s+)?(?:def|class)\b.*:\s*(?:#.*)?$")
_HEADER_END = re.compile(r"^\s*\)\s*(?:->.*)?:\s*(?:#.*)?$")  # the last line of a wrapped def header


class _Side:
    """One side of a hunk (old: context and removed lines; new: context and added lines)."""

    def __init__(self) -> None:
        self.quote: str | None = None  # the delimiter of the docstring the side is inside
        self.after_header = False  # the previous non-blank line ended a def/class header

    def see(self, text: str, number: int) -> bool:
        """Whether this line is docstring prose; the side's state moves past it."""
        if self.quote is not None:
            if self.quote in text:
                self.quote = None
            return True
        if not text.strip():
            return False
        opening = _OPENING.match(text)
        starts_docstring = opening is not None and (self.after_header or number == 1)
        self.after_header = bool(_HEADER.match(text) or _HEADER_END.match(text))
        if not starts_docstring or opening is None:
            return False
        quote = opening.group(1)
        if quote not in text[opening.end() :]:
            self.quote = quote
        return True


class Prose:
    """Both sides of the current hunk; `reset` at each hunk header."""

    def __init__(self) -> None:
        self.sides = {"-": _Side(), "+": _Side()}

    def reset(self) -> None:
        self.sides = {"-": _Side(), "+": _Side()}

    def see(self, tag: str, text: str, old_no: int, new_no: int) -> bool:
        """Whether a changed line (tag + or -) is docstring prose; a context line moves both sides."""
        if tag == " ":
            self.sides["-"].see(text, old_no)
            self.sides["+"].see(text, new_no)
            return False
        return self.sides[tag].see(text, new_no if tag == "+" else old_no)


_TOP_DEF = re.compile(r"^(?:async\s+)?(?:def|class)\s")


class GoneDefinitions:
    """Module-level functions and classes a hunk removes whole, header to last body line.

    Their words are no aspect's business: a function that no longer exists runs under no layout, and
    anything that still called it breaks at Level 0 (the caller's own change is read on its own). A
    method's removal is not counted: the base class's version runs in its place, which is a change.
    `see` returns the removed lines' indexes (into the file's removed lines) once a definition is
    known to be gone whole: when the next module-level line shows; a hunk that ends first says nothing."""

    def __init__(self) -> None:
        self.pending: list[int] | None = None  # the removed lines of the definition being followed

    def reset(self) -> None:
        self.pending = None

    def see(self, tag: str, text: str, index: int) -> list[int]:
        """`index`: the line's position among the file's removed lines (for tag -)."""
        top = bool(text.strip()) and not text[:1].isspace()  # a column-0 comment, too, is past a body
        gone: list[int] = []
        if self.pending is not None and top and not text.startswith((")", "]", "}")):
            gone, self.pending = self.pending, None
        elif self.pending is not None and tag != "-" and text.strip():
            self.pending = None  # a body line stays: the definition changed, it did not go
        if tag == "-" and self.pending is not None:
            self.pending.append(index)
        elif tag == "-" and _TOP_DEF.match(text):
            self.pending = [index]
        return gone
