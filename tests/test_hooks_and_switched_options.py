"""Readings added after the eighteenth blind probe set:
- an option set in the block a rewritten test decides on is as good as set (`provider_kwargs["rotary_base"]`
  under a fallback test turned around: Megatron's default RoPE base of 10000 instead of the checkpoint's);
- the logit-dtype helper handing the output layer a dtype where the model names none (an fp32 GEMM);
- a stride or offset that a mapping's tensor indices are computed from (`total_heads_per_group`);
- a family bridge's hook whose namesakes ran in other families' Level 0 cells runs there too, so a family
  no cell recorded gets no Level 1 for its mappings (every weight sync converts through them);
- shared model code used by a few families runs on one of those that can run in verl.
Each is planned through `select` on the shipped matrix, surface and records (or record doubles in their
shape)."""

from __future__ import annotations

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime, surface, unrun
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.fields import ChangedDefault
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select
from verl_e2e.plan.targets import Targets

from .test_swaps_and_switches import _inside

MODEL_BRIDGE = "src/megatron/bridge/models/conversion/model_bridge.py"
LOGIT = "src/megatron/bridge/models/logit_dtype.py"
MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"


def _levels(matrix: Matrix, change: ChangedFile) -> tuple[int, ...]:
    return select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped()).levels


@pytest.mark.parametrize(
    ("guarded", "level5"),
    [
        (('                provider_kwargs["rotary_base"] = rope_theta_from_hf(hf_config)',), True),
        (("                logger.warning('no rope theta')",), False),
    ],
)
def test_an_option_set_in_the_block_a_rewritten_test_decides_on_is_set(
    matrix: Matrix, guarded: tuple[str, ...], level5: bool
) -> None:
    test = ('        if "rotary_base" not in provider_kwargs:', '        if "rotary_base" in provider_kwargs:')
    change = _inside(MODEL_BRIDGE, "MegatronModelBridge.hf_config_to_provider_kwargs", test, guarded)
    assert (5 in _levels(matrix, change)) is level5


@pytest.mark.parametrize(
    ("new", "level5"),
    [
        ("        return {keyword: torch.float32}", True),
        ('        raise ValueError(f"logit_dtype must be one of {supported}")', False),
    ],
)
def test_a_dtype_the_logit_helper_hands_over_is_numerics(matrix: Matrix, new: str, level5: bool) -> None:
    change = _inside(LOGIT, "optional_dtype_kwarg", ("        return {}", new))
    levels = _levels(matrix, change)
    assert 0 in levels and (5 in levels) is level5, levels


@pytest.mark.parametrize(
    ("old", "new", "level5"),
    [
        (
            "        total_heads_per_group = heads_per_group + 2",
            "        total_heads_per_group = heads_per_group + 1",
            True,
        ),
        ("        is_bias = qkv.ndim == 1", "        is_bias = qkv.dim() == 1", False),
    ],
)
def test_a_stride_the_split_indices_come_from_is_weight_layout(
    matrix: Matrix, old: str, new: str, level5: bool
) -> None:
    levels = _levels(matrix, _inside(MAPPING, "split_qkv_weights", (old, new)))
    assert 0 in levels and (5 in levels) is level5, levels


FAMILY = "src/megatron/bridge/models/newfam/newfam_bridge.py"


def _cells(families: int, method: str = "mapping_registry") -> list[Ran]:
    """Level 0 cells of other families that ran their bridges' `method` (and nothing of FAMILY)."""
    return [
        Ran(
            0,
            "lora-ddp",
            f"fam{i}",
            "b",
            "v",
            {f"src/megatron/bridge/models/fam{i}/fam{i}_bridge.py": frozenset({f"Fam{i}Bridge.{method}"})},
        )
        for i in range(families)
    ]


@pytest.mark.parametrize(
    ("functions", "cells", "ran"),
    [
        (("NewFamBridge.mapping_registry",), 3, True),
        (("NewFamBridge.mapping_registry",), 2, False),  # too few families show the hook runs at Level 0
        (("NewFamBridge.megatron_to_hf_config",), 3, False),  # a hook no other family's cell ran
        (("NewFamHelper.mapping_registry",), 3, False),  # not a bridge
        (("mapping_registry",), 3, False),  # not a method
    ],
)
def test_a_family_hook_runs_where_its_namesakes_in_other_families_ran(
    functions: tuple[str, ...], cells: int, ran: bool
) -> None:
    change = ChangedFile(FAMILY, diff_lines=("    x", "    y"), module_level=False, functions=functions, added_at=(9,))
    assert unrun.ran_at(0, change, _cells(cells)) is ran


def test_an_unrecorded_familys_mapping_change_gets_no_save_level(matrix: Matrix) -> None:
    """Bailing's MTP mappings: Level 4 runs the family, every weight sync converts through them (Level 0's
    namesakes), and Level 1's save writes only the adapter."""
    path = "src/megatron/bridge/models/bailing/bailing_moe_v2_bridge.py"
    change = ChangedFile(
        path,
        diff_lines=(
            '            "mtp.layers.*.eh_proj.weight": "model.mtp.layers.*.eh_proj.weight",',
            '            "mtp.layers.*.eh_proj.weight": "model.layers.*.eh_proj.weight",',
        ),
        added_at=(120,),
        scopes=("mapping_registry",),
        module_level=False,
        functions=("BailingMoeV2Bridge.mapping_registry",),
    )
    levels = _levels(matrix, change)
    assert 4 in levels and 1 not in levels, levels


def test_shared_code_a_few_families_use_runs_on_one_that_can_run(matrix: Matrix) -> None:
    """Gemma 2, Gemma 3 and EXAONE 4 build the post-norm row linear; EXAONE 4 and Gemma 2 cannot run in
    verl today, so the change runs on Gemma 3, though EXAONE comes first by name."""
    archs = ("Exaone4ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM")
    change = ChangedFile("src/megatron/bridge/models/common/te_layers.py", serves=archs)
    assert Targets(matrix).users(change) == "gemma3"


@pytest.mark.parametrize(("field", "level2"), [("_MODULE_TYPE_REGISTRY", True), ("_CACHE_NOTE", False)])
def test_the_field_a_change_edits_names_what_it_touches(matrix: Matrix, field: str, level2: bool) -> None:
    """`"RMSNorm",` moved from the replicated row to the column row of AutoMapping's registry of split
    kinds: the changed lines hold no layout word, the field they sit in does (probes-18). Column and
    replicated hand over the same norm weight at TP = 1; at TP = 2 the load asserts."""
    change = ChangedFile(
        MAPPING,
        diff_lines=('            "RMSNorm",', '            "RMSNorm",'),
        added_at=(1402,),
        scopes=("AutoMapping",),
        module_level=False,
        functions=("AutoMapping",),
        defaults=(ChangedDefault(MAPPING, 1399, "AutoMapping", field, "{...}", "{...}"),),
    )
    assert (2 in _levels(matrix, change)) is level2


PEFT_UTILS = "src/megatron/bridge/peft/utils.py"


@pytest.mark.parametrize(
    ("function", "removed", "added", "level2"),
    [
        # the build-time sync of a shared expert adapter across EP ranks dropped (probes-10)
        ("ParallelLinearAdapter.__init__", ("            self._synchronize_shared_expert_parameters()",), (), True),
        # its backward hook left on LoRA A only (probes-17): the changed line names no expert
        (
            "ParallelLinearAdapter._register_shared_expert_grad_sync_hooks",
            ("        for module in (self.linear_in, self.linear_out):",),
            ("        for module in (self.linear_in,):",),
            True,
        ),
        ("ParallelLinearAdapter.__init__", ("            self.half()",), (), False),
    ],
)
def test_keeping_a_shared_expert_adapter_one_across_ep_ranks_is_expert_parallel(
    matrix: Matrix, function: str, removed: tuple[str, ...], added: tuple[str, ...], level2: bool
) -> None:
    change = ChangedFile(
        PEFT_UTILS,
        diff_lines=(*removed, *added),
        scopes=tuple(function.split(".")),
        module_level=False,
        functions=(function,),
        added_at=tuple(range(1346, 1346 + len(added))),
        base_lines=(1346,),
    )
    assert (2 in _levels(matrix, change)) is level2
