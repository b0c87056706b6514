"""Words of a changed line that say where it can differ, read from a diff (probes-20 and -21): a rank's
share put for the whole (`local_dim` for `global_dim`) differs only where a dimension is sharded; a
tensor taken for its same-shaped sibling (`k` for `v`) trains on wrong weights without an error; a
RoPE interpolation factor or the HF rope base read by the helper every bridge shares changes every step;
`num_query_groups` counts for the layout where it is set, not where a conversion reads it; `pp_group`
is a parallel group as `tp_group` is."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.build import PlanRequest, make_plan

from .unified_diffs import one_hunk

MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
PROVIDER = "src/megatron/bridge/models/gpt_provider.py"
COMPAT = "src/megatron/bridge/models/conversion/transformers_compat.py"
NORM = "src/megatron/bridge/models/minimax_m2/minimax_m2_provider.py"


def _rules(matrix: Matrix, tmp_path: Path, path: str, header: str, lines: list[str]) -> dict[int, set[str]]:
    (tmp_path / "d.diff").write_text(one_hunk(path, header, lines, 80), encoding="utf-8")
    (tmp_path / "f.txt").write_text(f"M\t{path}\n", encoding="utf-8")
    plan = make_plan(PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix)
    return {lv: {r.rule for r in rs} for lv, rs in plan.selection.reasons.items()}


@pytest.mark.parametrize(
    ("old", "new", "sharded"),
    [
        ("        variance = local_ss / self.global_dim", "        variance = local_ss / self.local_dim", True),
        ("        n = global_expert_number + 1", "        n = global_expert_number + 2", False),  # read, unchanged
        ("        variance = local_ss / self.global_dim", "        variance = local_ss / (self.global_dim + 1)", False),
    ],
)
def test_a_share_put_for_the_whole_is_a_sharded_extent(
    matrix: Matrix, tmp_path: Path, old: str, new: str, sharded: bool
) -> None:
    rules = _rules(matrix, tmp_path, NORM, "def forward(self, x):", [f"-{old}", f"+{new}"])
    assert ("aspect:sharded-extent" in rules.get(2, set())) is sharded, rules


@pytest.mark.parametrize(
    ("old", "new", "swap"),
    [
        ("    v = v.view(num_query_groups, head_size)", "    v = k.view(num_query_groups, head_size)", True),
        ('    k="model.layers.*.self_attn.k_proj.weight",', '    k="model.layers.*.self_attn.v_proj.weight",', True),
        ("    gate = w.chunk(2)[0]", "    up = w.chunk(2)[0]", True),
        ("    v = v.view(num_query_groups, head_size)", "    v = x.view(num_query_groups, head_size)", False),
        # probes-25: Q is wider than K under grouped heads, so K's rows read from q_proj fail at load
        ('    k="model.layers.*.self_attn.k_proj.weight",', '    k="model.layers.*.self_attn.q_proj.weight",', False),
        ("    v = v.view(num_query_groups, head_size)", "    v = v.reshape(num_query_groups, head_size)", False),
    ],
)
def test_a_tensor_taken_for_its_sibling_gets_the_learning_signal_level(
    matrix: Matrix, tmp_path: Path, old: str, new: str, swap: bool
) -> None:
    rules = _rules(matrix, tmp_path, MAPPING, "def merge_qkv_biases(config, q, k, v):", [f"-{old}", f"+{new}"])
    assert ("aspect:swapped-operands" in rules.get(5, set())) is swap, rules
    assert "aspect:parallel-layout" not in rules.get(2, set()), rules  # `num_query_groups` read, not set


def test_num_query_groups_set_is_parallel_layout(matrix: Matrix, tmp_path: Path) -> None:
    lines = ['-    configs["num_query_groups"] = hf_config.num_attention_heads',
             '+    configs["num_query_groups"] = hf_config.num_key_value_heads']  # fmt: skip
    rules = _rules(
        matrix, tmp_path, "src/megatron/bridge/models/deepseek/common.py", "def get_common_configs():", lines
    )
    assert "aspect:parallel-layout" in rules.get(2, set()), rules


def test_a_local_or_global_layout_choice_is_parallel_layout(matrix: Matrix, tmp_path: Path) -> None:
    """probes-30 `tp-chunked-conv1d-load-uses-local-layout`: the rank's widths and the whole one's agree
    at TP = 1, so only Level 2 loads the conv1d differently."""
    lines = ["-            shard_idx = self.get_shard_idx(config, local_tp=False)",
             "+            shard_idx = self.get_shard_idx(config, local_tp=True)"]  # fmt: skip
    rules = _rules(matrix, tmp_path, MAPPING, "def hf_to_megatron(self, hf_weights, megatron_module):", lines)
    assert "aspect:parallel-layout" in rules.get(2, set()), rules


def test_the_pp_group_a_mapping_takes_is_parallel_layout(matrix: Matrix, tmp_path: Path) -> None:
    lines = ['-            ("pp_group", "pp"),', '+            ("pp_group", "tp"),']
    rules = _rules(matrix, tmp_path, MAPPING, "def set_process_groups_from_pg_collection(self, pg):", lines)
    assert "aspect:parallel-layout" in rules.get(2, set()), rules


@pytest.mark.parametrize(
    ("path", "header", "lines"),
    [
        (PROVIDER, "class GPTModelProvider(TransformerConfig):",
         ["-    seq_len_interpolation_factor: Optional[float] = None",
          "+    seq_len_interpolation_factor: Optional[float] = 2.0"]),
        (COMPAT, "def rope_theta_from_hf(config) -> float:",
         ['-            rope_theta = config.rope_parameters["rope_theta"]',
          '+            rope_theta = config.rope_parameters["rope_base"]']),
    ],
)  # fmt: skip
def test_rope_options_every_family_reads_get_level_5(matrix: Matrix, tmp_path: Path, path: str, header: str,
                                                     lines: list[str]) -> None:  # fmt: skip
    rules = _rules(matrix, tmp_path, path, header, lines)
    assert "aspect:rope-defaults" in rules.get(5, set()), rules


def test_a_swap_among_a_family_bridges_config_values_is_its_build_not_a_weight_swap(matrix: Matrix) -> None:
    """probes-14: `rotary_dim / head_dim` turned around in MiniMax-M2's `provider_bridge` is a config value the
    family's Level 0 and 4 build with; the same swap in its `mapping_registry` trades weights."""
    from verl_e2e.plan import runtime, surface
    from verl_e2e.plan.changes import ChangedFile
    from verl_e2e.plan.select import select

    def change(function: str) -> ChangedFile:
        return ChangedFile(
            "src/megatron/bridge/models/minimax_m2/minimax_m2_bridge.py",
            diff_lines=("            x = rotary_dim / head_dim", "            x = head_dim / rotary_dim"),
            scopes=(function.rsplit(".", maxsplit=1)[-1],),
            module_level=False,
            functions=(function,),
            added_at=(152,),
            base_lines=(152,),
        )

    ran = runtime.shipped()
    values = select(matrix, [change("MiniMaxM2Bridge.provider_bridge")], surface=surface.shipped(), ran=ran)
    assert 5 not in values.levels and 4 in values.levels, values.reasons
    weights = select(matrix, [change("MiniMaxM2Bridge.mapping_registry")], surface=surface.shipped(), ran=ran)
    assert 5 in weights.levels, weights.reasons


@pytest.mark.parametrize(
    ("old", "new", "split"),
    [
        ("                ColumnParallelMapping(", "                RowParallelMapping(", True),
        ("                ColumnParallelMapping(", "                ColumnParallelMapping(  # mixer", False),
        ("                AutoMapping(", "                AutoMapping(  # mixer", False),
    ],
)
def test_a_mapping_given_another_split_kind_is_read_as_a_tp_change(
    matrix: Matrix, tmp_path: Path, old: str, new: str, split: bool
) -> None:
    """probes-23: Falcon-H1's per-head Mamba parameters mapped row-parallel instead of column-parallel load
    the same at TP = 1 and hand every rank the whole tensor at TP = 2."""
    bridge = "src/megatron/bridge/models/falcon_h1/falconh1_bridge.py"
    rules = _rules(matrix, tmp_path, bridge, "def mapping_registry(self):", [f"-{old}", f"+{new}"])
    assert ("aspect:mapping-split-kind" in rules.get(2, set())) is split, rules


@pytest.mark.parametrize(
    ("line", "level5"),
    [
        ("        self.language_model.register_load_state_dict_post_hook(_ignore_extra_state)", False),
        ("        handle = module.register_forward_hook(_scale_output)", True),
        ("        param.register_post_accumulate_grad_hook(_reduce)", True),
    ],
)
def test_a_hook_on_the_training_pass_computes_a_state_dict_hook_does_not(
    matrix: Matrix, tmp_path: Path, line: str, level5: bool
) -> None:
    """probes-25: a load-state-dict post-hook dropped from Nemotron-Omni's language model changes what a resume
    warns about, not what a step computes."""
    path = "src/megatron/bridge/models/nemotron_omni/modeling_nemotron_omni.py"
    rules = _rules(matrix, tmp_path, path, "def __init__(self, config):", [f"+{line}"])
    assert ("aspect:learning-numerics" in rules.get(5, set())) is level5, rules


@pytest.mark.parametrize(
    ("old", "new", "layout"),
    [
        # dev c212: a builder passing `vp_stage` through; no PR cell runs virtual pipeline stages
        ("        return super().build_model(pg_collection, pre_process, post_process)",
         "        return super().build_model(pg_collection, pre_process, post_process, vp_stage)", False),
        # dev c074: CP = 1 in every cell, the weekly layouts' included
        ("        assert self.config.context_parallel_size == 1", "        if self.config.context_parallel_size != 1:", False),
        ("        n = self.virtual_pipeline_model_parallel_size", "        n = self.virtual_pipeline_model_parallel_size or 1",
         False),
        # the same words beside a PP one still count
        ("        n = self.pipeline_model_parallel_size", "        n = self.pipeline_model_parallel_size or 1", True),
        ("        r = get_pipeline_model_parallel_rank()", "        r = get_pipeline_model_parallel_rank() + 1", True),
        # dev c220: a layer's pipeline offset (0 at PP = 1) and a pg collection's PP group
        ("        n = layer_number - 1",
         "        n = layer_number + get_transformer_layer_offset(config, vp_stage, get_pg_rank(pg.pp)) - 1", True),
        ("        rank = get_pg_rank(pg_collection.tp)", "        rank = get_pg_rank(pg_collection.pp)", True),
    ],
)  # fmt: skip
def test_only_layouts_a_pr_cell_runs_select_level_2(
    matrix: Matrix, tmp_path: Path, old: str, new: str, layout: bool
) -> None:
    """Level 2's PR cell runs TP = PP = 2 with VPP off and CP = 1: a virtual-pipeline or context-parallel
    name alone would run there as it runs at Level 0, so it selects nothing."""
    rules = _rules(matrix, tmp_path, PROVIDER, "def provide(self, pre_process=None):", [f"-{old}", f"+{new}"])
    assert ("aspect:parallel-layout" in rules.get(2, set())) is layout, rules


def test_a_local_name_for_the_global_one_is_a_sharded_extent(matrix: Matrix, tmp_path: Path) -> None:
    """probes-12 `conversion-task-module-lookup-by-global-name`: the rank's parameter name and the global one
    agree on one rank; at PP = 2 the layers are renumbered, so the lookup fails only at Level 2."""
    lines = ["-        module, weights = get_module_and_param_from_name(model, local_name, vp_stage)",
             "+        module, weights = get_module_and_param_from_name(model, global_name, vp_stage)"]  # fmt: skip
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    rules = _rules(matrix, tmp_path, path, "def build_conversion_tasks(self, hf_pretrained, megatron_model):", lines)
    assert "aspect:sharded-extent" in rules.get(2, set()), rules


@pytest.mark.parametrize(
    ("old", "new", "selects"),
    [
        # dev c090: fields of a TypedDict of keyword arguments, declared with a type and no value
        ("        tensor_model_parallel_size: int", "        tensor_model_parallel_size: int | None", False),
        ("        expert_model_parallel_size: int", "        expert_model_parallel_size: int | None", False),
        ("        pg_collection: ProcessGroupCollection,", "        pg_collection: ProcessGroupCollection | None,", False),
        ("        n = 1", "        n = self.tensor_model_parallel_size", True),
        ("        n = 1", "        n = self.expert_model_parallel_size", True),
    ],
)  # fmt: skip
def test_a_typed_name_declared_without_a_value_sets_no_layout(
    matrix: Matrix, tmp_path: Path, old: str, new: str, selects: bool
) -> None:
    rules = _rules(matrix, tmp_path, PROVIDER, "def provide(self, pre_process=None):", [f"-{old}", f"+{new}"])
    layout = {"aspect:parallel-layout", "aspect:expert-parallel"} & rules.get(2, set())
    assert bool(layout) is selects, rules
    if "expert" in new:
        assert ("aspect:moe" in rules.get(4, set())) is selects, rules
