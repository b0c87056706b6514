"""What the records and the layouts say no cell runs: the changed code recorded cells ran (or ran around
without taking its lines), what a rule or aspect need not add where a cheaper level already runs the
code, and the changes whose lines no PR cell's layout or call reaches, which the plan names instead."""

from __future__ import annotations

from collections.abc import Sequence

from verl_e2e.config.aspects import Hit, code_lines
from verl_e2e.config.matrix import Level, Matrix
from verl_e2e.plan import bodies, branch_levels, layout, onerank, retests
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.layout import CellLayout
from verl_e2e.plan.runtime import Ran, every_line_ran, executed
from verl_e2e.plan.runtime import spans as runtime_spans
from verl_e2e.plan.targets import SHARED_DIRS, Targets, family_dir


def recorded_hits(ran: Sequence[Ran], file: ChangedFile) -> tuple[list[tuple[Ran, str]], str | None]:
    """The recorded cells that ran the changed code (their lines where a record has the same base file),
    and, where cells ran the code around the change but none took its lines, the sentence that says so.
    None for a file the change adds: no record of the base ran it (one of a later Bridge that reused the
    path ran other code)."""
    if file.status == "A":
        return [], None
    module_level = file.module_level or file.diff_lines is None
    lines = file.base_lines
    only, unnamed = file.methods_only, file.unnamed_methods
    hits = [
        h
        for p in file.paths
        for h in executed(
            ran,
            p,
            file.scopes,
            module_level,
            file.functions,
            blob=file.old_blob,
            base_lines=lines,
            methods_only=only,
            unnamed_methods=unnamed,
        )
    ]
    hits = [h for h in hits if not bodies.unbuilt_config_body(h[1], file, ran)]
    base = file.old_path or file.path
    if not file.base_lines or any(r.ran_lines(base, file.old_blob) is not None for r, _ in hits):
        return hits, None  # no lines to compare, or a cell that recorded its lines took the change's
    around = executed(ran, base, file.scopes, module_level, file.functions, methods_only=only, unnamed_methods=unnamed)
    if not any(r.ran_lines(base, file.old_blob) is not None for r, _ in around):
        return hits, None  # no cell that recorded this file's lines ran the code around the change
    # cells that recorded their lines ran the code around the change and none took it; records without
    # lines (older runs) may still select their level, which says no more than that their cell ran it
    where = runtime_spans(frozenset(file.base_lines))
    return hits, (
        f"changed lines no recorded cell ran: {base}:{where} (base lines; the cells that ran the code around "
        "them did not take them)"
    )


def never_called(ran: Sequence[Ran], file: ChangedFile, fams: Targets, reason: bool = False) -> str | None:
    """The sentence for changed lines inside functions that no recorded cell called, in a file whose very
    version cells recorded the lines of (they imported it and ran other code in it): a Pass of the plan's
    Level 0 would say nothing about them. Only where every family the change runs on has recorded cells,
    cannot run in verl, or is none (architectures no family runs): a family no record covers may call
    them. Not for lines under a layout condition, or called only under one: the layout rules and the
    unrecorded levels decide those (a kind or state condition inside a function no cell called changes
    nothing). `reason`: the why alone, where shared code is judged not run (select)."""
    if not file.functions or file.module_level or not file.base_lines or file.diff_lines is None:
        return None
    if file.branches or file.caller_branches or not file.path.startswith("src/"):
        return None
    base = file.old_path or file.path
    seen = [lines for r in ran if (lines := r.ran_lines(base, file.old_blob)) is not None]
    if not seen or any(lines & set(file.base_lines) for lines in seen):
        return None
    recorded = {r.family for r in ran}
    families = fams.targets(file.path, file, changed=True)
    if any(f not in recorded and fams.matrix.families[f].blocked("all") is None for f in families):
        return None
    why = f"none of the {len(seen)} recorded cells that ran this file called the code around them"
    where = f"{base}:{runtime_spans(frozenset(file.base_lines))}"
    return why if reason else f"changed lines no recorded cell ran: {where} (base lines; {why})"


def ran_around(ran: Sequence[Ran], file: ChangedFile) -> list[tuple[Ran, str]]:
    """The recorded cells that ran the functions around a change they did not take, for lines under a
    test on the type of what a caller hands over (an integer replica id from another checkpointing
    version): the records, all of one library version, cannot say no cell takes them, and the cells that
    run their function are where they would run (a save path only Level 1 ran). Not for a kind or state
    condition: every cell may share its state (verl initialises Megatron's parallel state first)."""
    base = file.old_path or file.path
    only, unnamed = file.methods_only, file.unnamed_methods
    return executed(ran, base, file.scopes, False, file.functions, methods_only=only, unnamed_methods=unnamed)


def never_ran(file: ChangedFile, ran: Sequence[Ran]) -> list[str]:
    """The changed functions (exact scopes) of shared code when each is an inner function whose enclosing
    function recorded cells ran and none of them ran it (a patch a disabled option never installs), else
    []. Level 5 runs the layout Level 0 and Level 1 ran (TP=1, one GPU), so it would not run them either.
    A function no record knows at all (new, renamed, or of a file version no cell ran) is never judged."""
    if not file.functions or file.module_level or file.serves or family_dir(file.path) not in (None, *SHARED_DIRS):
        return []  # code some families' bridges use (users.py), or a family's own: not all are recorded
    done = {q.replace(".<locals>", "") for r in ran for p in file.paths for q in r.functions.get(p, ())}
    if not done or any(n in done or not _around_ran(n, done) for n in file.functions):
        return []
    return list(file.functions)


def _around_ran(name: str, done: set[str]) -> bool:
    """An enclosing *function* of `name` ran (not a class body, which importing the module runs)."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in done and parts[i - 1].lstrip("_")[:1].islower() for i in range(1, len(parts)))


def ran_at(level: int, file: ChangedFile, ran: Sequence[Ran]) -> bool:
    """Whether a recorded cell of `level` ran every function the change sits in (exact scopes only), or
    the function around an inner one (an EP-only helper nested in the export: the level runs the export,
    and a level of the same layout would not take the helper either). With a diff alone, one such cell that
    recorded its lines in the same base file ran every changed line."""
    if file.functions is None and not file.module_level:
        return every_line_ran(ran, level, file.old_path or file.path, file.old_blob, file.base_lines or ())
    if not file.functions or file.module_level:
        return False
    done = {
        q.replace(".<locals>", "") for r in ran if r.level == level for p in file.paths for q in r.functions.get(p, ())
    }
    return (
        all(n in done or _around_ran(n, done) for n in file.functions)
        or _hooks_ran_at(level, file, ran)
        or _mapping_hooks_ran_at(level, file, done)
    )


MAPPING_HOOKS = ("hf_to_megatron", "megatron_to_hf")  # what the conversion loop calls on every mapping


def _mapping_hooks_ran_at(level: int, file: ChangedFile, done: set[str]) -> bool:
    """A mapping class's conversion hook (`MambaInProjMapping.megatron_to_hf`), or a helper of its
    (`MambaConv1dMapping.get_shard_idx`), where the cells of `level` ran that hook (any hook, for a
    helper) of at least MIN_LINE_RECORDS other classes of the same file: the conversion loop calls it on
    whichever mappings a family's bridge registers, so the family that registers this one (no cell
    recorded it) runs it at the same point, at every build or weight sync."""
    if not file.functions or level != 0:
        return False
    for name in file.functions:
        cls, _, method = name.rpartition(".")
        if "." in cls or not cls.endswith("Mapping"):
            return False
        hooks = MAPPING_HOOKS if method not in MAPPING_HOOKS else (method,)  # a helper runs where its hooks do
        ran = {q for q in done if q.count(".") == 1 and q.endswith(tuple(f"Mapping.{h}" for h in hooks))}
        if len({q.split(".")[0] for q in ran} - {cls}) < MIN_LINE_RECORDS:
            return False
    return True


def _hooks_ran_at(level: int, file: ChangedFile, ran: Sequence[Ran]) -> bool:
    """A family's bridge hooks (`XBridge.mapping_registry`) whose namesakes in at least MIN_LINE_RECORDS
    other families' bridges ran in cells of `level`: the conversion code calls every family's hook the
    same way, so a family no cell recorded runs its own there too (its mappings at each weight sync)."""
    if family_dir(file.path) in (None, *SHARED_DIRS) or not file.functions:
        return False
    if any(n.count(".") != 1 or not n.split(".", 1)[0].endswith("Bridge") for n in file.functions):
        return False
    for method in {n.split(".", 1)[1] for n in file.functions}:
        files = {
            p
            for r in ran
            if r.level == level
            for p, names in r.functions.items()
            if p not in file.paths and any(q.endswith(f"Bridge.{method}") for q in names)
        }
        if len(files) < MIN_LINE_RECORDS:
            return False
    return True


def nowhere(cells: Sequence[CellLayout], file: ChangedFile, ran: Sequence[Ran], fams: Targets) -> list[str] | None:
    """The "no cell executes" lines of a change whose every changed code line sits under a layout
    condition no PR cell's layout takes (a virtual-pipeline branch: every PR cell sets VPP off); None
    otherwise. No level runs it: its words select nothing (`vp_stage` is no Level 2 when Level 2 has no
    VPP), and Level 0 would run the function around it, never the lines, so the plan names them."""
    if not file.branches or not file.path.startswith("src/") or file.diff_lines is None:
        return None
    removed = file.diff_lines[: len(file.diff_lines) - len(file.added_at)]
    added = file.diff_lines[len(removed) :]
    sides = len(code_lines(removed)) + len(code_lines(added))
    if len({(b.line, b.removed) for b in file.branches}) < sides:
        return None
    picks, unexecuted = branch_levels.picks(cells, file, ran, fams)
    return None if picks or not unexecuted else list(unexecuted)


def off_layout(matrix: Matrix, file: ChangedFile, retested: bool = False) -> set[int]:
    """The levels above 0 none of whose PR cells takes a single changed line, where every changed code
    line sits under layout conditions (a TP > 1 branch: Levels 1, 3 and 5 run at TP=1 and would not
    take it, whatever their path rules or words say). Empty where any line is unconditional.
    `retested`: a rewritten layout test counts as such a line, and its cells are those that decide it
    otherwise than before (retests.py): the others run it and see no difference; so do the one-stage
    cells of a change only to a pipeline-input method (`pipeline_input_only`)."""
    if not retested:
        return _off_layout(matrix, file, retested)
    return _off_layout(matrix, file, retested) | pipeline_input_only(matrix, file) | onerank.same_levels(matrix, file)


def _off_layout(matrix: Matrix, file: ChangedFile, retested: bool) -> set[int]:
    if not file.path.startswith("src/") or file.diff_lines is None:
        return set()
    removed = file.diff_lines[: len(file.diff_lines) - len(file.added_at)]
    added = file.diff_lines[len(removed) :]
    pr_cells = [c for c in layout.cell_layouts(matrix, every_kind=True) if not c.scheduled]
    tests, deciding = retests.deciding_levels(pr_cells, removed, added) if retested else (0, set())
    if not file.branches and not tests:
        return set()
    if len({(b.line, b.removed) for b in file.branches}) + tests < len(code_lines(removed)) + len(code_lines(added)):
        return set()
    taken = {  # on a dense model or a MoE one: a level that would take the lines on either keeps them
        c.level for b in file.branches for moe in (False, True) for c in layout.running(pr_cells, b.tests(), moe)
    }
    return {lv for lv in {c.level for c in pr_cells} if lv > 0} - taken - deciding


# methods Megatron's pipeline schedule calls with the previous stage's output (schedules.py forward_step):
# at PP = 1 the only stage embeds its own input and never reads what it was handed
PIPELINE_INPUT = frozenset({"set_input_tensor"})


def pipeline_input_only(matrix: Matrix, file: ChangedFile) -> set[int]:
    """The levels above 0 whose PR cells all run one pipeline stage, where every changed function is a
    pipeline-input method: those cells call it and see nothing of what it now does, so only a record
    that they run the code keeps them (collector.Narrowed's `same`). Empty for anything else."""
    known = file.functions if file.functions is not None else file.scopes  # `plan --diff`: the hunks' scopes
    names = {n.replace(".<locals>", "").rsplit(".", 1)[-1] for n in known}
    if not names or not names <= PIPELINE_INPUT or file.module_level or not file.path.startswith("src/"):
        return set()
    pr_cells = [c for c in layout.cell_layouts(matrix, every_kind=True) if not c.scheduled]
    staged = {c.level for c in pr_cells if c.layout.pp > 1}
    return {c.level for c in pr_cells if c.level > 0} - staged


def save_only(matrix: Matrix, file: ChangedFile, ran: Sequence[Ran]) -> set[int]:
    """The levels none of whose cells saves or resumes, where every changed function ran only in
    recorded save/resume cells (Level 1's) and in none of the many other recorded cells: code of the
    save path (an adapter's sharded state dict) runs in no cell that never saves, whatever layout or
    model kind its words or branches name. Empty where any changed function ran elsewhere, or is new."""
    names = {n.replace(".<locals>", "") for n in file.functions or ()}
    if not names or file.module_level or not file.path.startswith("src/"):
        return set()
    saving = {lv for lv, level in matrix.levels.items() if _saves(matrix, level)}
    seen: dict[str, set[bool]] = {n: set() for n in names}
    for r in ran:
        done = {q.replace(".<locals>", "") for p in file.paths for q in r.functions.get(p, ())}
        for n in names & done:
            seen[n].add(r.level in saving)
    hooks = _save_hooks(ran, saving)
    for n in names:  # a method no record ran, of a protocol only checkpointing calls
        if not seen[n] and "." in n and n.rsplit(".", 1)[-1] in hooks:
            seen[n].add(True)
    if not all(found == {True} for found in seen.values()):
        return set()
    return {lv for lv in matrix.levels if lv > 0 and lv not in saving}


MIN_SAVE_HOOKS = 3  # classes whose same-named method ran only in saving cells before the name says "save path"


def _save_hooks(ran: Sequence[Ran], saving: set[int]) -> set[str]:
    """Method names that recorded cells ran in at least three classes, every time in a saving cell and
    never elsewhere: a protocol only checkpointing calls (Megatron's `sharded_state_dict` walk), so
    another class's method of that name, new or never recorded, runs on the save path too."""
    where: dict[str, set[str]] = {}
    elsewhere: set[str] = set()
    for r in ran:
        for path, functions in r.functions.items():
            for q in functions:
                owner, _, name = q.replace(".<locals>", "").rpartition(".")
                if not owner:
                    continue
                if r.level in saving:
                    where.setdefault(name, set()).add(f"{path}:{owner}")
                else:
                    elsewhere.add(name)
    return {n for n, owners in where.items() if n not in elsewhere and len(owners) >= MIN_SAVE_HOOKS}


def _saves(matrix: Matrix, level: Level) -> bool:
    """Whether some phase of some variant of the level saves (SAVE_FREQ above 0) or resumes."""
    base = dict(matrix.base_env) | dict(level.env)
    for variant in level.variants:
        for phase in variant.phases:
            env = base | dict(variant.env) | dict(phase.env)
            if env.get("SAVE_FREQ", "-1") not in ("-1", "0", "") or env.get("RESUME_MODE", "disable") != "disable":
                return True
    return False


def build_values_only(file: ChangedFile) -> bool:
    """Every changed line sits in a bridge's `provider_bridge`: values copied from the HF config onto the
    provider (a RoPE base, a window size), which every build of that family runs. Level 0 on the family
    trains with them; the custom-layer variant (full-parameter at TP=2) adds nothing for a value."""
    names = file.functions or ()
    return bool(names) and not file.module_level and all(n.endswith(".provider_bridge") for n in names)


def _ran_code_changed(file: ChangedFile, ran: Sequence[Ran]) -> bool:
    """A recorded cell ran the code the change sits in. With a diff alone a hunk header names the def
    above a hunk, so a hunk that only adds lines (a new method or mapping below it) counts only where
    the change also rewrites or removes a line of existing code."""
    lines = file.diff_lines or ()
    if file.functions is None and not code_lines(lines[: len(lines) - len(file.added_at)]):
        return False
    return bool(recorded_hits(ran, file)[0])


def kept_hits(hits: list[Hit], file: ChangedFile, ran: Sequence[Ran]) -> tuple[list[Hit], str | None]:
    """The aspect hits that select a level: not one whose `unless_ran_at` level already ran the changed
    functions, nor a `when_ran` one for code no recorded cell ran, nor a Level 5 one for an inner function
    its installer never installed (with the note)."""
    hits = [h for h in hits if h.aspect.unless_ran_at is None or not ran_at(h.aspect.unless_ran_at, file, ran)]
    if any(h.aspect.when_ran for h in hits) and not _ran_code_changed(file, ran):
        hits = [h for h in hits if not h.aspect.when_ran]  # code no recorded cell ran: new, or never reached
    if build_values_only(file):  # config values a family builds with: its Level 0 and 4, no weight swap
        hits = [h for h in hits if h.aspect.kind != "custom" and h.aspect.lines != "permuted"]
    if any(h.aspect.levels == {1} and _class_named(h, file) for h in hits) and ran_at(0, file, ran):
        hits = [h for h in hits if not (h.aspect.levels == {1} and _class_named(h, file))]
    never = never_ran(file, ran)
    if not never or not any(h.aspect.levels == {5} for h in hits):
        return hits, None
    where = runtime_spans(frozenset(file.added_at)) if file.added_at else "?"
    note = (
        f"changed lines no recorded cell ran: {file.path}:{where} (inside {', '.join(never)}, which the "
        "recorded cells of this file never ran: no learning signal to measure)"
    )
    return [h for h in hits if h.aspect.levels != {5}], note


def _class_named(hit: Hit, file: ChangedFile) -> bool:
    """A hit on the name of a class around the changed methods, not on a changed line or a function's own
    name: `SafeTensorsStateSource` says what files the class reads, while its `load_tensors` that Level 0
    ran reads the HF weights at every build; `set_params_to_save` names what its own code decides."""
    functions = file.functions or ()
    owners = {part for n in functions for part in n.split(".")[:-1]}
    return bool(hit.scope) and hit.scope in owners


def imported_not_run(ran: Sequence[Ran], file: ChangedFile) -> str | None:
    """Why shared code that recorded cells imported, none of whose changed functions any of them ran, gets
    no Level 0 by default: the recorded levels (0, 1, 3, 4) ran what they run of this module, and a Level 0
    would run the change no more than they did. Not model code (families without records may call it),
    not module-level code (every import runs it), and only where the changed functions are named."""
    if file.path.startswith("src/megatron/bridge/models/") or not file.path.startswith("src/megatron/bridge/"):
        return None
    if file.module_level or file.diff_lines is None or not (file.functions or file.scopes):
        return None
    if not any(p in r.functions for r in ran for p in file.paths):
        return None
    named = ", ".join(list(file.functions or file.scopes)[:3])
    return f"the recorded cells import this module but none ran the changed code ({named})"


def uncalled(file: ChangedFile, why: str) -> str | None:
    """The "no cell executes" line for a src/ code change that selects nothing because no cell reaches
    it: a module verl never imports, functions nothing verl calls reaches, a class no recorded cell
    builds. The plan's off-surface entry says the same; this line is what the comment shows, so a PR
    author reads which of their lines no cell will test. Lines are the new side's, or the removed ones
    (base side) for a pure deletion."""
    if not file.path.startswith("src/") or file.diff_lines is None:
        return None
    if file.added_at:
        where = f"{file.path}:{runtime_spans(frozenset(file.added_at))}"
    elif file.base_lines:
        where = f"{file.old_path or file.path}:{runtime_spans(frozenset(file.base_lines))} (removed)"
    else:
        return None
    return f"changed lines no cell executes: {where} ({why})"


MIN_LINE_RECORDS = 3  # cells with line records that ran the code around a change before their word counts


def untaken_branch(file: ChangedFile, ran: Sequence[Ran]) -> str | None:
    """Why no cell runs a change to shared code whose lines at least three recorded cells with line
    records ran around and never took, under no layout condition and none on the model's kind or the
    run's state (`--repo`): a branch a setting every cell shares leaves out (`if dropout > 0.0:` where
    verl trains LoRA without dropout). Level 0 would run the function, not the lines. Family code is
    never judged so: not every family is recorded."""
    if not file.functions or file.module_level or file.branches or file.unrecorded_conditions or not file.base_lines:
        return None
    if family_dir(file.path) not in (None, *SHARED_DIRS):
        return None
    base = file.old_path or file.path
    only, unnamed = file.methods_only, file.unnamed_methods
    around = executed(ran, base, file.scopes, False, file.functions, methods_only=only, unnamed_methods=unnamed)
    lines = [ls for ls in (r.ran_lines(base, file.old_blob) for r, _ in around) if ls is not None]
    if len(lines) < MIN_LINE_RECORDS or any(ls & set(file.base_lines) for ls in lines):
        return None
    return (
        f"{len(lines)} recorded cells ran the code around them and none took them; they sit under no "
        "parallel-layout, model-kind or run-state condition, so a setting every cell shares leaves them out"
    )
