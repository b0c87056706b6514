"""A function or class renamed where nothing names it: the change changes nothing that runs.

A private helper renamed (`_get_provider_from_model` -> `_provider_from_model`) with no caller
anywhere in Bridge's sources, and a new name nothing in them used before (so it overrides no base
class's method and answers no `getattr`), computes exactly what it did. Its words (a `provider`, a
`last_rank`) would otherwise select levels. Only `plan --repo` can say so: it needs the whole base
tree (`git grep`), not the diff.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from verl_e2e.plan.changes import stripped_dump

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def renamed_definition(old: bytes | None, new: bytes | None) -> tuple[str, str] | None:
    """(old name, new name) where the two versions differ only in one definition's name (docstrings,
    comments and hints aside); None otherwise."""
    if old is None or new is None:
        return None
    try:
        before, after = ast.parse(old), ast.parse(new)
    except (SyntaxError, ValueError):
        return None
    olds = [n for n in ast.walk(before) if isinstance(n, _DEFS)]
    news = [n for n in ast.walk(after) if isinstance(n, _DEFS)]
    if len(olds) != len(news):
        return None
    changed = [(a, b) for a, b in zip(olds, news, strict=True) if a.name != b.name]
    if len(changed) != 1:
        return None
    was, now = changed[0]
    renamed = (was.name, now.name)
    now.name = was.name
    return renamed if stripped_dump(before) == stripped_dump(after) else None


def where_named(repo: Path, rev: str, name: str) -> list[tuple[str, int]] | None:
    """(path, line) of every line of Bridge's sources at `rev` that holds `name` as a word; None where
    git cannot say. One reader for the rename check here and the caller look-up (callsites.py)."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "grep", "-n", "-w", "-F", "-e", name, rev, "--", "src/"],
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    if proc.returncode not in (0, 1):
        return None
    found = []
    for row in proc.stdout.splitlines():
        parts = row.split(":", 3)  # rev:path:line:text
        if len(parts) == 4 and parts[2].isdigit():
            found.append((parts[1], int(parts[2])))
    return found


def mentions(repo: Path, rev: str, name: str) -> int:
    """Lines of Bridge's sources at `rev` that hold `name` as a word (-1 where git cannot say)."""
    found = where_named(repo, rev, name)
    return -1 if found is None else len(found)


def unused(repo: Path, rev: str, renamed: tuple[str, str], verl_reads: set[str]) -> bool:
    """The old name is named only where it is defined, the new one nowhere, and verl reads neither."""
    was, now = renamed
    if was in verl_reads or now in verl_reads:
        return False
    return mentions(repo, rev, was) == 1 and mentions(repo, rev, now) == 0
