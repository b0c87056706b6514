"""Changed paths -> coverage levels, each with the rules and paths that chose it.

Pure: takes the loaded matrix and the changed files, returns a `Selection`. The steps, in order:
escalations see every path; then ignored paths (docs, tests, Bridge-only code) and cosmetic Python
changes are set aside; then every rule is tried on every remaining path (all rules that match
contribute; their order is the order reasons are printed). A rule's levels go to the family of the
path (`family: changed`) or to the default family. Families flagged MoE/VLM/MTP for the changed files
add Level 4, and any level above 0 implies Level 0 for the same family.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from verl_e2e.aspects import find
from verl_e2e.changes import ChangedFile
from verl_e2e.config import LEVELS, Family, Matrix, Rule
from verl_e2e.errors import UsageError, did_you_mean
from verl_e2e.registry import SHARED
from verl_e2e.runtime import Ran, cheapest, executed
from verl_e2e.skipped import skip_reason
from verl_e2e.surface import MODELS, Surface

SHARED_DIRS = SHARED
FLAGS = ("moe", "vlm", "mtp")
PEFT = "src/megatron/bridge/peft/"
LORA = "lora"  # a target kind marker: the change is to LoRA code, so its custom-layers cell keeps LoRA


@dataclass(frozen=True)
class Reason:
    """Why a level runs for a family: a rule and the paths that fired it."""

    rule: str
    why: str
    family: str
    paths: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"rule": self.rule, "why": self.why, "family": self.family, "paths": list(self.paths)}


@dataclass(frozen=True)
class Selection:
    levels: tuple[int, ...]
    # level -> family -> variant kinds to run ("all", "moe", "vlm", "mtp")
    targets: dict[int, dict[str, frozenset[str]]]
    reasons: dict[int, tuple[Reason, ...]]
    skipped: dict[int, str]
    ignored: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cosmetic: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()  # on verl's surface, but no rule or aspect selected anything
    off_surface: dict[str, str] = field(default_factory=dict)  # src/ path -> why verl never reaches it
    unsupported: dict[int, tuple[str, ...]] = field(default_factory=dict)  # level -> why a change has no family
    warnings: tuple[str, ...] = ()
    requested: str = "auto"

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({f for fams in self.targets.values() for f in fams}))


class _Collector:
    """Accumulates (level, family) targets with their variant kinds and reasons."""

    def __init__(self) -> None:
        self.kinds: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.hits: dict[tuple[int, str, str], tuple[str, dict[str, None]]] = {}

    def add(self, level: int, family: str, kinds: Iterable[str], reason: tuple[str, str], path: str | None) -> None:
        """Record that `reason` = (rule, why) selects `level` for `family` because of `path`."""
        self.kinds[level][family].update(kinds)
        entry = self.hits.setdefault((level, reason[0], family), (reason[1], {}))
        if path is not None:
            entry[1][path] = None


def family_dir(path: str) -> str | None:
    """`src/megatron/bridge/models/<dir>/...` -> `<dir>`; None for anything else."""
    if not path.startswith(MODELS):
        return None
    rest = path[len(MODELS) :]
    return rest.split("/", 1)[0] if "/" in rest else None


def _relative(path: str) -> str:
    return path[len(MODELS) :].split("/", 1)[1]


def _active_flags(family: Family, rel_paths: tuple[str, ...] = ()) -> set[str]:
    return {f for f in FLAGS if family.has(f, rel_paths)}  # type: ignore[arg-type]


def _diff_says(rule: Rule, file: ChangedFile) -> tuple[bool, bool]:
    """(fires, undecided): undecided means the rule needed the diff and it was not known."""
    if rule.diff is None:
        return True, False
    if file.diff_lines is None:
        return rule.when_no_diff == "match", rule.when_no_diff == "skip"
    return any(rule.diff.search(line) for line in file.diff_lines), False


class _Scan:
    """One pass of the matrix's escalations, ignore lists, rules and aspects over the changed files."""

    def __init__(self, matrix: Matrix, files: Sequence[ChangedFile], surface: Surface | None, ran: Sequence[Ran]):
        self.matrix = matrix
        self.files = files
        self.surface = surface
        self.ran = ran
        self.col = _Collector()
        self.warnings: set[str] = set()
        self.ignored: dict[str, list[str]] = defaultdict(list)
        self.cosmetic: list[str] = []
        self.unmatched: list[str] = []
        self.off_surface: dict[str, str] = {}
        self.unsupported: dict[int, set[str]] = defaultdict(set)
        self.undecided: dict[int, set[str]] = defaultdict(set)
        escalated = {f.path for f in files for rule in matrix.escalations if self._apply(rule, f)}
        for file in files:
            group = next((g for g, ps in matrix.ignore if all(ps.matches(p) for p in file.paths)), None)
            # what real cells ran comes first: ignore lists and static reach can both miss it
            executed = not file.cosmetic and self._executed(file)
            if group is not None and not executed:
                self.ignored[group].append(file.path)
            elif file.cosmetic:
                self.cosmetic.append(file.path)
            else:
                if not executed and self._off_surface(file):
                    continue
                fired = [rule for rule in matrix.rules if self._apply(rule, file)]  # every rule is tried
                if not self._aspects(file) and not fired and file.path not in escalated and not executed:
                    self.unmatched.append(file.path)
                    self._unmatched_runs_level0(file)

    def _executed(self, file: ChangedFile) -> bool:
        """Code a recorded cell ran selects its level: its family for shared code, else the architecture's."""
        module_level = file.module_level or file.diff_lines is None
        hits = [h for p in file.paths for h in executed(self.ran, p, file.scopes, module_level, file.functions)]
        shared = family_dir(file.path) in (None, *SHARED_DIRS)
        for ran, qualname in cheapest(hits, self.matrix.defaults.family):
            known = shared and ran.family in self.matrix.families
            why = f"a real {ran.cell} run executed the changed code (e.g. {qualname})"
            for fam in [ran.family] if known else self._targets(file.path, file, True):
                self.col.add(ran.level, fam, {"all"}, ("executed", why), file.path)
        return bool(hits)

    def _unmatched_runs_level0(self, file: ChangedFile) -> None:
        """On verl's surface but matched by nothing: Level 0 on its architecture's family, never nothing."""
        if file.path.startswith("src/megatron/bridge/"):
            why = "on verl's surface, but no rule, aspect or recorded run selected it: Level 0 by default"
            for fam in self._targets(file.path, file, True):
                self.col.add(0, fam, {"all"}, ("unmatched-surface", why), file.path)

    def _off_surface(self, file: ChangedFile) -> bool:
        """A src/ module verl never reaches, or a change only inside functions nothing verl calls reaches."""
        s = self.surface
        if s is None or not file.path.startswith("src/megatron/bridge/") or file.status == "A":
            return False
        if not file.path.endswith(".py") or family_dir(file.path) not in (None, *SHARED_DIRS):
            return False  # model directories are loaded through the registry: file-wise on the surface
        if not any(s.on_surface(p) for p in file.paths):
            entries = ", ".join(m.removeprefix("megatron.bridge.") or "megatron.bridge" for m in s.entry_modules()[:4])
            self.off_surface[file.path] = (
                f"not on verl's surface: none of the Bridge modules verl {s.verl_commit[:7]} imports "
                f"({entries}, ...) reaches it by import"
            )
            return True
        unreached = [] if file.module_level or file.diff_lines is None else s.unreached(file.path, file.scopes)
        if not unreached:
            return False
        self.off_surface[file.path] = (
            f"not on verl's surface: the change is inside {', '.join(unreached[:3])}"
            f"{' ...' if len(unreached) > 3 else ''}, which no Bridge function verl {s.verl_commit[:7]} calls reaches"
        )
        return True

    def _aspects(self, file: ChangedFile) -> bool:
        """Aspects of what the change touches; True when one selected something."""
        if not file.path.startswith("src/"):
            return False
        if file.diff_lines is None:  # paths only: what the change touches is unknown
            for aspect in self.matrix.aspects:
                if aspect.paths is None or aspect.paths.matches(file.path):
                    for level in aspect.levels:
                        self.undecided[level].add(f"aspect {aspect.name}")
            return False
        hits = find(self.matrix.aspects, file.path, file.diff_lines, file.scopes)
        for hit in hits:
            why = f"{hit.aspect.why} (`{hit.term}` in the {hit.where})"
            targets = self._targets(file.path, file, changed=True)
            if not targets:
                self._no_family(file.path, file, hit.aspect.levels)
            for fam in targets:
                kind, arch = hit.aspect.kind, hit.aspect.architecture
                target = self._kind_family(fam, kind)
                if arch is not None and fam == self.matrix.defaults.family:  # shared code of one kind of layer
                    target = self.matrix.defaults.kind_families.get(arch, target)
                kinds = {kind, LORA} if kind == "custom" and file.path.startswith(PEFT) else {kind}
                for level in sorted(hit.aspect.levels):
                    if target is None:
                        self.unsupported[level].add(
                            f"{file.path}: {fam} has no {kind.upper()} model in matrix.yaml "
                            f"({hit.aspect.name}); add {kind}_model to families.{fam} to run it"
                        )
                        continue
                    self.col.add(level, target, kinds, (f"aspect:{hit.aspect.name}", why), file.path)
        return bool(hits)

    def _kind_family(self, fam: str, kind: str) -> str | None:
        """The family a variant of `kind` runs on: `fam` when it has such a model, else the default's."""
        family = self.matrix.families[fam]
        if family.supports(kind):
            return fam
        if fam == self.matrix.defaults.family:
            alt = self.matrix.defaults.kind_families.get(kind)
            return alt if alt in self.matrix.families else None
        return None

    def _targets(self, path: str, file: ChangedFile, changed: bool) -> list[str]:
        """The families a change to `path` runs: those of the architectures it serves, else its directory's."""
        default = self.matrix.defaults.family
        directory = family_dir(path)
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

    def _apply(self, rule: Rule, file: ChangedFile) -> bool:
        """Try one rule on one file; True when it selected something."""
        matched = [p for p in file.paths if rule.paths.matches(p)]
        if not matched:
            return False
        fires, needs_diff = _diff_says(rule, file)
        if needs_diff:
            for level in rule.levels:
                self.undecided[level].add(rule.name)
        if not fires:
            return False
        selected = False
        for path in matched:
            targets = self._targets(path, file, rule.family == "changed")
            if not targets:
                self._no_family(path, file, rule.levels)
                selected = True
            for fam in targets:
                selected |= self._fire(rule, path, fam, changed=rule.family == "changed")
        return selected

    def _no_family(self, path: str, file: ChangedFile, levels: Iterable[int]) -> None:
        for arch in file.architectures or ():
            if arch in self.matrix.unsupported:
                for level in levels:
                    self.unsupported[level].add(f"{path} serves {arch}: {self.matrix.unsupported[arch]}")

    def _fire(self, rule: Rule, path: str, fam: str, changed: bool) -> bool:
        flags: set[str] = set()
        if changed and family_dir(path) is not None:
            flags = _active_flags(self.matrix.families[fam], (_relative(path),))
        if rule.only is not None and rule.only not in flags:
            return False
        kinds = {rule.only} if rule.only else ({rule.kind} if rule.kind != "all" else {"all", *flags})
        for level in sorted(rule.levels):
            self.col.add(level, fam, kinds, (rule.name, rule.why), path)
        if changed and flags and not path.endswith("__init__.py"):  # an __init__ only re-exports
            named = "/".join({"moe": "MoE", "vlm": "VLM", "mtp": "MTP"}[f] for f in sorted(flags))
            why = f"{fam} is a {named} model: Level 4 runs its architecture-specific variant"
            self.col.add(4, fam, flags, ("architecture", why), path)
        return True

    def retarget(self, families: Sequence[str]) -> None:
        """--family: every selected level runs on the named families instead."""
        out = _Collector()
        for (level, rule, _fam), (why, paths) in self.col.hits.items():
            kinds = set().union(*self.col.kinds[level].values())
            for fam in families:
                out.kinds[level][fam].update(kinds)
                out.hits.setdefault((level, rule, fam), (why, {}))[1].update(paths)
        self.col = out

    def imply_level0(self) -> None:
        for level in [lv for lv in sorted(self.col.kinds) if lv > 0]:
            for fam in self.col.kinds[level]:
                if fam not in self.col.kinds[0]:
                    why = f"Level 0 is the base of every level (implied by Level {level})"
                    self.col.add(0, fam, {"all"}, ("implied", why), None)

    def request(self, requested: Sequence[int], family_override: Sequence[str]) -> None:
        """An explicit request replaces the rules' levels but keeps the families the change touches."""
        found = sorted({f for fams in self.col.kinds.values() for f in fams})
        families = list(family_override) or found or [self.matrix.defaults.family]
        out = _Collector()
        for fam in families:
            flags = set().union(*(self.col.kinds[lv].get(fam, set()) for lv in self.col.kinds)) - {"all"}
            flags |= _active_flags(self.matrix.families[fam])
            # a dense model's Level 4 is its layers trained full-parameter (the custom-layers variant)
            dense_l4 = set() if flags - {"quant", "custom"} else {"custom"}
            for level in sorted(set(requested) | {0}):
                reason = (
                    ("requested", "requested explicitly")
                    if level in requested
                    else ("implied", "Level 0 is the base of every level")
                )
                out.add(level, fam, {"all", *flags, *(dense_l4 if level == 4 else ())}, reason, None)
        self.col = out
        self.undecided.clear()

    def selection(self, requested: str) -> Selection:
        order = {r.name: i for i, r in enumerate((*self.matrix.escalations, *self.matrix.rules))}
        reasons: dict[int, list[Reason]] = defaultdict(list)
        ranked = sorted(self.col.hits.items(), key=lambda kv: (order.get(kv[0][1], len(order)), kv[0]))
        for (level, rule, fam), (why, paths) in ranked:
            reasons[level].append(Reason(rule, why, fam, tuple(sorted(paths))))
        targets = {
            lv: {f: frozenset(k) for f, k in sorted(fams.items())} for lv, fams in sorted(self.col.kinds.items())
        }
        return Selection(
            levels=tuple(sorted(set(targets) | set(self.unsupported))),
            targets=targets,
            reasons={lv: tuple(reasons[lv]) for lv in sorted(reasons)},
            skipped={
                lv: skip_reason(
                    self.matrix, lv, requested, changed=len(self.files), ignored=self.ignored, undecided=self.undecided
                )
                for lv in LEVELS
                if lv not in targets and lv not in self.unsupported
            },
            ignored={g: tuple(sorted(p)) for g, p in sorted(self.ignored.items())},
            cosmetic=tuple(sorted(self.cosmetic)),
            unmatched=tuple(sorted(self.unmatched)),
            off_surface=dict(sorted(self.off_surface.items())),
            unsupported={lv: tuple(sorted(w)) for lv, w in sorted(self.unsupported.items())},
            warnings=tuple(sorted(self.warnings)),
            requested=requested,
        )


def select(
    matrix: Matrix,
    files: Sequence[ChangedFile],
    requested: Sequence[int] | None = None,
    family_override: Sequence[str] = (),
    surface: Surface | None = None,
    *,
    ran: Sequence[Ran] = (),
) -> Selection:
    """Choose levels for `files`; `requested` (from a comment or dispatch) replaces the automatic choice.
    `ran`: what recorded real cells executed (runtime.shipped()), consulted before static reach."""
    for name in family_override:
        if name not in matrix.families:
            raise UsageError(
                f"--family {name}: unknown family{did_you_mean(name, matrix.families)}; "
                f"expected one of the families in {matrix.source} (see `verl-e2e families`)"
            )
    scan = _Scan(matrix, files, surface, ran)
    if requested is not None:
        scan.request(requested, family_override)
        return scan.selection(",".join(map(str, requested)))
    if family_override:
        scan.retarget(family_override)
    scan.imply_level0()
    return scan.selection("auto")
