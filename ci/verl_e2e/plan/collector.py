"""The levels a scan selected, per family and variant kind, with their reasons; and the reshaping
that follows the scan: --family retargeting, the implied Level 0, an explicit request, and the
finished `Selection` with every skipped level's reason."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from verl_e2e.config.matrix import LEVELS, Matrix
from verl_e2e.plan.skipped import skip_reason
from verl_e2e.plan.targets import active_flags


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
    unexecuted: tuple[str, ...] = ()  # changed lines under layout conditions no cell's layout takes

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({f for fams in self.targets.values() for f in fams}))


class Collector:
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


class Narrowed(Collector):
    """The same collection, for one changed file: levels none of whose cells would run its changed lines
    (every line under a layout condition their layouts cannot take: unrun.off_layout) are dropped
    whatever selected them, apart from what the layout branches themselves pick."""

    def __init__(
        self, col: Collector, off: set[int], unsaved: set[int] | None = None, same: set[int] | None = None
    ) -> None:
        self.kinds, self.hits, self.off = col.kinds, col.hits, off
        self.unsaved = unsaved or set()  # levels that never save, for a change only save paths run (unrun.save_only)
        # levels whose cells decide a rewritten layout test as before: they run it and see nothing new, so
        # only a record that they run the code (a save path only Level 1 runs) keeps them
        self.same = same or set()

    def add(self, level: int, family: str, kinds: Iterable[str], reason: tuple[str, str], path: str | None) -> None:
        if level in self.unsaved:
            return
        if level in self.same and reason[0] not in ("layout-branch", "executed"):
            return
        if level not in self.off or reason[0] == "layout-branch":
            super().add(level, family, kinds, reason, path)


def retarget(col: Collector, families: Sequence[str]) -> Collector:
    """--family: every selected level runs on the named families instead."""
    out = Collector()
    for (level, rule, _fam), (why, paths) in col.hits.items():
        kinds = set().union(*col.kinds[level].values())
        for fam in families:
            out.kinds[level][fam].update(kinds)
            out.hits.setdefault((level, rule, fam), (why, {}))[1].update(paths)
    return out


def imply_level0(col: Collector) -> None:
    for level in [lv for lv in sorted(col.kinds) if lv > 0]:
        for fam in col.kinds[level]:
            if fam not in col.kinds[0]:
                why = f"Level 0 is the base of every level (implied by Level {level})"
                col.add(0, fam, {"all"}, ("implied", why), None)


def request(col: Collector, matrix: Matrix, requested: Sequence[int], family_override: Sequence[str]) -> Collector:
    """An explicit request replaces the rules' levels but keeps the families the change touches."""
    found = sorted({f for fams in col.kinds.values() for f in fams})
    families = list(family_override) or found or [matrix.defaults.family]
    out = Collector()
    for fam in families:
        flags = set().union(*(col.kinds[lv].get(fam, set()) for lv in col.kinds)) - {"all"}
        flags |= active_flags(matrix.families[fam])
        # a dense model's Level 4 is its layers trained full-parameter (the custom-layers variant)
        dense_l4 = set() if flags - {"quant", "custom"} else {"custom"}
        for level in sorted(set(requested) | {0}):
            reason = (
                ("requested", "requested explicitly")
                if level in requested
                else ("implied", "Level 0 is the base of every level")
            )
            out.add(level, fam, {"all", *flags, *(dense_l4 if level == 4 else ())}, reason, None)
    return out


@dataclass
class Findings:
    """What the scan found besides levels: set-aside paths, warnings and undecided rules."""

    changed: int
    ignored: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    cosmetic: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    off_surface: dict[str, str] = field(default_factory=dict)
    undecided: dict[int, set[str]] = field(default_factory=lambda: defaultdict(set))
    unexecuted: dict[str, None] = field(default_factory=dict)


def build(
    col: Collector,
    matrix: Matrix,
    *,
    found: Findings,
    unsupported: Mapping[int, Iterable[str]],
    warnings: Iterable[str],
    requested: str,
) -> Selection:
    """The finished selection: reasons in the matrix's rule order, every other level's skip reason."""
    order = {r.name: i for i, r in enumerate((*matrix.escalations, *matrix.rules))}
    reasons: dict[int, list[Reason]] = defaultdict(list)
    ranked = sorted(col.hits.items(), key=lambda kv: (order.get(kv[0][1], len(order)), kv[0]))
    for (level, rule, fam), (why, paths) in ranked:
        reasons[level].append(Reason(rule, why, fam, tuple(sorted(paths))))
    targets = {lv: {f: frozenset(k) for f, k in sorted(fams.items())} for lv, fams in sorted(col.kinds.items())}
    return Selection(
        levels=tuple(sorted(set(targets) | set(unsupported))),
        targets=targets,
        reasons={lv: tuple(reasons[lv]) for lv in sorted(reasons)},
        skipped={
            lv: skip_reason(
                matrix, lv, requested, changed=found.changed, ignored=found.ignored, undecided=found.undecided
            )
            for lv in LEVELS
            if lv not in targets and lv not in unsupported
        },
        ignored={g: tuple(sorted(p)) for g, p in sorted(found.ignored.items())},
        cosmetic=tuple(sorted(found.cosmetic)),
        unmatched=tuple(sorted(found.unmatched)),
        off_surface=dict(sorted(found.off_surface.items())),
        unsupported={lv: tuple(sorted(w)) for lv, w in sorted(unsupported.items())},
        warnings=tuple(sorted({*warnings, *found.unexecuted})),  # the text and the job summary show warnings
        requested=requested,
        unexecuted=tuple(found.unexecuted),
    )
