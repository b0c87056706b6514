"""Selection grounded in what real cells ran: the shipped records of a real Level 0 run on an H200
(tests/fixtures/real-runs/09-...), a one-line change inside every function it executed, and the
fallback that never leaves a change on verl's surface with no cell."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from verl_e2e.cli.main import main
from verl_e2e.plan import runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

RUN = Path(__file__).parent / "fixtures/real-runs/09-pass-level0-defaults-megatron-fallback"


def _change(path: str, qualname: str, *, trees: bool = True) -> ChangedFile:
    """A one-line change inside `qualname`, as `plan --repo` reads it from both ASTs (its scopes, and
    the innermost def it sits in, which a tracer names with `<locals>`); `trees=False`: a diff alone."""
    inner = (qualname.replace(".<locals>", ""),) if trees else None
    scopes = tuple(qualname.replace(".<locals>", "").split("."))
    return ChangedFile(path, diff_lines=("+    x = 1",), scopes=scopes, module_level=False, functions=inner)


def _levels(matrix, files: list[ChangedFile], ran) -> set[int]:
    return set(select(matrix, files, surface=surface.shipped(), ran=ran).levels)


RUNS = {
    "L0-lora-ddp-nemotron": RUN.parent / "21-pass-level0-tiny-nemotron",
    "L1-save-resume-qwen": RUN.parent / "11-pass-level1-save-resume-records",
    "L0-lora-ddp-qwen3_moe": RUN.parent / "12-pass-level0-tiny-qwen3-moe",
    "L0-lora-ddp-mistral": RUN.parent / "27-pass-level0-tiny-mistral",
    "L0-lora-ddp-llama": RUN.parent / "35-pass-level0-smollm2",
    "L1-save-resume-llama": RUN.parent / "36-pass-level1-smollm2-save-resume",
}


# every family's kept Level 0 run (Bridge 067f987, lines keyed by the blob ids the driver recorded), and
# the passing cells above Level 0 (the one kept for its break, LoRA under Megatron-FSDP, is not folded)
FAMILY_RUNS = sorted((RUN.parents[1] / "family-runs").glob("*.tar.xz")) + sorted(
    a for a in (RUN.parents[1] / "level-runs").glob("*.tar.xz") if not a.name.endswith("-lora.tar.xz")
)


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    spec = importlib.util.spec_from_file_location("family_table", RUN.parents[3] / "tools/family_table.py")
    assert spec and spec.loader
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    runs = [tool.unpack(a, tmp_path_factory.mktemp(a.name.removesuffix(".tar.xz"))) for a in FAMILY_RUNS]
    return {json.loads((r / "cell.json").read_text())["id"]: r for r in runs}


def test_the_shipped_records_are_the_real_runs(family_runs: dict[str, Path]) -> None:
    """Functions as the run dirs hold them; lines where the run recorded them, keyed by blob ids (given by
    `surface --runs ... --bridge` from the Bridge tree the older runs ran, which they predate). Each
    family's kept Level 0 run is shipped too: a selection that knows what Gemma's or GLM's cell ran."""
    shipped = {r.cell: r for r in runtime.shipped()}
    assert len(family_runs) >= 9 and not set(family_runs) & set(RUNS)
    assert set(shipped) == set(RUNS) | set(family_runs)
    for cell, run in {**RUNS, **family_runs}.items():
        ran = runtime.from_run_dir(run)
        assert ran is not None and shipped[cell].functions == ran.functions, cell
        recorded = json.loads((run / "bridge-functions.json").read_text()).get("lines", {})
        files = {f for per_file in recorded.values() for f in per_file}
        assert set(shipped[cell].lines) == files and set(shipped[cell].blobs) == files, cell
        for f in files:
            spans = [s for per_file in recorded.values() for s in per_file.get(f, ())]
            ran_lines = {n for a, b in spans for n in range(max(a, 1), b + 1)}  # line 0: no line of the file
            assert shipped[cell].lines[f] == ran_lines, (cell, f)


@pytest.mark.parametrize("cell", sorted(r.cell for r in runtime.shipped()))  # the family runs too
def test_every_function_a_real_cell_ran_gets_that_cells_level_when_changed(matrix, cell: str) -> None:
    """The issue's measure: a one-line change inside each executed function gets a cell (1.0), at
    the lowest level whose recorded cell ran it."""
    ran = runtime.shipped()
    (record,) = [r for r in ran if r.cell == cell]
    functions = [(p, q) for p, qs in record.functions.items() for q in qs if q != "<module>"]
    assert len(functions) > 500

    def lowest(path: str, qualname: str) -> int:  # the cheapest recorded cell that ran it suffices
        return min(r.level for r in ran if qualname in r.functions.get(path, ()))

    missed = [(p, q) for p, q in functions if lowest(p, q) not in _levels(matrix, [_change(p, q)], ran)]
    assert missed == []


def test_shared_code_both_families_ran_runs_one_family_and_moe_only_code_the_moe_one(matrix) -> None:
    ran = runtime.shipped()
    generic = select(matrix, [_change("src/megatron/bridge/peft/lora.py", "LoRA.transform")], ran=ran)
    assert set(generic.targets[0]) == {"qwen"}  # the MoE cell ran it too, but one family proves it
    expert = _change(
        "src/megatron/bridge/models/conversion/peft_bridge.py", "MegatronPeftBridge._gather_expert_adapter_weight"
    )
    moe = select(matrix, [expert], ran=ran)
    assert "qwen3_moe" in moe.targets[0]  # only the MoE cell ran it: the MoE family runs it


def test_code_level0_ran_too_does_not_select_level1_by_execution(matrix) -> None:
    change = _change("src/megatron/bridge/peft/lora.py", "LoRA.transform")  # Level 1 ran it as well
    chosen = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert not any(r.rule == "executed" for r in chosen.reasons.get(1, ()))


def test_the_save_path_only_level1_ran_selects_level1(matrix) -> None:
    """Bridge's PEFT filter at save: the Level 0 record never ran it, the Level 1 record did."""
    change = _change("src/megatron/bridge/training/checkpointing.py", "apply_peft_adapter_filter_to_state_dict")
    assert {0, 1} <= _levels(matrix, [change], runtime.shipped())


def test_code_static_reach_misses_is_selected_by_what_ran(matrix) -> None:
    """The HF config loader of Bridge's pretrained wrapper runs through a cached property, which the call graph
    by names does not follow; the cells ran it."""
    path = "src/megatron/bridge/models/hf_pretrained/causal_lm.py"
    change = _change(path, "PreTrainedCausalLM._load_config")
    index = surface.shipped()
    assert index is not None and index.unreached(path, ("PreTrainedCausalLM._load_config",))  # static reach
    seen = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in seen.levels and path not in seen.off_surface
    reasons = [r.to_json() for r in seen.reasons[0]]
    assert any(r["rule"] == "executed" and "_load_config" in json.dumps(r) for r in reasons), reasons


def test_a_change_on_the_surface_that_nothing_matched_still_runs_level0(matrix) -> None:
    change = _change("src/megatron/bridge/training/checkpointing.py", "apply_peft_adapter_filter_to_state_dict")
    chosen = select(matrix, [change], surface=surface.shipped(), ran=())
    assert 0 in chosen.levels
    assert any(r.to_json()["rule"] == "unmatched-surface" for r in chosen.reasons[0])


def test_a_class_body_that_ran_at_import_says_nothing_about_its_methods() -> None:
    """With the trees, a change inside a method matches that method's record only; the class body
    (recorded because the module was imported) matches a change in the class body itself."""
    rec = runtime.Ran(0, "lora-ddp", "qwen", "b" * 40, "v" * 40, {"src/megatron/bridge/x.py": frozenset({"Cfg"})})
    path = "src/megatron/bridge/x.py"
    assert runtime.executed([rec], path, ("Cfg", "validate"), False, ("Cfg.validate",)) == []
    assert runtime.executed([rec], path, ("Cfg",), False, ("Cfg",)) == [(rec, "Cfg")]
    # a diff alone cannot tell which of the scopes a line is in: the enclosing class counts
    assert runtime.executed([rec], path, ("Cfg", "validate"), False, None) == [(rec, "Cfg")]


def test_a_nested_function_matches_its_traced_name() -> None:
    rec = runtime.Ran(
        0,
        "lora-ddp",
        "qwen",
        "b" * 40,
        "v" * 40,
        {"src/megatron/bridge/peft/base.py": frozenset({"PEFT.__call__.<locals>._validate_only"})},
    )
    hits = runtime.executed([rec], "src/megatron/bridge/peft/base.py", (), False, ("PEFT.__call__._validate_only",))
    assert hits == [(rec, "PEFT.__call__.<locals>._validate_only")]


def test_a_record_of_another_file_selects_nothing_by_itself(matrix) -> None:
    ran = [runtime.Ran(1, "save-resume", "qwen", "b" * 40, "v" * 40, {"src/megatron/bridge/x.py": frozenset({"f"})})]
    assert runtime.executed(ran, "src/megatron/bridge/y.py", ("f",), False) == []
    ((hit, name),) = runtime.executed(ran, "src/megatron/bridge/x.py", ("f",), False)
    assert (hit.level, name) == (1, "f")


def test_surface_runs_merges_a_run_dir_and_refuses_one_without_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runtime.json"
    assert main(["surface", "--runs", str(RUN), "--out", str(out)], env={}) == 0
    data = json.loads(out.read_text())
    cells = {(c["level"], c["variant"], c["family"]): c for c in data["cells"]}
    shipped = {(r.level, r.variant, r.family) for r in runtime.shipped()}
    assert set(cells) == shipped | {(0, "lora-ddp", "qwen")}
    assert "src/megatron/bridge/peft/lora.py" in cells[0, "lora-ddp", "qwen"]["functions"]  # the run's record
    assert "lines" not in cells[0, "lora-ddp", "qwen"]  # run 09 predates line records: it replaced them
    assert main(["surface", "--runs", str(tmp_path), "--out", str(out)], env={}) == 2
    assert "needs cell.json" in capsys.readouterr().err
