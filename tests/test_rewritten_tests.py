"""A rewritten test on the parallel layout selects the first cell whose layout decides it differently
(plan/retests.py): `and` turned into `or` around a PP size enters the VPP branch at PP = 2, which Level 0
(PP = 1) never shows."""

from __future__ import annotations

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import layout, retests, runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

PROVIDER = "src/megatron/bridge/models/model_provider.py"
OLD = "    if (pp_group.size() > 1) and (vp_size is not None):"
NEW = "    if (pp_group.size() > 1) or (vp_size is not None):"


@pytest.mark.parametrize(
    ("old", "new", "level"),
    [
        (OLD, NEW, 2),  # differs at PP = 2 without VPP
        ("    if tp_size > 1:", "    if tp_size >= 1:", None),  # differs at TP = 1: Level 0 sees it
        ("    if tp_size > 1 and x:", "    if tp_size > 1 and y:", 2),  # the changed part only counts at TP > 1
        ("    if x:", "    if y:", None),  # no layout read
        ("    return self.tp_size > 1", "    return self.tp_size > 2", 2),
    ],
)
def test_the_first_cell_that_decides_a_rewritten_test_differently(
    matrix: Matrix, old: str, new: str, level: int | None
) -> None:
    found = retests.first_cell(layout.cell_layouts(matrix), [old], [new], moe_family=False)
    assert (found[0].level if found else None) == level, found


def test_the_plan_runs_the_level_that_sees_it(matrix: Matrix) -> None:
    change = ChangedFile(
        PROVIDER,
        diff_lines=(OLD, NEW),
        scopes=("_create_model",),
        module_level=False,
        functions=("_create_model",),
        added_at=(731,),
        base_lines=(731,),
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 in plan.levels, plan.reasons
    assert any("rewritten test" in r.why for r in plan.reasons[2]), plan.reasons[2]


AUDIO = "src/megatron/bridge/models/qwen_audio/modeling_qwen2_audio.py"


def _audio(old: str, new: str, *more: str) -> ChangedFile:
    return ChangedFile(
        AUDIO,
        diff_lines=(old, new, *more),
        scopes=("forward",),
        module_level=False,
        functions=("Qwen2AudioModel.forward",),
        added_at=tuple(range(199, 200 + len(more))),
        base_lines=(199,),
    )


def test_levels_whose_cells_decide_a_rewritten_test_as_before_add_nothing(matrix: Matrix) -> None:
    """probes-21: `if self.pre_process:` made `if self.post_process:` in a VLM family's forward drew the
    family's Level 4 variant (PP = 1, where both hold) next to Level 2's PP = 2, which decides it first."""
    change = _audio("        if self.pre_process:", "        if self.post_process:")
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 in plan.levels and 4 not in plan.levels, plan.reasons
    assert {2, 4} <= {c.level for c in layout.cell_layouts(matrix, every_kind=True)}


def test_a_rewritten_test_with_other_code_changed_keeps_the_familys_levels(matrix: Matrix) -> None:
    change = _audio("        if self.pre_process:", "        if self.post_process:", "        x = audio_tower(x)")
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert {2, 4} <= set(plan.levels), plan.reasons


def test_a_rewrite_no_layout_tells_apart_claims_nothing(matrix: Matrix) -> None:
    """probes-10: `isinstance(task.param_weight, DTensor)` made `isinstance(task.megatron_module, DTensor)`
    reads as the Megatron-FSDP test either way; that no cell decides them apart says nothing of what
    changed, so Level 3's own reasons stay."""
    cells = [c for c in layout.cell_layouts(matrix, every_kind=True) if not c.scheduled]
    old, new = "    if isinstance(task.param_weight, DTensor):", "    if isinstance(task.megatron_module, DTensor):"
    assert retests.deciding_levels(cells, [old], [new]) == (0, set())
    assert retests.deciding_levels(cells, ["    if self.pre_process:"], ["    if self.post_process:"])[1] == {2}


@pytest.mark.parametrize(
    ("old", "new", "level"),
    [  # probes-23: the layout part dropped from a test; its other part is the same in both, whatever it is
        ("    if self.post_process and self.post_layer_norm:", "    if self.post_layer_norm:", 2),
        ("    if self.post_layer_norm:", "    if self.post_process and self.post_layer_norm:", 2),
        (
            "    if self.post_process and self.post_layer_norm:",
            "    if self.post_layer_norm and self.post_process:",
            None,
        ),
        ("    if tp_rank == 0 and ep_rank == 0:", "    if tp_rank == 0 or ep_rank == 0:", 2),
    ],
)
def test_the_parts_of_two_tests_are_tried_together(matrix: Matrix, old: str, new: str, level: int | None) -> None:
    found = retests.first_cell(layout.cell_layouts(matrix, every_kind=True), [old], [new], moe_family=False)
    assert (found[0].level if found else None) == level, found
