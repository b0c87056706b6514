"""Where in a class a change sits when git's hunk header names only the class: its body, or a method.

`git diff` names the last unindented `def` or `class` above a hunk. For a change deep in a long method
that is the class, and the method stays unknown unless the hunk's three context lines show its `def`.
Importing a module runs every class body in it, so each recorded cell "ran" `_TextMemMapDataset` while
none ran a single method of it; read by name, a fix inside `_TextMemMapDataset.__init__` then selects
Level 0 as code verl executes. So each hunk under a class header is read for where its changed lines
sit (4-space indentation, as Bridge and PEP 8 write it):

* a line at the class body's depth (a field, a class constant, a decorator, the start of a multi-line
  value) changes the class body, which every import runs;
* a deeper line under a `def` the hunk shows belongs to that method, whose name the scopes already hold;
* a deeper line under no line the hunk shows at the body's depth sits in a method git did not name:
  any recorded method of that class may be it, the class body alone is not;
* a deeper line under a body-level statement that is not a `def` continues it (a multi-line field
  default): the class body;
* an unindented line ends the class: a changed one that opens no `def` or `class` is module code.

The readings only ever narrow a class-body match; a method a recorded cell ran still matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DEF_LINE = re.compile(r"^\s*(?:async\s+)?def\s")
_HEADER_LINE = re.compile(r"^\s*(?:@|(?:async\s+)?def\s|class\s)")
_CLASS_LINE = re.compile(r"^class\s+([A-Za-z_]\w*)")
BODY = 4  # the indentation of a top-level class's body


def _indent(text: str) -> int:
    return len(text.expandtabs(4)) - len(text.expandtabs(4).lstrip())


def _code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")


@dataclass
class ClassParts:
    """Fed every body line of one file's hunks; `start` at each hunk with the class its header names."""

    body_of: dict[str, None] = field(default_factory=dict)  # classes whose body a changed line is in
    method_of: dict[str, None] = field(default_factory=dict)  # classes with a change in an unnamed method
    headed: dict[str, None] = field(default_factory=dict)  # classes a hunk header named
    module_code: bool = False  # an unindented changed code line under a class header: module code
    _header: str | None = None
    _shallow: bool | None = None  # the last code line at the body's depth: True a def, False another

    def start(self, header_class: str | None) -> None:
        self._header, self._shallow = header_class, None
        if header_class:
            self.headed[header_class] = None

    def see(self, tag: str, text: str, prose: bool) -> None:
        """One hunk line (tag " ", "+" or "-"); docstring prose is not code."""
        if prose or not _code(text):
            return
        indent = _indent(text)
        if indent == 0:
            self._top(tag in "+-", text)
            return
        if self._header is None:
            return
        if tag in "+-":
            self._changed(indent, text)
        if indent <= BODY:
            self._shallow = bool(_DEF_LINE.match(text)) if indent == BODY else None

    def _top(self, changed: bool, text: str) -> None:
        """An unindented line ends the class before it: a new class, a function, or module code."""
        m = _CLASS_LINE.match(text)
        self._header, self._shallow = (m.group(1) if m else None), None
        if m:
            self.headed[m.group(1)] = None
            if changed:  # its name, bases or keywords: what every import runs
                self.body_of[m.group(1)] = None
        elif changed and not _HEADER_LINE.match(text):
            self.module_code = True

    def _changed(self, indent: int, text: str) -> None:
        assert self._header is not None
        if indent <= BODY:
            if not _DEF_LINE.match(text):
                self.body_of[self._header] = None
        elif self._shallow is None:
            self.method_of[self._header] = None
        elif self._shallow is False:
            self.body_of[self._header] = None

    def methods_only(self) -> tuple[str, ...]:
        """Classes a hunk header named whose body no changed line is in: their body running proves nothing."""
        return tuple(c for c in self.headed if c not in self.body_of)

    def unnamed_methods(self) -> tuple[str, ...]:
        return tuple(self.method_of)
