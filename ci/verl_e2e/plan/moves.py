"""Files a diff deletes at one path and adds at another: moved code, read as what the move changed.

`git diff` without rename detection (and GitHub's API past its rename limit) prints a directory move as
every line deleted and every line added: "Restructure NemotronH directories" then reads as 7,000 new
lines that name `num_query_groups`, `state_dict` and every other aspect's words, and the plan runs
Levels 1, 2 and 4 for code that did not change. A deleted Python file and an added one of the same name
whose lines mostly match (difflib's ratio, as git's similarity index) are one renamed file; its change
is the diff between the two texts, with context, parsed like any modified file.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Callable, Mapping
from typing import TypeVar

SIMILAR = 0.5  # git's default rename threshold (-M50%)

F = TypeVar("F")


def pairs(deleted: Mapping[str, list[str]], added: Mapping[str, list[str]]) -> dict[str, str]:
    """Deleted path -> added path for each deleted file whose text an added file of the same name
    mostly keeps (the most similar one; each added file pairs once)."""
    by_name: dict[str, list[str]] = {}
    for path in added:
        by_name.setdefault(posixpath.basename(path), []).append(path)
    out: dict[str, str] = {}
    for old, old_lines in deleted.items():
        best, score = None, SIMILAR
        for new in by_name.get(posixpath.basename(old), []):
            if new in out.values():
                continue
            matcher = difflib.SequenceMatcher(None, old_lines, added[new], autojunk=False)
            if matcher.real_quick_ratio() < score or matcher.quick_ratio() < score:
                continue
            ratio = matcher.ratio()
            if ratio >= score:
                best, score = new, ratio
        if best is not None:
            out[old] = best
    return out


def as_rename(old: str, new: str, old_lines: list[str], new_lines: list[str]) -> str:
    """The unified diff `git diff -M` would print for the pair: rename headers, then changed hunks."""
    head = [f"diff --git a/{old} b/{new}", f"rename from {old}", f"rename to {new}"]
    body = difflib.unified_diff(old_lines, new_lines, f"a/{old}", f"b/{new}", lineterm="", n=3)
    return "\n".join([*head, *body]) + "\n"


def fold(files: dict[str, F], raw: Callable[[F], tuple[str, list[str]]], parse: Callable[[str], dict[str, F]]) -> None:
    """Replace each paired deletion and addition in `files` (keyed by path) by the rename's own parse.

    `raw(f)` gives a file's status and the full text its hunks show (deleted or added lines)."""
    texts = {path: raw(f) for path, f in files.items() if path.endswith(".py")}
    deleted = {p: lines for p, (status, lines) in texts.items() if status == "D" and lines}
    added = {p: lines for p, (status, lines) in texts.items() if status == "A" and lines}
    if not deleted or not added:
        return
    for old, new in pairs(deleted, added).items():
        renamed = parse(as_rename(old, new, deleted[old], added[new]))
        if new in renamed:
            del files[old]
            files[new] = renamed[new]
