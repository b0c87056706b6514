"""A MoE, VLM or MTP family's own model code runs its Level 4 variant, the architecture-specific level:
which changes count as the family's own.

Tried and left out: no variant for a family that cannot run in verl when the file is one other families'
bridges build on too (Gemma 3's provider, which Gemma 4's subclasses). The blind probe labels leave such
families out, but the dev set's labellers require Level 4 for a Gemma 3 RoPE change (#2390), which only
Gemma 4's variant gives: must-recall fell from 0.987 to 0.982."""

from __future__ import annotations

import re

from verl_e2e.config.aspects import code_lines
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.collector import Collector
from verl_e2e.plan.targets import family_dir

_IMPORT = re.compile(r"\s*(from\s+[\w.]+\s+import\s|import\s)")


def variant(matrix: Matrix, col: Collector, fam: str, flags: set[str], path: str, *, file: ChangedFile) -> None:
    """A change to a MoE/VLM/MTP family's own model files runs its Level 4 variant. Not an __init__ (it
    only re-exports), nor a file of another family's directory (a base bridge the family subclasses):
    it runs there too, but the family's MoE, vision or MTP parts are in its own files. Nor a change that
    only moves the file or rewrites its import lines (a directory restructure): Level 0 imports the
    module and builds the model, and the family's MoE, vision or MTP code is the same code as before."""
    if matrix.families[fam].dir != family_dir(path) or path.endswith("__init__.py") or _imports_only(file):
        return
    named = "/".join({"moe": "MoE", "vlm": "VLM", "mtp": "MTP"}[f] for f in sorted(flags))
    why = f"{fam} is a {named} model: Level 4 runs its architecture-specific variant"
    col.add(4, fam, flags, ("architecture", why), path)


def _imports_only(file: ChangedFile) -> bool:
    """Every changed code line is a one-line import (a move with its imports renamed), as the diff shows."""
    if file.diff_lines is None or file.status in ("A", "D"):
        return False
    return all(_IMPORT.match(line) for line in code_lines(file.diff_lines))
