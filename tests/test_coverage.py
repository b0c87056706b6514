"""Changed-code coverage: which of the PR's changed functions each cell executed, from its own records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from verl_e2e.judge.coverage import measure
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.report.comment import table

REAL = Path(__file__).parent / "fixtures/real-runs"


def test_executed_and_not_executed_functions_are_named() -> None:
    changed = {
        "src/megatron/bridge/peft/lora.py": ["LoRA.transform", "LoRA.merge"],
        "src/megatron/bridge/peft/base.py": ["PEFT.__call__._validate_only"],
        "docs/index.md": ["ignored"],  # only Bridge sources count
    }
    ran = [
        ("src/megatron/bridge/peft/lora.py", "LoRA.transform"),
        ("src/megatron/bridge/peft/base.py", "PEFT.__call__.<locals>._validate_only"),
    ]
    cov = measure(changed, ran)
    assert cov is not None and cov.total == 3
    assert cov.summary() == "executed 2 of 3 changed functions; not executed: `LoRA.merge`"
    assert cov.limitation() is None


def test_a_cell_that_ran_none_of_the_change_says_its_result_proves_nothing() -> None:
    cov = measure({"src/megatron/bridge/training/checkpointing.py": ["apply_peft_adapter_filter_to_state_dict"]}, [])
    assert cov is not None and cov.summary().startswith("executed 0 of 1 changed function;")
    assert "proves nothing about the change" in (cov.limitation() or "")


def test_a_diff_only_plan_names_functions_without_their_class() -> None:
    cov = measure(
        {"src/megatron/bridge/peft/lora.py": ["transform"]}, [("src/megatron/bridge/peft/lora.py", "LoRA.transform")]
    )
    assert cov is not None and cov.executed == ("src/megatron/bridge/peft/lora.py:transform",)


def test_no_changed_bridge_function_means_no_coverage_line() -> None:
    assert measure({}, [("src/megatron/bridge/x.py", "f")]) is None


def _rejudge(tmp_path: Path, src: Path, changes: dict) -> object:
    run = tmp_path / src.name
    shutil.copytree(src, run)
    (run / "changes.json").write_text(json.dumps(changes))
    return judge_run_dir(run)


def test_the_real_level0_pass_did_not_run_the_save_path_a_pr_changed(tmp_path: Path) -> None:
    """Run 09 (a real Level 0 Pass) judged against the save-filter change: the verdict says the cell
    never ran the changed function, so its Pass proves nothing about it; the comment shows 0 of 1."""
    change = {
        "lines": {"src/megatron/bridge/training/checkpointing.py": [[3356, 3356]]},
        "functions": {"src/megatron/bridge/training/checkpointing.py": ["apply_peft_adapter_filter_to_state_dict"]},
    }
    v = _rejudge(tmp_path, REAL / "09-pass-level0-defaults-megatron-fallback", change)
    assert v.result == "Pass"
    assert v.coverage is not None and v.coverage["executed"] == []
    assert any("proves nothing about the change" in x for x in v.limitations)
    rows = table([v])
    assert "Changed code ran" in rows[0] and "0 of 1 (none ran)" in rows[2]


def test_the_real_level1_run_executed_the_changed_save_filter(tmp_path: Path) -> None:
    change = {
        "lines": {"src/megatron/bridge/training/checkpointing.py": [[3356, 3356]]},
        "functions": {"src/megatron/bridge/training/checkpointing.py": ["apply_peft_adapter_filter_to_state_dict"]},
    }
    v = _rejudge(tmp_path, REAL / "11-pass-level1-save-resume-records", change)
    assert v.result == "Pass" and v.coverage is not None
    assert v.coverage["summary"] == "executed 1 of 1 changed function"
    assert not any("proves nothing" in x for x in v.limitations)
