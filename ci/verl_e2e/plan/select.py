"""Changed paths -> coverage levels, each with the rules and paths that chose it.

Pure: takes the loaded matrix and the changed files, returns a `Selection`. The steps, in order:
escalations see every path; then ignored paths (docs, tests, Bridge-only code) and cosmetic Python
changes are set aside; then every rule is tried on every remaining path (all rules that match contribute,
in the order reasons are printed). A rule's levels go to the family of the path (`family: changed`) or to
the default family. MoE/VLM/MTP families add Level 4; any level above 0 implies Level 0 for its family.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from verl_e2e.config.aspects import declared_none, find
from verl_e2e.config.matrix import Matrix, Rule
from verl_e2e.errors import UsageError, did_you_mean
from verl_e2e.plan import (
    architecture,
    around,
    bodies,
    branch_levels,
    collector,
    gated,
    importlines,
    layout,
    newcode,
    onerank,
    overrides,
    quiet,
    refresh,
    retests,
    unrun,
)
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.collector import Collector, Findings, Reason, Selection
from verl_e2e.plan.refuted import refute_callers, refuted
from verl_e2e.plan.runtime import Ran, cheapest, importing
from verl_e2e.plan.surface import MODELS, Surface, off_surface
from verl_e2e.plan.targets import SHARED_DIRS, Targets, active_flags, family_dir, new_model_code, relative

OFF_SURFACE = "off-surface"  # the ignore group of Bridge-only code (matrix.yaml ignore:)

PEFT = "src/megatron/bridge/peft/"
LORA = "lora"  # a target kind marker: the change is to LoRA code, so its custom-layers cell keeps LoRA
__all__ = ["Reason", "Selection", "family_dir", "select"]


def _diff_says(rule: Rule, file: ChangedFile, ran: Sequence[Ran], files: Sequence[ChangedFile]) -> tuple[bool, bool]:
    """(fires, undecided): undecided means the rule needed the diff and it was not known.

    `unless_only_in` and `unless_ran_at` need the exact functions (both ASTs, `plan --repo`): with a
    diff alone a hunk header names the def above the hunk, not the one the line is in, so the rule
    fires as before. `unless_ran_at`: HF export code every training step runs (the rollout's weight
    sync, recorded at Level 0) gains nothing from Level 1's save; save-only export code keeps it."""
    exact = file.functions if not file.module_level else None
    only_in = rule.unless_only_in
    if only_in is not None and exact and all(only_in.search(n) for n in exact):
        return False, False
    if rule.unless_ran_at is not None and unrun.ran_at(rule.unless_ran_at, file, ran):
        return False, False
    if rule.diff is None:
        return True, False
    if file.diff_lines is None:  # a lockfile's refresh of declared pins that moved none of the rule's packages
        fires = rule.when_no_diff == "match" and not refresh.follows_declarations(rule, file, files)
        return fires, rule.when_no_diff == "skip"
    return any(rule.diff.search(line) for line in file.diff_lines), False


class _Scan:
    """One pass of the matrix's escalations, ignore lists, rules and aspects over the changed files."""

    def __init__(self, matrix: Matrix, files: Sequence[ChangedFile], surface: Surface | None, ran: Sequence[Ran]):
        self.matrix, self.surface, self.ran, self.files = matrix, surface, ran, files
        self.col = Collector()
        self.fams = Targets(matrix)
        self.found = Findings(changed=len(files))
        self.cells = layout.cell_layouts(matrix)
        self.ran_around: set[str] = set()  # files whose changed lines no cell took, in code cells ran
        self.nones = declared_none(line for f in files for line in _added(f))  # options the change adds unset
        escalated = {f.path for f in files for rule in matrix.escalations if self._apply(rule, f)}
        whole = self.col
        for file in (refute_callers(matrix, f, ran) for f in files):
            off, unsaved = unrun.off_layout(matrix, file), unrun.save_only(matrix, file, ran)
            self.col = collector.Narrowed(whole, off, unsaved, unrun.off_layout(matrix, file, retested=True) - off)
            group = next((g for g, ps in matrix.ignore if all(ps.matches(p) for p in file.paths)), None)
            # what real cells ran comes first: ignore lists and static reach can both miss it
            unbuilt = None if file.cosmetic or file.log_only else bodies.unbuilt(file, group is not None, ran)
            unbuilt = unbuilt or gated.closed(matrix, file, ran) or gated.uncalled(matrix, file)
            kind = around.of_a_kind(matrix, file)  # lines only a kind of model runs: not every cell shares them
            unbuilt = unbuilt or _overridden(self.found, file) or (None if kind else unrun.untaken_branch(file, ran))
            unbuilt = unbuilt or refuted(matrix, file, ran) or _never_called(self, file)
            quiet_file = file.cosmetic or file.log_only or unbuilt is not None
            nowhere = None if quiet_file else unrun.nowhere(self.cells, file, ran, self.fams)
            ran_it = not quiet_file and nowhere is None and self._executed(file)
            if group is not None and not ran_it:
                _ignored(self.found, group, file)
            elif file.cosmetic:
                self.found.cosmetic.append(file.path)
            elif file.log_only and file.path not in escalated:
                self.found.off_surface[file.path] = quiet.SAID
            elif file.import_break is not None:  # every cell that imports it fails there: the cheapest says so
                where = importing(ran, file.path, matrix.defaults.family)
                self.col.add(*where, {"all"}, ("import-time", file.import_break), file.path)
            elif unbuilt := unbuilt or newcode.unimported(file, files) or newcode.unregistered_directory(file, files):
                _unreached(self.found, file, unbuilt)
            elif nowhere is not None:
                self.found.off_surface[file.path] = "every changed line runs only under a layout no PR cell has"
                self.found.unexecuted |= dict.fromkeys(nowhere)
            elif file.callers is not None and _branches(self, replace(file, branches=file.caller_branches), True):
                continue  # Bridge calls the change only under layout conditions: their cells run it
            else:
                if not ran_it and file.path not in self.ran_around and _off_surface(self, file):
                    continue  # (code a cell ran is on the surface, whichever of its lines changed)
                if file.new_definitions and not newcode.called(self.matrix, file, files):
                    _new_definitions(self, file, file.new_definitions)
                    continue
                fired = [rule for rule in matrix.rules if self._apply(rule, file)]  # every rule is tried
                worded = self._aspects(file)
                touched = worded | _branches(self, file) | _retests(self.matrix, self, file) | _users(self, file)
                if not touched and not fired and file.path not in escalated and not ran_it:
                    _unmatched(self.ran, self.found, self.fams, self.col, file)
        self.col = whole

    def _executed(self, file: ChangedFile) -> bool:
        """Code a recorded cell ran selects its level: its family for shared code, else the architecture's."""
        hits, untaken = unrun.recorded_hits(self.ran, file)
        if untaken is not None and file.typed_conditions:
            hits = unrun.ran_around(self.ran, file)  # a type another library version may hand over
        elif untaken is not None:
            self.found.unexecuted[untaken] = None
            self.ran_around.add(file.path)
        elif not hits and (uncalled := unrun.never_called(self.ran, file, self.fams)) is not None:
            self.found.unexecuted[uncalled] = None  # said only: the rules still choose the levels
        shared = family_dir(file.path) in (None, *SHARED_DIRS)
        for ran, qualname in cheapest(hits, self.matrix.defaults.family):
            known = shared and ran.family in self.matrix.families and self.fams.users(file) is None
            shown = "module-level code" if qualname == "<module>" else qualname
            why = f"a real {ran.cell} run executed the changed code (e.g. {shown})"
            for fam in [ran.family] if known else self.fams.targets(file.path, file, True):
                self.col.add(ran.level, fam, {"all"}, ("executed", why), file.path)
        return bool(hits)

    def _aspects(self, file: ChangedFile) -> bool:
        """Aspects of what the change touches; True when one selected something."""
        if not file.path.startswith("src/"):
            return False
        if file.diff_lines is None:  # paths only: what the change touches is unknown
            _undecided_aspects(self.matrix, file, self.found)
            return False
        added = () if file.status == "A" else file.diff_lines[len(file.diff_lines) - len(file.added_at) :]
        removed = file.diff_lines[: len(file.diff_lines) - len(file.added_at)]
        # the fields whose values the change edits name what it touches as its defs do (a multi-line table's
        # row: `"RMSNorm",` moved within `_MODULE_TYPE_REGISTRY`)
        scopes = (*file.scopes, *dict.fromkeys(d.name for d in file.defaults if d.name not in file.scopes))
        hits = find(
            self.matrix.aspects, file.path, file.diff_lines, scopes, added, removed=removed, declared=self.nones
        )
        hits += around.hits(self.matrix, file, {h.aspect.name for h in hits})
        hits, note = unrun.kept_hits(hits, file, self.ran)
        self.found.unexecuted |= dict.fromkeys(n for n in [note] if n is not None)
        for hit in hits:
            why = f"{hit.aspect.why} (`{hit.term}` in the {hit.where})"
            targets = self.fams.targets(file.path, file, changed=True)
            if not targets:
                self.fams.no_family(file.path, file, hit.aspect.levels)
            for fam in targets:
                kind, arch = hit.aspect.kind, hit.aspect.architecture
                target = self.fams.kind_family(fam, kind, moe=any(h.aspect.kind == "moe" for h in hits))
                if arch is not None and fam == self.matrix.defaults.family:  # shared code of one kind of layer
                    target = self.matrix.defaults.kind_families.get(arch, target)
                kinds = {kind, LORA} if kind == "custom" and file.path.startswith(PEFT) else {kind}
                for level in sorted(hit.aspect.levels):
                    if level == 5 and new_model_code(file):
                        continue  # a new model's settings: nothing that trained before computes differently
                    if target is None:
                        self.fams.unsupported[level].add(
                            f"{file.path}: {fam} has no {kind.upper()} model in matrix.yaml "
                            f"({hit.aspect.name}); add {kind}_model to families.{fam} to run it"
                        )
                        continue
                    self.col.add(level, target, kinds, (f"aspect:{hit.aspect.name}", why), file.path)
        return bool(hits)

    def _apply(self, rule: Rule, file: ChangedFile) -> bool:
        """Try one rule on one file; True when it selected something."""
        matched = [p for p in file.paths if rule.paths.matches(p)]
        if not matched:
            return False
        fires, needs_diff = _diff_says(rule, file, self.ran, self.files)
        if needs_diff:
            for level in rule.levels:
                self.found.undecided[level].add(rule.name)
        if not fires:
            return False
        selected = False
        for path in matched:
            targets = self.fams.targets(path, file, rule.family == "changed")
            if not targets:
                self.fams.no_family(path, file, rule.levels)
                selected = True
            for fam in targets:
                selected |= self._fire(rule, path, fam, file, changed=rule.family == "changed")
        return selected

    def _fire(self, rule: Rule, path: str, fam: str, file: ChangedFile, changed: bool) -> bool:
        flags: set[str] = set()
        if changed and family_dir(path) is not None:
            flags = active_flags(self.matrix.families[fam], (relative(path),))
        if rule.only is not None and rule.only not in flags:
            return False
        kinds = {rule.only} if rule.only else ({rule.kind} if rule.kind != "all" else {"all", *flags})
        for level in sorted(rule.levels):
            self.col.add(level, fam, kinds, (rule.name, rule.why), path)
        if changed and flags:
            architecture.variant(self.matrix, self.col, fam, flags, path, file=file)
        return True


def _branches(scan: _Scan, file: ChangedFile, calls: bool = False) -> bool:
    """Changed lines that run only under some parallel layouts select the first cell whose layout runs
    them (Level 0 runs their function, not them); lines no cell runs are named. `calls`: the branches
    are those of Bridge's calls of the changed code, not of its own lines."""
    if not file.branches or not file.path.startswith("src/"):
        return False
    picks, unexecuted = branch_levels.picks(scan.cells, file, scan.ran, scan.fams)
    for level, family, kind, said in picks:
        why = re.sub(r"^changed line(s?)", r"Bridge's call\1 of the changed code", said) if calls else said
        scan.col.add(level, family, {kind}, ("layout-branch", why), file.path)
    scan.found.unexecuted |= dict.fromkeys(unexecuted)
    return bool(picks)


def _off_surface(scan: _Scan, file: ChangedFile) -> bool:
    """Bridge code no path from verl reaches (surface.py): said, not run."""
    why = None if scan.surface is None else off_surface(scan.surface, file)
    if why is not None:
        _unreached(scan.found, file, why)
    return why is not None


def _new_definitions(scan: _Scan, file: ChangedFile, names: tuple[str, ...]) -> None:
    """New top-level definitions run at import only (additions.py): Level 0 on the module's family."""
    shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    why = (
        f"adds new top-level definitions ({shown}): importing the module runs them, nothing unchanged calls "
        "them, and a changed line that does is judged where it is"
    )
    for fam in scan.fams.targets(file.path, file, True):
        scan.col.add(0, fam, {"all"}, ("new-definitions", why), file.path)


def _ran_elsewhere(ran: Sequence[Ran], file: ChangedFile, family: str) -> bool:
    """Cells of other families than `family` ran every changed function (exact scopes), whatever its own did."""
    if not file.functions or file.module_level:
        return False
    by = {
        r.family
        for r in ran
        for p in file.paths
        if all(f in {q.replace(".<locals>", "") for q in r.functions.get(p, ())} for f in file.functions)
    }
    return bool(by - {family})


def _users(scan: _Scan, file: ChangedFile) -> bool:
    """Code only some architectures' model files use runs Level 0 on one of them."""
    fam = scan.fams.users(file)
    if fam is not None and _ran_elsewhere(scan.ran, file, fam):
        return False  # the model files name it, but recorded cells of other families ran it: shared in practice
    if fam is not None:
        named = ", ".join(list(dict.fromkeys(file.symbols))[:3])
        why = f"only some architectures' model files use the changed code ({named}): {fam} is one, the default not"
        scan.col.add(0, fam, {"all"}, ("shared-code-users", why), file.path)
        # code only a MoE/VLM/MTP family uses is that family's code: its Level 4 variant, as for its own files
        flags = {f for f in ("moe", "vlm", "mtp") if scan.matrix.families[fam].flags.get(f) is True}
        if flags:
            scan.col.add(
                4, fam, flags, ("shared-code-users", f"{why}; {fam} trains it in its Level 4 variant"), file.path
            )
    return fam is not None


def _retests(matrix: Matrix, scan: _Scan, file: ChangedFile) -> bool:
    """A rewritten test on the layout selects the first cell that decides it differently (retests.py), a
    rewritten layout value the first cell whose layout it depends on (onerank.py)."""
    if not file.diff_lines or not file.path.startswith("src/") or file.status == "A":
        return False
    cut = len(file.diff_lines) - len(file.added_at)
    picked = False
    for fam in scan.fams.targets(file.path, file, changed=True):
        moe = matrix.families[fam].has("moe")
        old, new = file.diff_lines[:cut], file.diff_lines[cut:]
        found = retests.first_cell(scan.cells, old, new, moe) or onerank.first_cell(scan.cells, old, new)
        if found is None:
            continue
        cell, was, now = found
        target = fam if cell.kind == "all" else scan.fams.kind_family(fam, cell.kind)
        if target is not None:
            what = "test" if re.match(r"(if|elif|while|return)\b", now) else "value"
            why = f"the rewritten {what} `{now}` (was `{was}`) differs first in the L{cell.level} {cell.variant} cell"
            scan.col.add(cell.level, target, {cell.kind}, ("layout-branch", why), file.path)
            picked = True
    return picked


def _overridden(found: Findings, file: ChangedFile) -> str | None:
    """A model file whose change only sets provider values verl replaces (overrides.py): said, not run."""
    names = overrides.overridden(file.path, file.diff_lines, file.scopes) if not file.cosmetic else ()
    if not names:
        return None
    found.unexecuted[overrides.unseen(file.path, names)] = None
    return overrides.unseen(file.path, names)


def _added(file: ChangedFile) -> tuple[str, ...]:
    """The lines the change adds to the file (every line of a new one)."""
    lines = file.diff_lines or ()
    return lines if file.status == "A" else lines[len(lines) - len(file.added_at) :]


def _unmatched(ran: Sequence[Ran], found: Findings, fams: Targets, col: Collector, file: ChangedFile) -> None:
    """On verl's surface, matched by nothing: Level 0, unless recorded cells imported it and ran none of it."""
    if (why := unrun.imported_not_run(ran, file)) is not None:
        _unreached(found, file, why)
        return
    found.unmatched.append(file.path)
    _unmatched_runs_level0(fams, col, file)


def _unmatched_runs_level0(fams: Targets, col: Collector, file: ChangedFile) -> None:
    """On verl's surface but matched by nothing: Level 0 on its architecture's family, never nothing."""
    if file.path.startswith("src/megatron/bridge/"):
        why = "on verl's surface, but no rule, aspect or recorded run selected it: Level 0 by default"
        for fam in fams.targets(file.path, file, True):
            col.add(0, fam, {"all"}, ("unmatched-surface", why), file.path)


def _undecided_aspects(matrix: Matrix, file: ChangedFile, found: Findings) -> None:
    """Paths only: every aspect that could apply to the file is a level only the diff could decide."""
    for aspect in matrix.aspects:
        if aspect.paths is None or aspect.paths.matches(file.path):
            for level in aspect.levels:
                found.undecided[level].add(f"aspect {aspect.name}")


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
    scan = _Scan(matrix, importlines.settle(files, ran, surface), surface, ran)
    col, label = scan.col, "auto"
    if requested is not None:
        col, label = collector.request(col, matrix, requested, family_override), ",".join(map(str, requested))
        scan.found.undecided.clear()
    else:
        if family_override:
            col = collector.retarget(col, family_override)
        collector.imply_level0(col)
    return collector.build(
        col, matrix, found=scan.found, unsupported=scan.fams.unsupported, warnings=scan.fams.warnings, requested=label
    )


def _never_called(scan: _Scan, file: ChangedFile) -> str | None:
    """Shared code no recorded cell called, where every family it runs on was recorded: no cell runs it.
    A family's own code (models/) is only said so: the rules decide, as families without records may."""
    if file.path.startswith(MODELS) or any(unrun.recorded_hits(scan.ran, file)):  # ran, or ran around it
        return None
    return unrun.never_called(scan.ran, file, scan.fams, reason=True)


def _unreached(found: Findings, file: ChangedFile, why: str) -> None:
    """A change no cell reaches: the plan's off-surface entry, and its lines in the comment's "no cell executes"."""
    found.off_surface[file.path] = why
    if not any(file.path in line for line in found.unexecuted):  # said once (an override's note says it)
        found.unexecuted |= dict.fromkeys(n for n in [unrun.uncalled(file, why)] if n is not None)


def _ignored(found: Findings, group: str, file: ChangedFile) -> None:
    """A file of an ignore group; Bridge-only code (not a cosmetic or log-only change) names its lines."""
    found.ignored[group].append(file.path)
    if group == OFF_SURFACE and not file.cosmetic and not file.log_only:
        why = "Bridge-only code verl's Megatron PPO loop never imports or reads"
        found.unexecuted |= dict.fromkeys(n for n in [unrun.uncalled(file, why)] if n is not None)
