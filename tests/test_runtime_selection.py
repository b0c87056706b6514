"""Selection grounded in what real cells ran: the shipped records of a real Level 0 run on an H200
(tests/fixtures/real-runs/09-...), a one-line change inside every function it executed, and the
fallback that never leaves a change on verl's surface with no cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_e2e import runtime, surface
from verl_e2e.changes import ChangedFile
from verl_e2e.cli import main
from verl_e2e.select import select

RUN = Path(__file__).parent / "fixtures/real-runs/09-pass-level0-defaults-megatron-fallback"


def _change(path: str, qualname: str) -> ChangedFile:
    """A one-line change inside `qualname` (its scopes as the AST reader names them)."""
    return ChangedFile(path, diff_lines=("+    x = 1",), scopes=tuple(qualname.split(".")), module_level=False)


def _levels(matrix, files: list[ChangedFile], ran) -> set[int]:
    return set(select(matrix, files, surface=surface.shipped(), ran=ran).levels)


def test_the_shipped_records_are_the_real_runs() -> None:
    (shipped,) = [r for r in runtime.shipped() if r.cell == "L0-lora-ddp-qwen"]
    assert shipped == runtime.from_run_dir(RUN)


def test_every_function_a_real_cell_ran_gets_a_cell_when_changed(matrix) -> None:
    """The issue's measure: a one-line change inside each executed function selects a level (1.0)."""
    ran = runtime.shipped()
    (record,) = [r for r in ran if r.cell == "L0-lora-ddp-qwen"]
    functions = [(p, q) for p, qs in record.functions.items() for q in qs if q != "<module>"]
    assert len(functions) > 500
    missed = [(p, q) for p, q in functions if 0 not in _levels(matrix, [_change(p, q)], ran)]
    assert missed == []


def test_lora_transform_is_selected_by_what_ran_though_static_reach_misses_it(matrix) -> None:
    change = _change("src/megatron/bridge/peft/lora.py", "LoRA.transform")
    blind = select(matrix, [change], surface=surface.shipped())  # static reach alone: a value and a string import
    assert "src/megatron/bridge/peft/lora.py" in blind.off_surface
    seen = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in seen.levels and "src/megatron/bridge/peft/lora.py" not in seen.off_surface
    reasons = [r.to_json() for r in seen.reasons[0]]
    assert any(r["rule"] == "executed" and "LoRA.transform" in json.dumps(r) for r in reasons), reasons


def test_a_change_on_the_surface_that_nothing_matched_still_runs_level0(matrix) -> None:
    change = _change("src/megatron/bridge/training/checkpointing.py", "apply_peft_adapter_filter_to_state_dict")
    chosen = select(matrix, [change], surface=surface.shipped(), ran=())
    assert 0 in chosen.levels
    assert any(r.to_json()["rule"] == "unmatched-surface" for r in chosen.reasons[0])


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
    assert [c["level"] for c in data["cells"]] == [0] and "src/megatron/bridge/peft/lora.py" in data["cells"][0]["functions"]
    assert main(["surface", "--runs", str(tmp_path), "--out", str(out)], env={}) == 2
    assert "needs cell.json" in capsys.readouterr().err
