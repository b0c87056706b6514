"""Changes that only add new top-level functions and classes to an existing module.

Nothing unchanged can call a name that did not exist, so what such a change adds runs in a cell only
through a changed line that calls it, and that line is judged where it is. Importing the module still
runs the new class bodies, decorators' absence aside, and evaluates the new signatures: Level 0 on the
module's family is the cell that proves the import, and the words inside the new code (a `tp_rank`
in a mapping no bridge uses yet) select nothing more.

Only plain additions count: a decorated definition may register itself (a bridge for an architecture),
module code or an assignment may change what runs, a method added to an existing class may override
one, and a definition followed by indented unchanged lines has taken them as its body (a rename).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_NEW_DEF = re.compile(r"^(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")

Side = Sequence[tuple[str, int | None]]  # a hunk side: (text, line number; None for a context line)


def _code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")


@dataclass
class Additions:
    """What a file's hunks add, read hunk by hunk: the new top-level names, or that something else changed."""

    names: list[str] = field(default_factory=list)
    other: bool = False  # a changed code line outside new, undecorated top-level definitions

    def see(self, removed: Side, added: Side) -> None:
        if self.other:
            return
        if any(n is not None and _code(t) for t, n in removed):
            self.other = True
            return
        i = 0
        while i < len(added) and not self.other:
            if added[i][1] is None:
                i += 1
                continue
            j = i
            while j < len(added) and added[j][1] is not None:
                j += 1
            self._run([t for t, _ in added[i:j]], next((t for t, n in added[j:] if t.strip()), None))
            i = j

    def _run(self, lines: list[str], after: str | None) -> None:
        """One run of added lines: every code line opens a new top-level def/class or is indented in
        one, the first code line opens one, and the unchanged line after it is not indented."""
        code = [t for t in lines if _code(t)]
        if not code:
            return
        if _NEW_DEF.match(code[0]) is None or (after is not None and after[:1] in (" ", "\t")):
            self.other = True
            return
        for text in code:
            m = _NEW_DEF.match(text)
            if m is not None:
                self.names.append(m.group(1))
            elif text[:1] not in (" ", "\t"):
                self.other = True  # a decorator, an assignment or other module code
                return

    @property
    def definitions(self) -> tuple[str, ...] | None:
        return None if self.other or not self.names else tuple(dict.fromkeys(self.names))


def still_new(names: tuple[str, ...] | None, base: bytes | None) -> tuple[str, ...] | None:
    """The names, where the base file never mentions them (else a name already defined or used there
    may be redefined or start resolving); unchanged where the base is unknown."""
    if names is None or base is None:
        return names
    text = base.decode("utf-8", "replace")
    if any(re.search(rf"\b{re.escape(n)}\b", text) for n in names):
        return None
    return names
