"""Import statements a change adds or removes at module level, and when they run nothing new in a cell.

An import line runs when its module is imported, so read as module code it selected Level 0 for a change
whose only module-level edit is the import its fixed function now needs (a dataset loader no cell runs,
now calling `safe_pickle_load`) or one that a removed check no longer needs (`AttnBackend`). What such a
line can do to a cell is fail to import, or import a module that does something when imported. Neither
can happen when:

* the line is removed, and every name it bound is also used by a line the change removes: the use went
  with it. A use left behind is an undefined name, which Bridge's lint (ruff's F821, on by default)
  stops before merge; a Level 0 would meet it only if a cell ran that line;
* the line is added and imports from the standard library or `typing_extensions` (a dependency of
  torch, so present wherever Bridge runs), but not from `__future__`, which changes how the whole module
  compiles;
* the line is added and imports, from Bridge's own package, modules the recorded cells already import
  (`settle` checks them against the records): importing them again runs nothing.

Any other import line stays module code: a third-party package verl's image may lack, a Bridge module no
recorded cell imports (its own imports are unknown), a removed import whose names nothing else removed
uses (it may register something on import), and any import continued with a backslash.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.surface import Surface

_FROM = re.compile(r"^from\s+(\.*)([\w.]*)\s+import\s+(.*)$")
_IMPORT = re.compile(r"^import\s+(.*)$")
_WORD = re.compile(r"[A-Za-z_]\w*")
PACKAGE = "megatron.bridge"
# `__future__` changes how the whole module compiles (annotations turned to strings): module code
_SAFE = (frozenset(sys.stdlib_module_names) | {"typing_extensions"}) - {"__future__"}


@dataclass(frozen=True)
class _Line:
    line: int
    removed: bool
    module: str  # dotted; a relative import resolved against the file's package
    names: tuple[tuple[str, str], ...]  # (imported name, the name it binds); a plain `import` names no module


def _names(text: str) -> tuple[tuple[str, str], ...]:
    """`a as b, c` -> (("a", "b"), ("c", "c")); brackets and a trailing comment dropped."""
    out = []
    for item in text.split("#", 1)[0].replace("(", " ").replace(")", " ").split(","):
        parts = item.split()
        if len(parts) == 3 and parts[1] == "as":
            out.append((parts[0], parts[2]))
        elif len(parts) == 1:
            out.append((parts[0], parts[0].split(".")[0]))
    return tuple(out)


def _package(path: str, dots: str) -> str:
    """The package a relative import (`from ..x import y`) starts from, for a file under `src/`."""
    parts = path.removeprefix("src/").removesuffix(".py").split("/")
    return ".".join(parts[: len(parts) - len(dots)])


@dataclass
class ImportLines:
    """Fed every line of one file's hunks; keeps the changed lines of its top-level import statements."""

    path: str
    lines: list[_Line] = field(default_factory=list)
    unread: bool = False  # an import line it could not read (a backslash continuation)
    removed_words: set[str] = field(default_factory=set)  # the words of removed lines that are no import
    _open: str | None = None  # the module of a bracketed `from M import (` still open

    def hunk(self) -> None:
        self._open = None

    def see(self, tag: str, text: str, line: int) -> bool:
        """Whether `text` is part of a top-level import statement (a changed one is kept)."""
        changed = tag in "+-"
        if self._open is not None:
            module = self._open
            if ")" in text:
                self._open = None
            self._keep(changed, tag, line, module, _names(text))
            return True
        found = _FROM.match(text) or _IMPORT.match(text)
        if found is None:
            if tag == "-":
                self.removed_words.update(_WORD.findall(text.split("#", 1)[0]))
            return False
        if text.rstrip().endswith("\\"):
            self.unread = self.unread or changed
            return False
        if found.re is _IMPORT:
            self._keep(changed, tag, line, "", _names(found.group(1)))
            return True
        dots, module, rest = found.groups()
        module = f"{_package(self.path, dots)}.{module}".strip(".") if dots else module
        if "(" in rest and ")" not in rest:
            self._open = module
        self._keep(changed, tag, line, module, _names(rest))
        return True

    def _keep(self, changed: bool, tag: str, line: int, module: str, names: tuple[tuple[str, str], ...]) -> None:
        if changed and names:
            self.lines.append(_Line(line, tag == "-", module, names))

    def _quiet(self, imp: _Line) -> bool:
        if imp.removed:
            rebound = {bound for i in self.lines if not i.removed for _, bound in i.names}
            return all(bound in self.removed_words or bound in rebound for _, bound in imp.names)
        modules = [imp.module] if imp.module else [name for name, _ in imp.names]
        return all(m.split(".")[0] in _SAFE or _bridge(m) for m in modules)

    def quiet_lines(self) -> tuple[set[int], set[int]]:
        """(added, removed) line numbers of the import lines that are no module code to run."""
        quiet = [i for i in self.lines if self._quiet(i)]
        return {i.line for i in quiet if not i.removed}, {i.line for i in quiet if i.removed}

    @property
    def loud(self) -> bool:
        """Some changed import line is module code a cell must run."""
        return self.unread or not all(self._quiet(i) for i in self.lines)

    def bridge_modules(self) -> tuple[str, ...]:
        """The Bridge modules the added quiet lines import, and, marked `?`, `M.name` for each name taken
        from a Bridge module M: a submodule where the surface's tree has one (`settle`)."""
        out: dict[str, None] = {}
        for imp in self.lines:
            if imp.removed or not self._quiet(imp):
                continue
            if not imp.module:
                out |= dict.fromkeys(name for name, _ in imp.names if _bridge(name))
            elif _bridge(imp.module):
                out |= dict.fromkeys([imp.module, *(f"?{imp.module}.{name}" for name, _ in imp.names)])
        return tuple(out)


def _bridge(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _paths(module: str) -> tuple[str, str]:
    base = "src/" + module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def settle(files: Sequence[ChangedFile], ran: Sequence[Ran], surface: Surface | None) -> list[ChangedFile]:
    """Module code again for a file whose added imports bring in a Bridge module no recorded cell
    imported, or one this change adds: its own imports, which no cell has run, may fail in verl's image."""
    imported = {p for r in ran for p, names in r.functions.items() if "<module>" in names}
    imported -= {f.path for f in files if f.status != "M"}  # added (or moved) by this change: new to every cell
    tree = frozenset() if surface is None else surface.reachable | surface.unreachable
    return [
        replace(f, module_level=True) if not f.module_level and _new_module(f, imported, tree) else f for f in files
    ]


def _new_module(file: ChangedFile, imported: set[str], tree: frozenset[str]) -> bool:
    for name in file.bridge_imports:
        module = name.removeprefix("?")
        paths = _paths(module)
        if any(p in imported for p in paths):
            continue
        if name == module or any(p in tree for p in paths):
            return True
    return False
