"""A diff's hunks located in the recorded Bridge commit, to name the functions a change sits in.

A unified diff names only the unindented def or class above a hunk: `class AutoBridge`, not the method
whose line changed. With a clone (`plan --repo`) both ASTs say it exactly (scopes.py); from the diff
alone, this module reads the line index of the commit the records come from (data/lines.json, written
by tools/build_line_index.py: a short hash of each line and the span of every def and class). A hunk
whose old side, context and removed lines alike, is the same text at one offset in that commit is
located there, and the base lines that stand for the change (anchors.py) get the defs around them.

It stays out of the way where it could mislead: a file the index lacks, a hunk not found whole at one
offset (the code around it changed since), and a change that adds a def, a class or a decorator (the
new function, not the neighbour, would hold the added lines) leave the file as a diff alone describes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

INDEX = Path(__file__).resolve().parents[1] / "data" / "lines.json"
_OPENS = re.compile(r"\s*(async\s+def|def|class)\s|\s*@")


@dataclass
class Sides:
    """Fed the body lines of one file's hunks (tag, text, old- and new-side line numbers) as the diff is read:
    each hunk's two sides, with the lines that changed on each."""

    old: list[list[tuple[int, str, bool]]] = field(default_factory=list)  # (line, text, removed) per hunk
    new: list[list[tuple[int, str, bool]]] = field(default_factory=list)  # (line, text, added) per hunk
    opens: bool = False  # an added line opens a def or class, or decorates one
    _old: list[tuple[int, str, bool]] = field(default_factory=list)
    _new: list[tuple[int, str, bool]] = field(default_factory=list)

    def see(self, tag: str, text: str, old_no: int, new_no: int) -> None:
        if tag in (" ", "-"):
            self._old.append((old_no, text, tag == "-"))
        if tag in (" ", "+"):
            self._new.append((new_no, text, tag == "+"))
        if tag == "+" and _OPENS.match(text):
            self.opens = True

    def finish(self) -> None:
        if self._old or self._new:
            self.old.append(self._old)
            self.new.append(self._new)
        self._old, self._new = [], []


@dataclass(frozen=True)
class Located:
    """Where a file's change sits in the recorded commit."""

    functions: tuple[str, ...]  # the innermost def/class around each line that stands for the change
    scopes: tuple[str, ...]  # every def/class around them, outermost first, as plain names
    outside_defs: bool  # a line that stands for the change lies outside every def and class


@lru_cache(maxsize=1)
def _index() -> dict[str, Any]:
    try:
        files: dict[str, Any] = json.loads(INDEX.read_text())["files"]
        return files
    except (OSError, ValueError, KeyError):
        return {}


WIDTH = 6  # hex digits a line (tools/build_line_index.py HASH_HEX)


def _hash(text: str) -> str:
    return hashlib.blake2b(text.strip().encode(), digest_size=WIDTH // 2).hexdigest()


@dataclass(frozen=True)
class _File:
    lines: tuple[str, ...]  # line n's hash at [n - 1]
    unique: dict[str, int]  # hash -> its line, for hashes of one non-blank line only
    spans: tuple[tuple[int, int, str], ...]


@lru_cache(maxsize=64)
def _file(path: str) -> _File | None:
    entry = _index().get(path)
    if entry is None:
        return None
    raw: str = entry["hashes"]
    lines = tuple(raw[i : i + WIDTH] for i in range(0, len(raw), WIDTH))
    blank = _hash("")
    counts = Counter(lines)
    unique = {h: n + 1 for n, h in enumerate(lines) if counts[h] == 1 and h != blank}
    return _File(lines, unique, tuple((int(s), int(e), str(q)) for s, e, q in entry["spans"]))


def _offset(rec: _File, hunk: list[tuple[int, str]]) -> tuple[int, set[int]] | None:
    """The offset at which most of the hunk's non-blank old-side lines have their text in the recorded
    file (at least two, and three in five), with the recorded lines that matched there."""
    code = [(n, _hash(t)) for n, t in hunk if t.strip()]
    votes = Counter(rec.unique[h] - n for n, h in code if h in rec.unique)
    if not votes:
        return None
    delta, _ = votes.most_common(1)[0]
    matched = {n + delta for n, h in code if 0 < n + delta <= len(rec.lines) and rec.lines[n + delta - 1] == h}
    return (delta, matched) if len(matched) >= max(2, 0.6 * len(code)) else None


def _around(spans: tuple[tuple[int, int, str], ...], line: int) -> list[str]:
    starts = [s for s, _, _ in spans]
    return [name for s, e, name in spans[: bisect_right(starts, line)] if s <= line <= e]


def locate(
    path: str, sides: Sides, base_lines: tuple[int, ...] | None, quiet: tuple[set[int], set[int]] = (set(), set())
) -> Located | None:
    """The defs around the change, found through the recorded commit's text: by the old side where the
    base is that text (a PR after the recorded commit: the change's base lines, anchors.py), else by the
    new side (a PR the recorded commit already holds: its added lines, which that commit's ASTs place as
    the head's would). `quiet`: the (added, removed) import lines that run nothing new (importlines.py),
    left out as a checkout's reading leaves them. None where the file, a hunk or a line cannot be placed
    there for certain."""
    rec = _file(path)
    if rec is None or not sides.old:
        return None
    if base_lines and not sides.opens:
        found = _place(rec, sides.old, tuple(n for n in base_lines if n not in quiet[1]))
        if found is not None:
            return found
    added = tuple(n for hunk in sides.new for n, _, changed in hunk if changed and n not in quiet[0])
    if any(not any(changed for _, _, changed in hunk) for hunk in sides.new):
        return None  # a hunk that only removes lines has no line of its own on the new side
    return _place(rec, sides.new, added)


def _place(rec: _File, hunks: list[list[tuple[int, str, bool]]], lines: tuple[int, ...]) -> Located | None:
    placed: dict[int, int] = {}
    matched: set[int] = set()
    for hunk in hunks:
        found = _offset(rec, [(n, t) for n, t, _ in hunk])
        if found is None:
            return None
        placed.update((n, n + found[0]) for n, _, _ in hunk)
        matched |= found[1]
    if any(n not in placed for n in lines):
        return None
    around = [_around(rec.spans, placed[n]) for n in sorted(set(lines))]
    if not all(_vouched(rec.spans, names, matched) for names in around):
        return None
    inner = tuple(dict.fromkeys(max(names, key=lambda q: q.count(".")) for names in around if names))
    plain = tuple(dict.fromkeys(part for names in around for q in names for part in q.split(".")))
    return Located(inner, plain, any(not names for names in around))


def _vouched(spans: tuple[tuple[int, int, str], ...], names: list[str], matched: set[int]) -> bool:
    """A line placed in a def counts only where some line that matched lies in that same def: the text
    around the change, not the offset alone, says which function it is."""
    if not names:
        return True
    inner = max(names, key=lambda q: q.count("."))
    return any(s <= n <= e for s, e, q in spans if q == inner for n in matched)
