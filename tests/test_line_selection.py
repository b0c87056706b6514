"""Selection by the lines real cells ran, not only their functions.

A change inside a function Level 0 calls is not proven by Level 0 when Level 0 never took the changed
line; a line only the save/resume run took selects Level 1 though Level 0 ran its function. Line
numbers are compared only when the change's base file is the very file the record was made of (git
blob ids), and a change no line anchors (an insertion after a block header) keeps the function rule.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from verl_e2e.plan import runtime
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_diff
from verl_e2e.plan.select import select

PATH = "src/megatron/bridge/peft/lora.py"
BLOB = "0123456789abcdef0123456789abcdef01234567"
SOURCE = """def transform(self, module, name=None, prefix=None):
    if name in self.target_modules:
        wrapped = self.wrap(module)
        return wrapped
    if self.exclude:
        raise ValueError("excluded")
    return module
"""


def _record(level: int, variant: str, lines: set[int], blob: str = BLOB) -> runtime.Ran:
    return runtime.Ran(
        level, variant, "qwen", "b" * 40, "v" * 40,
        functions={PATH: frozenset({"LoRA.transform"})},
        lines={PATH: frozenset(lines)},
        blobs={PATH: blob},
    )  # fmt: skip


def _diff(hunk: str, index: str = BLOB[:12]) -> str:
    return f"diff --git a/{PATH} b/{PATH}\nindex {index}..fedcba987654 100644\n--- a/{PATH}\n+++ b/{PATH}\n{hunk}"


def _changed(diff: str) -> ChangedFile:
    files = with_diff([ChangedFile(PATH)], parse_unified_diff(diff))
    return replace(files[0], functions=("LoRA.transform",), module_level=False, scopes=("LoRA", "transform"))


EDIT_LINE_6 = _diff(
    "@@ -5,3 +5,3 @@ def transform(self, module, name=None, prefix=None):\n"
    "     if self.exclude:\n"
    '-        raise ValueError("excluded")\n'
    '+        raise ValueError(f"{name} excluded")\n'
    "     return module\n"
)
EDIT_LINE_3 = _diff(
    "@@ -2,3 +2,3 @@ def transform(self, module, name=None, prefix=None):\n"
    "     if name in self.target_modules:\n"
    "-        wrapped = self.wrap(module)\n"
    "+        wrapped = self.wrap(module, name)\n"
    "         return wrapped\n"
)


def test_a_modified_line_stands_for_itself_and_an_insertion_for_its_block() -> None:
    assert _changed(EDIT_LINE_6).base_lines == (6,)
    inserted = _diff(
        "@@ -3,2 +3,3 @@ def transform(self, module, name=None, prefix=None):\n"
        "         wrapped = self.wrap(module)\n"
        "+        wrapped.name = name\n"
        "         return wrapped\n"
    )
    assert _changed(inserted).base_lines == (4,)  # the next line of the same block
    at_block_end = _diff(
        "@@ -5,2 +5,3 @@ def transform(self, module, name=None, prefix=None):\n"
        "     if self.exclude:\n"
        "+        log(name)\n"
        '         raise ValueError("excluded")\n'
    )
    assert _changed(at_block_end).base_lines == (6,)
    after_header_no_context = _diff(
        "@@ -5,0 +6 @@ def transform(self, module, name=None, prefix=None):\n+        log(name)\n"
    )
    assert _changed(after_header_no_context).base_lines is None  # no safe neighbour: functions decide


def test_a_branch_level0_never_took_is_not_proven_by_level0(matrix) -> None:
    ran = [_record(0, "lora-ddp", {1, 2, 3, 4, 5, 7})]  # the exclusion branch (line 6) never ran
    edit = _changed(EDIT_LINE_6)
    selection = select(matrix, [edit], ran=ran)
    assert not any(r.rule == "executed" for rs in selection.reasons.values() for r in rs)
    assert any(u.startswith(f"changed lines no recorded cell ran: {PATH}:6 ") for u in selection.unexecuted)
    taken = select(matrix, [_changed(EDIT_LINE_3)], ran=ran)
    assert any(r.rule == "executed" for r in taken.reasons[0])


def test_a_line_only_the_save_resume_run_took_selects_level1(matrix) -> None:
    ran = [_record(0, "lora-ddp", {1, 2, 5, 7}), _record(1, "save-resume", {1, 2, 3, 4, 5, 7})]
    selection = select(matrix, [_changed(EDIT_LINE_3)], ran=ran)
    assert any(r.rule == "executed" and "L1-save-resume-qwen" in r.why for r in selection.reasons[1])


def test_an_older_record_without_lines_still_selects_but_the_plan_says_no_lined_cell_took_them(matrix) -> None:
    """A record made before the driver kept lines can only say its cell ran the function: its level stays
    (nothing is skipped on a guess), and the plan still names the lines the cells that kept lines skipped."""
    lined = _record(0, "lora-ddp", {1, 2, 3, 4, 5, 7})
    older = replace(_record(0, "lora-ddp", set()), family="qwen3_moe", lines={}, blobs={})
    selection = select(matrix, [_changed(EDIT_LINE_6)], ran=[lined, older])
    assert any(r.rule == "executed" and "qwen3_moe" in r.why for r in selection.reasons[0])
    assert any(u.startswith(f"changed lines no recorded cell ran: {PATH}:6 ") for u in selection.unexecuted)
    taken = select(matrix, [_changed(EDIT_LINE_3)], ran=[lined, older])
    assert not taken.unexecuted


def test_records_of_another_version_of_the_file_fall_back_to_functions(matrix) -> None:
    ran = [_record(0, "lora-ddp", {1, 2, 3, 4, 5, 7}, blob="f" * 40)]
    selection = select(matrix, [_changed(EDIT_LINE_6)], ran=ran)
    assert any(r.rule == "executed" for r in selection.reasons[0])
    assert not selection.unexecuted


def test_run_dir_lines_and_blob_ids_round_trip_through_the_shipped_index(tmp_path: Path) -> None:
    tree = tmp_path / "bridge"
    (tree / "src/megatron/bridge/peft").mkdir(parents=True)
    (tree / PATH).write_text(SOURCE)
    run = tmp_path / "run"
    run.mkdir()
    (run / "cell.json").write_text(json.dumps({"level": 0, "variant": "lora-ddp", "family": "qwen"}))
    (run / "provenance.json").write_text(json.dumps({"bridge": {"full_commit": "b" * 40}}))
    record = {
        "functions": [{"file": PATH, "qualname": "LoRA.transform", "line": 1, "phases": ["run"]}],
        "lines": {"run": {PATH: [[1, 3], [5, 5]]}, "resume": {PATH: [[7, 7]]}},
    }
    (run / "bridge-functions.json").write_text(json.dumps(record))
    assert runtime.from_run_dir(run).lines == {}  # type: ignore[union-attr]  # no blob id: no line comparison
    ran = runtime.from_run_dir(run, tree)
    assert ran is not None and ran.lines[PATH] == {1, 2, 3, 5, 7}
    assert ran.blobs[PATH] == runtime.blob_id(SOURCE.encode())
    assert runtime.from_json(runtime.to_json([ran])) == [ran]
    assert runtime.to_json([ran])["cells"][0]["lines"] == {PATH: "1-3,5,7"}


def test_the_driver_writes_blob_ids_git_would_print(tmp_path: Path) -> None:
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "containers"))
    import functions  # the driver's merge (standard library only, runs in the image)

    tree = tmp_path / "bridge"
    (tree / "src/megatron/bridge/peft").mkdir(parents=True)
    (tree / PATH).write_text(SOURCE)
    phase = tmp_path / "trace" / "run"
    phase.mkdir(parents=True)
    (phase / "lines-1.txt").write_text(f"F\t0\t{PATH}\n0\t2\n")
    out = tmp_path / "bridge-functions.json"
    functions.merge(tmp_path / "trace", out, tree)
    data = json.loads(out.read_text())
    git = subprocess.run(["git", "hash-object", str(tree / PATH)], capture_output=True, text=True, check=True)
    assert data["blobs"] == {PATH: git.stdout.strip()}


def test_a_branch_no_cell_took_still_runs_level0_where_static_reach_misses_the_function(matrix) -> None:
    """LoRA.transform is called through a module walk, which the static index does not see (it calls the
    function unreached); a cell ran it. A change in a branch no cell took must not fall to 'not on verl's
    surface': the plan names the lines and still runs Level 0."""
    from verl_e2e.plan.surface import Surface

    index = Surface("v" * 40, "b" * 40, (), frozenset({PATH}), symbols={PATH: frozenset({"LoRA", "transform"})})
    assert index.unreached(PATH, ("LoRA", "transform"))  # what static reach said before it read string imports
    ran = [_record(0, "lora-ddp", {1, 2, 3, 4, 5, 7})]
    selection = select(matrix, [_changed(EDIT_LINE_6)], surface=index, ran=ran)
    assert 0 in selection.levels and PATH not in selection.off_surface
    assert any(u.startswith(f"changed lines no recorded cell ran: {PATH}:6 ") for u in selection.unexecuted)


def _called_nowhere(path: str) -> tuple[ChangedFile, runtime.Ran]:
    """A change inside `TEFused.forward` of `path`, and a Level 0 record of the very base file whose cell ran
    other code of it (`transform`, lines 1-7) and never called `TEFused.forward` (lines 20-22)."""
    diff = (
        f"diff --git a/{path} b/{path}\nindex {BLOB[:12]}..fedcba987654 100644\n--- a/{path}\n+++ b/{path}\n"
        "@@ -20,3 +20,3 @@ class TEFused(LoRALinear):\n"
        "     def forward(self, x):\n"
        "-        return self.fused(x)\n"
        "+        return self.fused(x) * self.scale\n"
        "     # end\n"
    )
    file = replace(
        with_diff([ChangedFile(path)], parse_unified_diff(diff))[0],
        functions=("TEFused.forward",), module_level=False, scopes=("TEFused", "forward"),
    )  # fmt: skip
    record = runtime.Ran(
        0, "lora-ddp", "qwen", "b" * 40, "v" * 40,
        functions={path: frozenset({"<module>", "TEFused", "LoRA.transform"})},
        lines={path: frozenset(range(1, 8))}, blobs={path: BLOB},
    )  # fmt: skip
    return file, record


def test_shared_code_no_recorded_cell_called_runs_nothing_and_says_so(matrix) -> None:
    """LoRA's TE op-fuser wrapper: the cells ran the module's other code and never called the wrapper (verl
    never turns the fuser on), so the PEFT path rule's Level 0 would not run the change either."""
    file, record = _called_nowhere(PATH)
    selection = select(matrix, [file], ran=[record])
    assert selection.levels == (), selection.reasons
    assert "called the code around them" in selection.off_surface[PATH]
    assert any(u.startswith(f"changed lines no cell executes: {PATH}:21") for u in selection.unexecuted)
    called = replace(record, functions={PATH: frozenset({"TEFused.forward"})}, lines={PATH: frozenset({20, 21})})
    assert 0 in select(matrix, [file], ran=[called]).levels  # a cell called it: its level runs it


def test_a_familys_own_code_no_recorded_cell_called_keeps_its_rules(matrix) -> None:
    """Model code is built per family and only some families are recorded: the plan says so, the rules run."""
    path = "src/megatron/bridge/models/qwen/qwen_layers.py"
    file, record = _called_nowhere(path)
    selection = select(matrix, [file], ran=[record])
    assert selection.levels and path not in selection.off_surface


EXPORT = "src/megatron/bridge/models/conversion/model_bridge.py"


def _export_record(level: int, lines: set[int], blob: str = BLOB) -> runtime.Ran:
    return runtime.Ran(
        level, "lora-ddp" if level == 0 else "save-resume", "qwen", "b" * 40, "v" * 40,
        functions={EXPORT: frozenset({"MegatronModelBridge.stream_weights_megatron_to_hf"})},
        lines={EXPORT: frozenset(lines)},
        blobs={EXPORT: blob},
    )  # fmt: skip


# lines 4-6 of the base file: the export loop every weight sync runs (its call gains an argument)
EXPORT_DIFF = (
    f"diff --git a/{EXPORT} b/{EXPORT}\nindex {BLOB[:12]}..fedcba987654 100644\n--- a/{EXPORT}\n+++ b/{EXPORT}\n"
    "@@ -4,3 +4,3 @@ def stream_weights_megatron_to_hf(self, megatron_model, hf_pretrained, cpu=True):\n"
    "         for task in tasks:\n"
    "-            yield from task.export()\n"
    "+            yield from task.export(cpu=cpu)\n"
    '             logger.debug("exported %s", task.param_name)\n'
)


def test_with_a_diff_alone_export_lines_level0_ran_add_no_level1(matrix) -> None:
    """hf-export's Level 1 is for what runs at save and resume: where a Level 0 cell's line records of the
    very base file show every changed line ran (the rollout's weight sync), the diff alone is enough to
    say Level 1 adds nothing; records of another version of the file keep Level 1 (a record whose Level 0
    skipped the line says so in the plan instead: test_a_branch_level0_never_took_is_not_proven_by_level0)."""
    files = with_diff([ChangedFile(EXPORT)], parse_unified_diff(EXPORT_DIFF))
    assert files[0].functions is None  # no trees: the diff names scopes, not functions

    def level1_rules(ran: list[runtime.Ran]) -> set[str]:
        return {r.rule for r in select(matrix, files, ran=ran).reasons.get(1, [])}

    assert "hf-export" not in level1_rules([_export_record(0, {1, 2, 3, 4, 5, 6, 7})])
    assert "hf-export" in level1_rules([_export_record(0, {1, 2, 3, 4, 5, 6, 7}, blob="f" * 40)])
    assert "hf-export" in level1_rules([])  # no records at all: the path rule stands
