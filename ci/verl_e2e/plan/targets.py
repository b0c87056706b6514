"""Which families a change runs on: the architectures a model file serves, its directory's family,
or the default; and the family a variant kind (MoE, VLM, MTP, quantisation, custom layers) needs.

Shared by the scan's rules, aspects and recorded runs, so every route to a level picks families the
same way. Collects the warnings (an architecture no family runs) and the per-level reasons a change
has no family at all (an unsupported architecture), which the selection reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from verl_e2e.config.matrix import Family, Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.registry import SHARED
from verl_e2e.plan.surface import MODELS

SHARED_DIRS = SHARED
FLAGS = ("moe", "vlm", "mtp")


def family_dir(path: str) -> str | None:
    """`src/megatron/bridge/models/<dir>/...` -> `<dir>`; None for anything else."""
    if not path.startswith(MODELS):
        return None
    rest = path[len(MODELS) :]
    return rest.split("/", 1)[0] if "/" in rest else None


def new_model_code(file: ChangedFile) -> bool:
    """A file a change adds to one model family's directory: the new model's own loss or init settings,
    which Levels 0 and 4 build and step; Level 5 is for numerics the models that already train use."""
    return file.status == "A" and family_dir(file.path) not in (None, *SHARED_DIRS)


def relative(path: str) -> str:
    return path[len(MODELS) :].split("/", 1)[1]


def active_flags(family: Family, rel_paths: tuple[str, ...] = ()) -> set[str]:
    return {f for f in FLAGS if family.has(f, rel_paths)}  # type: ignore[arg-type]


class Targets:
    """The family choices of one scan, with what they had to warn about."""

    def __init__(self, matrix: Matrix) -> None:
        self.matrix = matrix
        self.warnings: set[str] = set()
        self.unsupported: dict[int, set[str]] = defaultdict(set)

    def kind_family(self, fam: str, kind: str, moe: bool = False) -> str | None:
        """The family a variant of `kind` runs on: `fam` when it has such a model, else the default's.
        The default family's kind family (`defaults.kind_families`) comes first: shared MoE code runs on
        the MoE family whose cells have run for real, not on the default's own MoE stand-in; with `moe`
        (the change is MoE code too) so do its other kinds' variants (MoE quantisation: QAT on experts)."""
        family = self.matrix.families[fam]
        redirect = self.matrix.defaults.kind_families
        if fam == self.matrix.defaults.family and redirect.get(kind) in self.matrix.families:
            return redirect[kind]
        home = redirect.get("moe", "") if moe and fam == self.matrix.defaults.family and kind != "all" else ""
        if home in self.matrix.families and self.matrix.families[home].supports(kind):
            return home
        if family.supports(kind):
            return fam
        if fam == self.matrix.defaults.family:
            alt = self.matrix.defaults.kind_families.get(kind)
            return alt if alt in self.matrix.families else None
        return None

    def targets(self, path: str, file: ChangedFile, changed: bool) -> list[str]:
        """The families a change to `path` runs: those of the architectures it serves, else its directory's."""
        default = self.matrix.defaults.family
        directory = family_dir(path)
        users = self.users(file)
        if users is not None and (directory is None or directory in SHARED_DIRS):
            return [users]
        if not changed or directory is None or directory in SHARED_DIRS:
            return [default]
        found: dict[str, None] = {}
        for arch in file.architectures or ():
            fam = self.matrix.family_for_architecture(arch)
            if fam is not None:
                found[fam.name] = None
            elif arch not in self.matrix.unsupported:
                self.warnings.add(
                    f"{path} serves {arch}, which no family in matrix.yaml runs; add it to a family's "
                    "architectures (or to unsupported, with the reason)"
                )
        if found:
            return list(found)
        if any(a in self.matrix.unsupported for a in file.architectures or ()):
            return []  # the caller states why, per level
        fallback = self.matrix.dir_family(directory)
        if fallback is not None:
            return [fallback.name]
        self.warnings.add(
            f"{path}: model directory '{directory}' has no entry under families in matrix.yaml; ran the "
            f"default family '{default}' instead. Add families.{directory} with its smallest checkpoint."
        )
        return [default]

    def users(self, file: ChangedFile) -> str | None:
        """Shared code only some architectures' model files use (users.py) runs on one of their families
        (the one with the fewest MoE/VLM/MTP flags), unless the default family is one of them; None for
        code every model may run."""
        if not file.serves:
            return None
        found = {f.name: f for a in file.serves if (f := self.matrix.family_for_architecture(a)) is not None}
        if not found or self.matrix.defaults.family in found:
            return None
        # the plainest of them (fewest MoE/VLM/MTP flags); where that one cannot run in verl (a Level 0 cell of
        # it plans nothing), the runnable one closest to it: all of its flags, then the fewest others (Qwen3.5
        # text -> Qwen3-Next, of its directory, not Qwen3-VL, which lacks the Gated DeltaNet layers the code serves)
        best = min(found, key=lambda n: (len(active_flags(found[n])), n))
        runnable = [n for n in found if found[n].blocked("all") is None]
        if best in runnable or not runnable:
            return best
        want, home = active_flags(found[best]), found[best].dir
        return min(
            runnable,
            key=lambda n: (not want <= active_flags(found[n]), found[n].dir != home, len(active_flags(found[n])), n),
        )

    def no_family(self, path: str, file: ChangedFile, levels: Iterable[int]) -> None:
        for arch in file.architectures or ():
            if arch in self.matrix.unsupported:
                for level in levels:
                    self.unsupported[level].add(f"{path} serves {arch}: {self.matrix.unsupported[arch]}")
