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
from verl_e2e.plan.surface import MODELS
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


def unregistered_directory(file: ChangedFile, files: Sequence[ChangedFile]) -> str | None:
    """Why a model directory the change creates runs in no cell: no file of it registers a bridge, so
    AutoBridge picks it for no checkpoint, and no other changed file calls what it defines (an import or
    a type annotation naming it only loads it; those lines are judged where they are). The directory is
    new when its `__init__.py` is added: a family of the same name in matrix.yaml is then another code's
    (a later Bridge reused the name), and its cells would build nothing of this. A file whose diff is
    unknown leaves it undecided (None)."""
    where = family_dir(file.path)
    if file.status != "A" or where in (None, *SHARED_DIRS) or not file.path.endswith(".py"):
        return None
    prefix = f"{MODELS}{where}/"
    own = [f for f in files if f.path.startswith(prefix)]
    if not any(f.path == f"{prefix}__init__.py" and f.status == "A" for f in own):
        return None  # an existing directory: its bridges may import the new module
    if any(f.diff_lines is None for f in own) or any("register_bridge" in line for f in own for line in _added(f)):
        return None
    defined = {m.group(1) for f in own for line in _added(f) if (m := _TOP_DEFINITION.match(line))}
    calls = re.compile(rf"\b({'|'.join(map(re.escape, sorted(defined)))})\s*\(") if defined else None
    for other in files:
        if other.path.startswith(prefix) or not other.path.startswith("src/"):
            continue
        if other.diff_lines is None or (calls and any(calls.search(line) for line in _added(other))):
            return None
    return (
        f"a model directory the change creates (`{where}/`) that registers no bridge: AutoBridge builds it for "
        "no checkpoint, and no other changed file calls what it defines"
    )


_TOP_DEFINITION = re.compile(r"(?:class|def)\s+(\w+)")  # at column 0: the module's own names


def _added(file: ChangedFile) -> tuple[str, ...]:
    """The lines a file's change adds (its diff lines are the removed ones, then the added)."""
    lines = file.diff_lines or ()
    return lines[len(lines) - len(file.added_at) :]
