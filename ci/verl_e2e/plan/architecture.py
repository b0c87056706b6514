"""A MoE, VLM or MTP family's own model code runs its Level 4 variant, the architecture-specific level:
which changes count as the family's own, and which families it would only plan cells for that cannot run."""

from __future__ import annotations

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.collector import Collector
from verl_e2e.plan.targets import family_dir


def variant(matrix: Matrix, col: Collector, fam: str, flags: set[str], path: str) -> None:
    """A change to a MoE/VLM/MTP family's own model files runs its Level 4 variant. Not an __init__ (it
    only re-exports), nor a file of another family's directory (a base bridge the family subclasses):
    it runs there too, but the family's MoE, vision or MTP parts are in its own files."""
    if matrix.families[fam].dir != family_dir(path) or path.endswith("__init__.py"):
        return
    named = "/".join({"moe": "MoE", "vlm": "VLM", "mtp": "MTP"}[f] for f in sorted(flags))
    why = f"{fam} is a {named} model: Level 4 runs its architecture-specific variant"
    col.add(4, fam, flags, ("architecture", why), path)


def inherited_by_blocked(matrix: Matrix, fam: str, serves: tuple[str, ...] | None) -> bool:
    """A family that cannot run in verl, reached by a file of its directory that other families' bridges
    build on too (Gemma 3's provider, which Gemma 4's subclasses): its architecture variant would plan a
    cell that cannot run for code the runnable families' Level 0 builds. Its own files still select it."""
    family = matrix.families[fam]
    if family.blocked("all") is None or not serves:
        return False
    return any(a not in family.architectures for a in serves)
