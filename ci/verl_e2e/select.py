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

from verl_e2e.changes import ChangedFile
from verl_e2e.config import LEVELS, Family, Matrix, Rule
from verl_e2e.errors import UsageError, did_you_mean

MODELS_PREFIX = "src/megatron/bridge/models/"
FLAGS = ("moe", "vlm", "mtp")


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
    unmatched: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    requested: str = "auto"

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({f for fams in self.targets.values() for f in fams}))


class _Collector:
    """Accumulates (level, family) targets with their kinds and reasons."""

    def __init__(self) -> None:
        self.kinds: dict[int, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.hits: dict[tuple[int, str, str], tuple[str, dict[str, None]]] = {}

    def add(self, level: int, family: str, kinds: Iterable[str], rule: str, why: str, path: str | None) -> None:
        self.kinds[level][family].update(kinds)
        entry = self.hits.setdefault((level, rule, family), (why, {}))
        if path is not None:
            entry[1][path] = None


def family_dir(path: str) -> str | None:
    """`src/megatron/bridge/models/<dir>/...` -> `<dir>`; None for anything else."""
    if not path.startswith(MODELS_PREFIX):
        return None
    rest = path[len(MODELS_PREFIX) :]
    return rest.split("/", 1)[0] if "/" in rest else None


def _relative(path: str) -> str:
    return path[len(MODELS_PREFIX) :].split("/", 1)[1]


def _active_flags(family: Family, rel_paths: tuple[str, ...] = ()) -> set[str]:
    return {f for f in FLAGS if family.has(f, rel_paths)}  # type: ignore[arg-type]


def _diff_says(rule: Rule, file: ChangedFile) -> tuple[bool, bool]:
    """(fires, undecided): undecided means the rule needed the diff and it was not known."""
    if rule.diff is None:
        return True, False
    if file.diff_lines is None:
        return rule.when_no_diff == "match", rule.when_no_diff == "skip"
    return any(rule.diff.search(line) for line in file.diff_lines), False


def select(
    matrix: Matrix,
    files: Sequence[ChangedFile],
    requested: Sequence[int] | None = None,
    family_override: Sequence[str] = (),
) -> Selection:
    """Choose levels for `files`; `requested` (from a comment or dispatch) replaces the automatic choice."""
    for name in family_override:
        if name not in matrix.families:
            raise UsageError(
                f"--family {name}: unknown family{did_you_mean(name, matrix.families)}; "
                f"expected one of the families in {matrix.source} (see `verl-e2e families`)"
            )
    default = matrix.defaults.family
    warnings: list[str] = []
    ignored: dict[str, list[str]] = defaultdict(list)
    cosmetic: list[str] = []
    col = _Collector()
    undecided: dict[int, set[str]] = defaultdict(set)

    def target_family(rule: Rule, path: str) -> str:
        if rule.family == "default":
            return default
        fam = family_dir(path)
        if fam in matrix.families:
            return fam
        if fam is not None:
            warnings.append(
                f"{path}: model directory '{fam}' has no entry under families in matrix.yaml; ran the default "
                f"family '{default}' instead. Add families.{fam} with its smallest checkpoint to test it directly."
            )
        return default

    def apply(rule: Rule, file: ChangedFile) -> bool:
        """Try one rule on one file; True when it selected something."""
        matched = [p for p in file.paths if rule.paths.matches(p)]
        if not matched:
            return False
        fires, needs_diff = _diff_says(rule, file)
        if needs_diff:
            for level in rule.levels:
                undecided[level].add(rule.name)
        if not fires:
            return False
        selected = False
        for path in matched:
            fam = target_family(rule, path)
            flags = set()
            if rule.family == "changed" and fam in matrix.families and family_dir(path) == fam:
                flags = _active_flags(matrix.families[fam], (_relative(path),))
            if rule.only is not None and rule.only not in flags:
                continue
            selected = True
            kinds = {rule.only} if rule.only else {"all", *flags}
            for level in sorted(rule.levels):
                col.add(level, fam, kinds, rule.name, rule.why, path)
            if rule.family == "changed" and flags:
                named = "/".join({"moe": "MoE", "vlm": "VLM", "mtp": "MTP"}[f] for f in sorted(flags))
                col.add(4, fam, flags, "architecture", f"{fam} is a {named} family: Level 4 runs its "
                        "architecture-specific variant", path)
        return selected

    for file in files:
        for rule in matrix.escalations:
            apply(rule, file)
    remaining: list[ChangedFile] = []
    for file in files:
        group = next((g for g, ps in matrix.ignore if all(ps.matches(p) for p in file.paths)), None)
        if group is not None:
            ignored[group].append(file.path)
        elif file.cosmetic:
            cosmetic.append(file.path)
        else:
            remaining.append(file)
    unmatched: list[str] = []
    for file in remaining:
        fired = [apply(rule, file) for rule in matrix.rules]
        if not any(fired):
            unmatched.append(file.path)

    if requested is not None:
        return _explicit(matrix, requested, family_override, col, ignored, cosmetic, tuple(sorted(unmatched)), warnings)
    if family_override:
        col = _retarget(col, family_override)
    _imply_level0(col)
    return _finish(matrix, col, undecided, ignored, cosmetic, tuple(sorted(unmatched)), warnings, "auto", files)


def _retarget(col: _Collector, families: Sequence[str]) -> _Collector:
    """--family: every selected level runs on the named families instead."""
    out = _Collector()
    for (level, rule, _fam), (why, paths) in col.hits.items():
        kinds = set().union(*col.kinds[level].values())
        for fam in families:
            out.kinds[level][fam].update(kinds)
            out.hits.setdefault((level, rule, fam), (why, {}))[1].update(paths)
    return out


def _imply_level0(col: _Collector) -> None:
    for level in [lv for lv in sorted(col.kinds) if lv > 0]:
        for fam in col.kinds[level]:
            if fam not in col.kinds[0]:
                col.add(0, fam, {"all"}, "implied", f"Level 0 is the base of every level (implied by Level {level})", None)


def _explicit(
    matrix: Matrix,
    requested: Sequence[int],
    family_override: Sequence[str],
    col: _Collector,
    ignored: dict[str, list[str]],
    cosmetic: list[str],
    unmatched: tuple[str, ...],
    warnings: list[str],
) -> Selection:
    """An explicit request replaces the rules' levels but keeps the families the change touches."""
    families = list(family_override) or sorted({f for fams in col.kinds.values() for f in fams}) or [
        matrix.defaults.family
    ]
    levels = sorted(set(requested) | {0})
    out = _Collector()
    for fam in families:
        flags = set().union(*(col.kinds[lv].get(fam, set()) for lv in col.kinds)) - {"all"}
        flags |= _active_flags(matrix.families[fam])
        for level in levels:
            why = "requested explicitly" if level in requested else "Level 0 is the base of every level"
            out.add(level, fam, {"all", *flags}, "requested" if level in requested else "implied", why, None)
    return _finish(matrix, out, {}, ignored, cosmetic, unmatched, warnings, ",".join(map(str, requested)), None)


def _finish(
    matrix: Matrix,
    col: _Collector,
    undecided: dict[int, set[str]],
    ignored: dict[str, list[str]],
    cosmetic: list[str],
    unmatched: tuple[str, ...],
    warnings: list[str],
    requested: str,
    files: Sequence[ChangedFile] | None,
) -> Selection:
    order = {r.name: i for i, r in enumerate((*matrix.escalations, *matrix.rules))}
    reasons: dict[int, list[Reason]] = defaultdict(list)
    for (level, rule, fam), (why, paths) in sorted(col.hits.items(), key=lambda kv: (order.get(kv[0][1], len(order)), kv[0])):
        reasons[level].append(Reason(rule, why, fam, tuple(sorted(paths))))
    targets = {lv: {f: frozenset(k) for f, k in sorted(fams.items())} for lv, fams in sorted(col.kinds.items())}
    skipped = {}
    for level in LEVELS:
        if level in targets:
            continue
        skipped[level] = _skip_reason(matrix, level, undecided.get(level, set()), requested, files, ignored)
    return Selection(
        levels=tuple(sorted(targets)),
        targets=targets,
        reasons={lv: tuple(reasons[lv]) for lv in sorted(reasons)},
        skipped=skipped,
        ignored={g: tuple(sorted(p)) for g, p in sorted(ignored.items())},
        cosmetic=tuple(sorted(cosmetic)),
        unmatched=unmatched,
        warnings=tuple(sorted(set(warnings))),
        requested=requested,
    )


def _skip_reason(
    matrix: Matrix,
    level: int,
    undecided: set[str],
    requested: str,
    files: Sequence[ChangedFile] | None,
    ignored: dict[str, list[str]],
) -> str:
    if requested != "auto":
        return "not requested"
    if files is not None and not files:
        return "no changed files"
    if files is not None and sum(map(len, ignored.values())) == len(files):
        return "every changed path is ignored (" + ", ".join(sorted(ignored)) + ")"
    rules = [r.name for r in (*matrix.escalations, *matrix.rules) if level in r.levels]
    if level == 4:
        rules.append("architecture (MoE/VLM/MTP families)")
    listed = ", ".join(rules)
    text = f"no changed path matched its rules ({listed})" if rules else "no rule selects it"
    if matrix.levels[level].optional:
        text = f"optional: runs only on request or when a changed path matches its rules ({listed})"
    if undecided:
        text += "; " + ", ".join(sorted(undecided)) + " needs the diff to decide (plan with --repo)"
    return text
