"""Two readings of what a change does that a word or a path cannot give: a Bridge function verl calls
only under a setting no level turns on (gated.py), and a weight mapping's index arithmetic in code the
recorded cells converted weights through (the `weight-layout` aspect, Level 5)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from verl_e2e.config.aspects import rewritten
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

TRAIN_UTILS = "src/megatron/bridge/training/utils/train_utils.py"
MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"


def _inside(path: str, function: str, removed: str, added: str) -> ChangedFile:
    """A one-line rewrite inside `function`, as `plan --repo` reads it (exact scopes from both ASTs)."""
    return ChangedFile(
        path,
        diff_lines=(removed, added),
        scopes=(function,),
        module_level=False,
        functions=(function,),
        added_at=(90,),
        base_lines=(90,),
    )


def test_a_change_only_in_freeze_moe_router_runs_no_cell_and_says_which_setting(matrix: Matrix) -> None:
    change = _inside(TRAIN_UTILS, "freeze_moe_router", '-    freeze(router, "bias")', "+    pass")
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == (), plan.levels
    said = " ".join(plan.unexecuted)
    assert TRAIN_UTILS in said and "freeze_moe_router" in said, said


def test_a_level_that_sets_the_option_runs_it(matrix: Matrix) -> None:
    """The gate reads the matrix: a variant that turns the router freeze on makes the change a change."""
    level0 = matrix.levels[0]
    opened = replace(
        level0, args=(*level0.args, "++actor_rollout_ref.model.override_config.moe_config.freeze_moe_router=True")
    )
    wider = replace(matrix, levels={**matrix.levels, 0: opened})
    change = _inside(TRAIN_UTILS, "freeze_moe_router", '-    freeze(router, "bias")', "+    pass")
    plan = select(wider, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in plan.levels, plan.levels


def test_a_function_beside_the_gated_one_is_planned_as_before(matrix: Matrix) -> None:
    change = _inside(TRAIN_UTILS, "make_value_model", "-    x = 1", "+    x = 2")
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in plan.levels, plan.levels


@pytest.mark.parametrize(
    ("function", "level5"),
    [
        ("split_qkv_weights", True),  # recorded cells converted weights through it
        # a mapping no recorded cell converted through (a new model's own) is Level 0's and 4's to build
        ("split_brand_new_weights", False),
    ],
)
def test_reordered_rows_get_the_learning_signal_level_in_mapped_code(
    matrix: Matrix, function: str, level5: bool
) -> None:
    change = _inside(
        MAPPING,
        function,
        "-    k_slice = torch.arange(total - 2, dim, total)",
        "+    k_slice = torch.arange(total - 1, dim, total)",
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert (5 in plan.levels) is level5, plan.reasons
    if level5:
        assert "aspect:weight-layout" in {r.rule for r in plan.reasons[5]}


CAT = re.compile(r"\btorch\.(cat|arange)\(")


@pytest.mark.parametrize(
    ("old", "new", "fires"),
    [
        ('    w = torch.cat([h["gate"], h["up"]], dim=0)', '    w = torch.cat([h["up"], h["gate"]], dim=0)', True),
        ("    k = torch.arange(n - 2, d, n)", "    k = torch.arange(n - 1, d, n)", True),
        ("    return torch.cat((q, k, v), dim=0)", "    return torch.cat((q, k, v), dim=0).contiguous()", False),
        ("    out = torch.cat(parts, dim=0)", "    out = torch.cat(parts, dim=0)  # keep", False),
        ("    x = 1", "    y = torch.cat(parts, dim=0)", True),  # a line like no removed one is new
    ],
)
def test_a_rewritten_expression_is_one_whose_own_text_changed(old: str, new: str, fires: bool) -> None:
    assert (rewritten(CAT, [old], [new]) is not None) is fires


@pytest.mark.parametrize(
    ("old", "new", "fires"),
    [
        # a slice bound rewritten: the query heads of group i taken from the wrong offset, same shape
        (
            "        out.append(q[i * heads_per_group : (i + 1) * heads_per_group, :])",
            "        out.append(q[i : i + heads_per_group, :])",
            True,
        ),
        ("    v = qkv_reshaped[v_slice]", "    v = qkv_reshaped[k_slice]", True),  # the sibling's index
        ("    w = weight[perm]", "    w = weight[perm].clone()", False),  # the subscript itself unchanged
        ('    x = hf_weights["k"]', '    x = hf_weights["v"]', False),  # a name lookup, not index arithmetic
    ],
)
def test_slices_and_index_tensors_are_weight_layout(matrix: Matrix, old: str, new: str, fires: bool) -> None:
    (aspect,) = [a for a in matrix.aspects if a.name == "weight-layout"]
    assert (rewritten(aspect.pattern, [old], [new]) is not None) is fires


CHECKPOINTING = "src/megatron/bridge/training/checkpointing.py"


def test_fsdp_checkpoint_helpers_run_only_where_one_cell_saves_under_megatron_fsdp(matrix: Matrix) -> None:
    """Level 1 saves under DDP and Level 3 runs Megatron-FSDP without saving: no cell has both."""
    change = _inside(
        CHECKPOINTING, "preprocess_fsdp_dtensor_state_dict", "-    if is_swiglu:", "+    if not is_swiglu:"
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == (), plan.reasons
    assert "preprocess_fsdp_dtensor_state_dict" in " ".join(plan.unexecuted)
    level3 = matrix.levels[3]
    (fsdp,) = level3.variants
    saving = replace(fsdp, env={**fsdp.env, "SAVE_FREQ": "1"})
    wider = replace(matrix, levels={**matrix.levels, 3: replace(level3, variants=(saving,))})
    assert 3 in select(wider, [change], surface=surface.shipped(), ran=runtime.shipped()).levels


DORA = "src/megatron/bridge/peft/dora.py"


def test_a_peft_type_verl_never_names_runs_no_cell_until_a_level_names_it(matrix: Matrix) -> None:
    """verl's LoRA config says `type: lora`: Bridge builds DoRA (a whole class) only when a user picks it."""
    change = _inside(DORA, "DoRA.transform", "                alpha=self.alpha,", "                alpha=self.dim,")
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert plan.levels == (), plan.levels
    assert "lora.type=dora" in " ".join(plan.unexecuted)
    level0 = matrix.levels[0]
    opened = replace(level0, args=(*level0.args, "actor_rollout_ref.model.lora.type=dora"))
    plan = select(replace(matrix, levels={**matrix.levels, 0: opened}), [change], ran=runtime.shipped())
    assert 0 in plan.levels, plan.levels


MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
RECEIVE = b"""class QKVMapping:
    def megatron_to_hf(self, megatron_weights, megatron_module):
        if megatron_module is None:
            config = self.broadcast_obj_from_pp_rank(None, "qkv_config")
        else:
            config = self._get_config(megatron_module)
        return config
"""


def test_a_conversion_tasks_missing_module_is_another_pipeline_stage(matrix: Matrix) -> None:
    """A stage that does not own a weight gets `megatron_module=None` and joins its owner's broadcast: at
    PP = 1 one stage owns every module, so the receiving branch runs only at PP > 1 (Level 2)."""
    from verl_e2e.plan import branches, layout

    (branch,) = branches.from_source(RECEIVE, [4], True)
    assert [c.test for c in branch.conditions] == ["megatron_module is None"]
    change = replace(
        _inside(MAPPING, "QKVMapping.megatron_to_hf", "            config = self.x(None)", "            config = None"),
        branches=(branch,),
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 in plan.levels, plan.levels
    test = layout.parse("megatron_module is None")
    assert test is not None
    assert not layout.can_hold(test, True, layout.Layout(pp=1)) and layout.can_hold(test, False, layout.Layout(pp=1))
    assert layout.can_hold(test, True, layout.Layout(pp=2))  # the owner's side runs everywhere


PEFT_UTILS = "src/megatron/bridge/peft/utils.py"


@pytest.mark.parametrize(
    ("guarded", "level2"),
    [(("            self.disable_sequence_parallel_comm = True",), True), (("            self.half()",), False)],
)
def test_a_layout_flag_set_in_the_block_a_rewritten_test_decides_on_is_parallel_layout(
    matrix: Matrix, guarded: tuple[str, ...], level2: bool
) -> None:
    """`if not base_linear_is_parallel:` turned around: its block turns off the adapter's sequence-parallel
    scatter, which only TP > 1 with sequence parallel notices (probes-19)."""
    change = replace(
        _inside(PEFT_UTILS, "ParallelLinearAdapter.__init__", "        if not parallel:", "        if parallel:"),
        guarded=guarded,
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert (2 in plan.levels) is level2, plan.levels
