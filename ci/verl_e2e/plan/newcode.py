"""New code a change adds: whether anything can run it yet.

A new module runs only if something imports it, and new top-level definitions (additions.py) only if
something names them. The changed lines that would (an import, a call) are judged where they are, so
what the new code's words suggest matters only once another changed file a cell can load names it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.targets import SHARED_DIRS, family_dir


def called(matrix: Matrix, file: ChangedFile, files: Sequence[ChangedFile]) -> bool:
    """Whether the new definitions may run: they are a family's own code (its cells are the check), or
    another changed source file a cell can load names one of them (then their words count)."""
    directory = family_dir(file.path)
    if not file.path.startswith("src/") or directory not in (None, *SHARED_DIRS):
        return True
    names = file.new_definitions or ()
    for other in files:
        where = family_dir(other.path)
        unknown_model = where not in (None, *SHARED_DIRS) and matrix.dir_family(where or "") is None
        if other is file or not other.path.startswith("src/") or unknown_model:
            continue
        if other.diff_lines is None or any(re.search(rf"\b{n}\b", line) for n in names for line in _added(other)):
            return True
    return False


def unimported(file: ChangedFile, files: Sequence[ChangedFile]) -> str | None:
    """Why a module the change adds runs in no cell: nothing names it (no other changed file's added
    lines, nor the base tree where `--repo` could look), so nothing imports it. A model directory's new
    file is the family's (its rules run the family), and a package's `__init__` is imported with it.
    With `--repo`, the same for an existing module of a family's directory that nothing names at the base
    (a family's helper no module imports: Llama 4's chunking utilities; gitchanges._unnamed_module)."""
    if file.unnamed_module:  # an existing module, which nothing names at the base either (--repo)
        stem = (file.old_path or file.path).rsplit("/", 1)[-1].removesuffix(".py")
        return f"a module nothing imports: no other Bridge source names `{stem}` and verl imports no such module"
    if file.status != "A" or file.named_before or not file.path.startswith("src/megatron/bridge/"):
        return None
    if not file.path.endswith(".py") or file.path.endswith("__init__.py"):
        return None
    if family_dir(file.path) not in (None, *SHARED_DIRS):
        return None
    stem = file.path.rsplit("/", 1)[-1].removesuffix(".py")
    word = re.compile(rf"\b{re.escape(stem)}\b")
    for other in files:
        if other is not file and (other.diff_lines is None or any(word.search(line) for line in _added(other))):
            return None
    return f"a new module nothing imports: no changed file names `{stem}`, so no cell loads it"


def _added(file: ChangedFile) -> tuple[str, ...]:
    """The lines a file's change adds (its diff lines are the removed ones, then the added)."""
    lines = file.diff_lines or ()
    return lines[len(lines) - len(file.added_at) :]
