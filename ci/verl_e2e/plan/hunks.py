"""One hunk's two sides, kept until the hunk ends, then read for what its text alone can tell: the
layout conditions above each changed line (branches.TextBranches) and whether every changed line
belongs to a logging call (quiet.LogCalls).

Both readings walk a side line by line, so they run only on a hunk whose text could hold something
for them (an `if`/`while`/`else` and a layout word; a logging or print call): a 3,000-file diff
stays fast because most hunks are skipped after one search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verl_e2e.plan.additions import Additions
from verl_e2e.plan.branches import VOCABULARY, Branch, TextBranches
from verl_e2e.plan.quiet import LogCalls

_HEADERS = re.compile(r"^[ \t]*(if|elif|while|else)\b", re.M)
_LOGGING = re.compile(r"(log|print|warn)", re.I)


@dataclass
class Found:
    branches: list[Branch] = field(default_factory=list)
    beyond_logging: bool = False  # a changed code line outside every logging call the hunk shows
    additions: Additions = field(default_factory=Additions)  # new top-level definitions (additions.py)


@dataclass
class HunkSides:
    function: str = ""  # what git's hunk header names: a def, or "Class." (the method unknown)
    sides: dict[str, list[tuple[str, int | None]]] = field(default_factory=lambda: {"-": [], "+": []})

    def add(self, tag: str, text: str, number: int) -> None:
        """A context line (tag " ") goes to both sides; a changed one to its own, with its number."""
        if tag == " ":
            self.sides["-"].append((text, None))
            self.sides["+"].append((text, None))
        else:
            self.sides[tag].append((text, number))

    def finish(self, found: Found) -> None:
        found.additions.see(self.sides["-"], self.sides["+"])
        for tag, lines in self.sides.items():
            changed = [t for t, n in lines if n is not None]
            if not changed:
                continue
            joined = "\n".join(t for t, _ in lines)
            if _HEADERS.search(joined) and VOCABULARY.search(joined):
                reader = TextBranches(self.function)
                for text, number in lines:
                    func, conds = reader.see(text)
                    if number is not None and conds:
                        found.branches.append(Branch(number, tag == "-", func, conds))
            if found.beyond_logging:
                continue
            if not _LOGGING.search(joined):
                found.beyond_logging = any(_code(t) for t in changed)
                continue
            calls = LogCalls()
            for text, number in lines:
                inside = calls.see(text)
                if number is not None and not inside and _code(text):
                    found.beyond_logging = True
        self.sides = {"-": [], "+": []}


def _code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")
