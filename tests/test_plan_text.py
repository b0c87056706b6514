"""`verl-e2e plan` as text: a table with headers and named units, and reasons in plain words.

Before: cells printed as `L0-lora-ddp-qwen  2 GPU   45 min  ...` under "about 140 GPU-minutes", so a
timeout read like the estimate (2 x 45 is not the 30 GPU-minutes the total counted), and a scope
hit read "(`Adapter` in the in ParallelLinearAdapter)".
"""

from __future__ import annotations

import re
from pathlib import Path

from verl_e2e.config.matrix import load_matrix
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.contract import render_text

NAN_DIFF = Path(__file__).parent / "fixtures" / "real-runs" / "15-fail-level0-mutation-nan-scaling" / "mutation.diff"


def _text(**request: object) -> str:
    matrix = load_matrix()
    return render_text(make_plan(PlanRequest(command="plan", **request), matrix), matrix)  # type: ignore[arg-type]


def test_the_cells_table_has_headers_and_units_apart() -> None:
    lines = _text(example="new-provider").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Cells: "))
    total = int(re.search(r"about (\d+) GPU-minutes in all", lines[at]).group(1))  # type: ignore[union-attr]
    assert lines[at + 1].split() == ["cell", "GPUs", "estimate", "timeout", "model"]
    rows = [line for line in lines[at + 2 :] if line.startswith("  L")]
    estimates = []
    for row in rows:
        _cell, _gpus, estimate, unit, _timeout, minutes, *_model = row.split()
        assert (unit, minutes) == ("GPU-min", "min"), row
        estimates.append(int(estimate))
    assert rows and sum(estimates) == total  # the column adds up to the line above it


def test_a_budget_lists_what_waits_with_its_estimate() -> None:
    text = _text(example="new-provider", budget=60)
    waiting = text.split("Not run (GPU budget of 60 GPU-minutes)")[1].splitlines()
    assert waiting[1].split() == ["cell", "estimate", "request"]
    assert re.fullmatch(r"  L4-expert-parallel-olmoe +\d+ GPU-min  /verl-e2e level=4 family=olmoe", waiting[2])


def test_reasons_read_as_plain_sentences() -> None:
    text = _text(diff=str(NAN_DIFF))
    assert "in the in" not in text
    assert "(`alpha / self.dim` in the changed lines)" in text  # what the change computes, not a class name
    assert "    - aspect learning-numerics, family qwen (src/megatron/bridge/peft/utils.py):" in text
    assert "    - rule peft, family qwen (src/megatron/bridge/peft/utils.py):" in text
    example = _text(example="new-provider")
    assert "<module>" not in example and "executed the changed code (e.g. module-level code)" in example
