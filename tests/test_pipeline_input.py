"""A model's `set_input_tensor` is what Megatron's pipeline schedule hands the previous stage's output to
(schedules.py forward_step). At PP = 1 the only stage embeds its own input and never reads it, so a
change there shows only in a PP = 2 cell: Level 2, not the VLM's Level 4 variant, which runs one stage
(probes-23 and -25: three blind probes on Qwen2.5-VL, Qwen3-VL and Falcon-H1 missed Level 2)."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.build import PlanRequest, make_plan

from .unified_diffs import one_hunk

VLM = "src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py"


def _levels(matrix: Matrix, tmp_path: Path, header: str, old: str, new: str) -> list[int]:
    (tmp_path / "d.diff").write_text(one_hunk(VLM, header, [f"-{old}", f"+{new}"], 146), encoding="utf-8")
    (tmp_path / "f.txt").write_text(f"M\t{VLM}\n", encoding="utf-8")
    plan = make_plan(PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix)
    return sorted(plan.selection.levels)


def test_the_pipeline_input_method_runs_where_there_are_two_stages(matrix: Matrix, tmp_path: Path) -> None:
    levels = _levels(
        matrix,
        tmp_path,
        "def set_input_tensor(self, input_tensor) -> None:",
        "        self.language_model.set_input_tensor(input_tensor)",
        "        pass",
    )
    assert 2 in levels and 4 not in levels, levels


def test_the_same_edit_in_the_forward_still_runs_the_vlm_variant(matrix: Matrix, tmp_path: Path) -> None:
    levels = _levels(
        matrix,
        tmp_path,
        "def forward(self, input_ids, position_ids=None):",
        "        hidden = self.language_model(input_ids)",
        "        hidden = self.language_model(input_ids, position_ids)",
    )
    assert 4 in levels, levels
