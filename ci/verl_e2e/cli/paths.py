"""Every path a user passes is checked before any work starts: one line, exit 2, and what to pass.

A path that cannot be read, or an output that cannot be written, used to surface as a traceback
(exit 1) at the end of the work, after minutes of a run or of building an index. Checked here,
right after parsing, for every command alike, so a dry run refuses what the run would refuse.
Inputs the commands already read with their own one-line refusal (the change sources, matrix.yaml,
logs, run dirs, event payloads) keep those; `--plan` of `report` stays optional on purpose: the
workflow's report runs even when the plan job left no plan.json.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

from verl_e2e.errors import UsageError


class Kind(Enum):
    READ_DIR = "an existing directory"
    WRITE_FILE = "a file in an existing, writable directory"
    WRITE_DIR = "a writable directory (created if missing)"
    DIR_IF_PRESENT = "a directory (a cache may be missing: then nothing is cached yet)"


# command -> (argparse dest, flag as the user typed it, what it must be)
CHECKED: dict[str, tuple[tuple[str, str, Kind], ...]] = {
    "plan": (("out", "--out", Kind.WRITE_FILE),),
    "run": (
        ("bridge", "--bridge", Kind.READ_DIR),
        ("out", "--out", Kind.WRITE_DIR),
        ("verl", "--verl", Kind.READ_DIR),
        ("cache", "--cache", Kind.DIR_IF_PRESENT),
    ),
    "run-cell": (
        ("bridge", "--bridge", Kind.READ_DIR),
        ("out", "--out", Kind.WRITE_DIR),
        ("verl", "--verl", Kind.READ_DIR),
        ("cache", "--cache", Kind.DIR_IF_PRESENT),
    ),
    "base-run": (
        ("like", "--like", Kind.READ_DIR),
        ("bridge", "--bridge", Kind.READ_DIR),
        ("out", "--out", Kind.WRITE_DIR),
        ("verl", "--verl", Kind.READ_DIR),
        ("cache", "--cache", Kind.DIR_IF_PRESENT),
    ),
    "image": (("wheels", "--wheels", Kind.READ_DIR),),
    "prefetch": (("cache", "--cache", Kind.DIR_IF_PRESENT),),
    "surface": (
        ("bridge", "--bridge", Kind.READ_DIR),
        ("verl", "--verl", Kind.READ_DIR),
        ("out", "--out", Kind.WRITE_FILE),
    ),
    "report": (
        ("summary", "--summary", Kind.WRITE_FILE),
        ("junit", "--junit", Kind.WRITE_FILE),
        ("baseline", "--baseline", Kind.READ_DIR),
    ),
}


def _nearest_existing(path: Path) -> Path:
    return next((p for p in (path, *path.parents) if p.exists()), Path("/"))


def problem(path: Path, kind: Kind) -> str | None:
    """What is wrong with `path` for this use, or None."""
    if kind is Kind.READ_DIR:
        if not path.exists():
            return "no such directory"
        return None if path.is_dir() else "not a directory"
    if kind is Kind.DIR_IF_PRESENT:
        return "not a directory" if path.exists() and not path.is_dir() else None
    if kind is Kind.WRITE_FILE:
        if path.is_dir():
            return "is a directory, not a file"
        if path.exists():
            return None if os.access(path, os.W_OK) else "cannot be written (permission denied)"
        parent = path.parent
        if not parent.is_dir():
            return f"cannot be written: {parent} is not an existing directory"
        return None if os.access(parent, os.W_OK | os.X_OK) else f"cannot be written: {parent} is not writable"
    if path.exists():
        if not path.is_dir():
            return "not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "cannot be written (permission denied)"
    base = _nearest_existing(path)
    if not base.is_dir():
        return f"cannot be created: {base} is not a directory"
    return None if os.access(base, os.W_OK | os.X_OK) else f"cannot be created: {base} is not writable"


def _given(args: argparse.Namespace) -> Iterator[tuple[str, Path, Kind]]:
    for dest, flag, kind in CHECKED.get(str(getattr(args, "command", "")), ()):
        value = getattr(args, dest, None)
        if value is not None:
            yield flag, Path(value), kind


def check(args: argparse.Namespace) -> None:
    """Refuse the first path that cannot serve, naming the command, the flag and what it must be."""
    for flag, path, kind in _given(args):
        found = problem(path, kind)
        if found is not None:
            raise UsageError(f"{args.command} {flag} {path}: {found}; pass {kind.value}")
