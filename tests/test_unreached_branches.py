"""A changed line under a layout condition no cell's layout takes (`if cp_size > 1:`, every cell runs CP = 1)
runs nowhere, whether or not a recorded cell ever ran the function around it: a family that has never
run a cell (kimi_vl) has no record of its forward, yet its CP-only lines are still no cell's (probes-27).
A line under a condition some layout does take selects nothing while its function is unrecorded."""

from __future__ import annotations

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.branches import Branch, Condition
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

from .recorded_cells import recorded

KIMI = "src/megatron/bridge/models/kimi_vl/modeling_kimi_k25_vl.py"
SOURCE = "class KimiK25VLModel:\n    def forward(self, labels, cp_size):\n        return labels\n"


def _change(test: str) -> ChangedFile:
    cond = (Condition(test, True, "if"),)
    return ChangedFile(
        KIMI,
        diff_lines=("            labels = split(labels, seq_dim=1)", "            labels = split(labels, seq_dim=0)"),
        added_at=(516,),
        module_level=False,
        functions=("KimiK25VLModel.forward",),
        branches=(
            Branch(516, True, "KimiK25VLModel.forward", cond),
            Branch(516, False, "KimiK25VLModel.forward", cond),
        ),
    )


def test_a_context_parallel_line_of_a_never_run_family_runs_in_no_cell(matrix: Matrix) -> None:
    ran = recorded(KIMI, SOURCE, {"<module>"}, {1}, family="qwen")  # imported everywhere, never built
    plan = select(matrix, [_change("cp_size > 1")], ran=ran)
    assert not plan.levels and any(KIMI in line for line in plan.unexecuted), (plan.levels, plan.unexecuted)


def test_a_tensor_parallel_line_there_is_not_called_unexecuted(matrix: Matrix) -> None:
    ran = recorded(KIMI, SOURCE, {"<module>"}, {1}, family="qwen")
    plan = select(matrix, [_change("tp_size > 1")], ran=ran)
    assert not any(KIMI in line for line in plan.unexecuted), plan.unexecuted
