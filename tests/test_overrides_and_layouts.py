"""What verl does to every provider decides what a change can reach: values it overrides never reach a
cell's model, and a level whose layouts cannot take any changed line proves nothing about it, whatever
its path rules or words say. Planned from real diffs of Bridge 067f987's files (text as in the tree)."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import overrides
from verl_e2e.plan.branches import from_source
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

from .unified_diffs import one_hunk

QWEN3_MOE = "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py"
MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
LOGIT = "src/megatron/bridge/models/logit_dtype.py"


def _hunk(path: str, header: str, lines: list[str], start: int = 60) -> str:
    return one_hunk(path, header, lines, start)


def _plan(matrix: Matrix, tmp_path: Path, diff: str, path: str) -> dict[str, object]:
    (tmp_path / "d.diff").write_text(diff, encoding="utf-8")
    (tmp_path / "f.txt").write_text(f"M\t{path}\n", encoding="utf-8")
    return make_plan(
        PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix
    ).to_json()


LOAD_BALANCING = [
    "         provider.moe_grouped_gemm = True",
    '-        provider.moe_router_load_balancing_type = "aux_loss"',
    '+        provider.moe_router_load_balancing_type = "seq_aux_loss"',
    "         provider.moe_aux_loss_coeff = 1e-3",
]


def test_a_bridge_value_verl_overrides_reaches_no_cell_and_the_plan_says_so(matrix: Matrix, tmp_path: Path) -> None:
    plan = _plan(
        matrix, tmp_path, _hunk(QWEN3_MOE, "class Qwen3MoEBridge(MegatronModelBridge):", LOAD_BALANCING), QWEN3_MOE
    )
    assert plan["levels"] == []
    (note,) = plan["context"]["unexecuted"]  # type: ignore[index]
    assert "moe_router_load_balancing_type" in note and "verl's Megatron engine sets on every provider" in note


def test_a_value_verl_keeps_still_runs(matrix: Matrix, tmp_path: Path) -> None:
    """The router's z-loss applies whatever the balancing type (unlike the aux-loss coefficient)."""
    coeff = [line.replace("moe_router_load_balancing_type", "moe_z_loss_coeff") for line in LOAD_BALANCING[1:3]]
    plan = _plan(matrix, tmp_path, _hunk(QWEN3_MOE, "class Qwen3MoEBridge(MegatronModelBridge):", coeff), QWEN3_MOE)
    assert 0 in plan["levels"] and 4 in plan["levels"]  # type: ignore[operator]


def test_only_assignments_before_verls_overrides_count() -> None:
    path = "src/megatron/bridge/models/gpt_provider.py"
    assert overrides.overridden(path, ["    sequence_parallel: bool = True"], ("GPTModelProvider",)) == (
        "sequence_parallel",
    )
    assert overrides.overridden(path, ["        tensor_model_parallel_size=2,"], ("provider_bridge",))
    # verl's MTP check drops the MTP block or passes its own factor: a bridge's factor never trains
    # ... and an aux-loss coefficient, which verl's "none" balancing type leaves unread
    kimi = "src/megatron/bridge/models/kimi/kimi_k2_bridge.py"
    assert overrides.overridden(kimi, ["        provider.moe_aux_loss_coeff = 1e-2"], ("provider_bridge",))
    qwen35 = "src/megatron/bridge/models/qwen/qwen35_bridge.py"
    assert overrides.overridden(qwen35, ["        provider.mtp_loss_scaling_factor = 0.3"], ("_apply",)) == (
        "mtp_loss_scaling_factor",
    )
    # a keyword argument in a function that builds no provider or config is that function's own argument:
    # verl's override never reaches the value head's `sequence_parallel` (seventeenth probe set)
    heads = "src/megatron/bridge/models/common/heads.py"
    assert overrides.overridden(heads, ["        sequence_parallel=False,"], ("create_value_head_hook",)) == ()
    assert overrides.overridden(heads, ["        sequence_parallel=False,"], ("provider_bridge",))
    # finalisation runs after the overrides; a provider's own methods and helpers may too
    assert overrides.overridden(path, ["        self.sequence_parallel = False"], ("finalize",)) == ()
    assert overrides.overridden(path, ["    config.expert_tensor_parallel_size = 1"], ("_set_default",)) == ()
    # a local variable, another field alongside, or code outside the model package
    assert overrides.overridden(path, ["    tensor_model_parallel_size = 2"], ("f",)) == ()
    assert (
        overrides.overridden(path, ["    sequence_parallel: bool = True", "    hidden_dropout: float = 0.1"], ()) == ()
    )
    assert (
        overrides.overridden("src/megatron/bridge/training/config.py", ["    sequence_parallel: bool = True"], ()) == ()
    )


SCATTER_SOURCE = b"""
class MegatronParamMapping:
    def scatter_to_tp_ranks(self, splits, output_shape, dtype, device, src_rank=0):
        if self.tp_size == 1:
            return splits[0].to(device=device, dtype=dtype) if splits else None
        output = torch.empty(output_shape, dtype=dtype, device=device)
        global_src = src_rank
        return output
"""


def _scatter_change(text: str) -> ChangedFile:
    line = next(i for i, t in enumerate(SCATTER_SOURCE.decode().splitlines(), 1) if text in t)
    branches = tuple(from_source(SCATTER_SOURCE, [line], removed=False))
    return ChangedFile(
        MAPPING, diff_lines=(f"        {text}",), added_at=(line,), module_level=False, branches=branches
    )


def test_a_level_whose_layout_cannot_take_the_line_gets_nothing_from_paths(matrix: Matrix) -> None:
    """The HF export rule asks Level 1 for param_mapping.py; Level 1 runs at TP=1, where a line after
    `if self.tp_size == 1: return` never runs. Level 2 (TP=2) takes it; Level 0 stays, as the base."""
    sel = select(matrix, [_scatter_change("global_src = src_rank")])
    assert sel.levels == (0, 2), sel.reasons
    unguarded = _scatter_change("return splits[0]")  # under the guard itself: Level 0 and 1 take it
    assert 1 in select(matrix, [unguarded]).levels


def test_a_dtype_written_on_a_logits_line_is_a_numerics_default(matrix: Matrix, tmp_path: Path) -> None:
    fallback = [
        '     """Return a guarded ``logit_dtype`` constructor keyword."""',
        '-    return optional_dtype_kwarg(constructor, "logit_dtype", dtype)',
        '+    return optional_dtype_kwarg(constructor, "logit_dtype", dtype if dtype is not None else torch.float32)',
    ]
    plan = _plan(matrix, tmp_path, _hunk(LOGIT, "def logit_dtype_kwarg(", fallback), LOGIT)
    assert 5 in plan["levels"]  # type: ignore[operator]
    assert any(r["rule"] == "aspect:numerics-defaults" for r in plan["reasons"]["5"])  # type: ignore[index]


def test_the_hf_dtype_translation_sets_values_verl_replaces() -> None:
    """verl hands apply_overrides_and_finalize its own param dtype, which rewrites params_dtype, fp16 and
    bf16: the HF config's translation into provider keywords sets nothing a cell's model keeps."""
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    scope = ("MegatronModelBridge._hf_config_to_megatron_kwargs",)
    fp16 = ['        provider_kwargs["fp16"] = params_dtype == torch.bfloat16']
    assert overrides.overridden(path, fp16, scope) == ("fp16",)
    window = ['        provider_kwargs["window_size"] = (hf_config.sliding_window, 0)']
    assert overrides.overridden(path, window, scope) == ()


VALUE_HEAD = [
    '         output_layer_path="output_layer",',
    "         bias=False,",
    "-        output_in_fp32=True,",
    "+        output_in_fp32=False,",
    "     )",
]
EPS_ROW = [
    '         ("max_position_embeddings", "seq_length"),',
    '-        ("rms_norm_eps", "layernorm_epsilon"),',
    '+        ("layer_norm_eps", "layernorm_epsilon"),',
    '         ("initializer_range", "init_method_std"),',
]


def test_an_output_kept_out_of_fp32_or_a_norm_epsilon_mapping_is_a_numerics_default(
    matrix: Matrix, tmp_path: Path
) -> None:
    """Both change what every step computes without an error: the critic's values in bf16, a norm epsilon
    that falls back to the provider's default because the HF key is misspelled. Level 5 shows it."""
    heads = "src/megatron/bridge/models/common/heads.py"
    plan = _plan(matrix, tmp_path, _hunk(heads, "def create_value_head_hook(hidden_size: int,", VALUE_HEAD), heads)
    assert {0, 5} <= set(plan["levels"])  # type: ignore[arg-type]
    bridge = "src/megatron/bridge/models/conversion/model_bridge.py"
    plan = _plan(matrix, tmp_path, _hunk(bridge, "class MegatronModelBridge(", EPS_ROW, 463), bridge)
    assert 5 in plan["levels"]  # type: ignore[operator]
    renamed = [
        row.replace('"layer_norm_eps"', '"rms_norm_eps"').replace("layernorm_epsilon", "seq_length") for row in EPS_ROW
    ]
    plan = _plan(matrix, tmp_path, _hunk(bridge, "class MegatronModelBridge(", renamed, 463), bridge)
    assert 5 not in plan["levels"]  # type: ignore[operator]


def test_dropping_the_megatron_fsdp_wrapper_from_an_unwrap_list_runs_level3(matrix: Matrix, tmp_path: Path) -> None:
    """Only a Megatron-FSDP cell wraps a chunk in MegatronFSDP; unwrapping that stops there builds the
    conversion tasks against the wrong module tree. The class name is the FSDP word on the line."""
    utils = "src/megatron/bridge/models/conversion/utils.py"
    lines = ["             Float16Module,", "-            MegatronFSDP,", "         )"]
    plan = _plan(matrix, tmp_path, _hunk(utils, "def unwrap_model(model, module_instances=None):", lines, 56), utils)
    assert 3 in plan["levels"]  # type: ignore[operator]


def test_loras_disabled_sequence_parallel_comm_is_sequence_parallel_off() -> None:
    """`disable_sequence_parallel_comm = not config.sequence_parallel`: a branch under its negation runs
    only where SP is on (TP > 1, Level 2), never in a TP=1 cell."""
    from verl_e2e.plan import layout

    node = layout.parse("not self.disable_sequence_parallel_comm and self.input_is_parallel")
    assert node is not None
    assert not layout.can_hold(node, True, layout.Layout(tp=1))
    assert layout.can_hold(node, True, layout.Layout(tp=2))
    assert layout.dimension("sequence_parallel_input_regather") is None  # a LoRA option, not the layout


def test_lora_defaults_verl_passes_reach_no_adapter_and_the_scale_it_computes_is_numerics(
    matrix: Matrix, tmp_path: Path
) -> None:
    """verl's create_peft call passes rank, alpha, dropout, modules and dropout position: a dataclass
    default of one of them is said, not run; the alpha the adapter is built with is its scale (Level 5)."""
    lora = "src/megatron/bridge/peft/lora.py"
    default = [
        '-    dropout_position: Literal["pre", "post"] = "pre"',
        '+    dropout_position: Literal["pre", "post"] = "post"',
    ]
    plan = _plan(matrix, tmp_path, _hunk(lora, "class LoRA(PEFT, ModuleMatcher):", default, 146), lora)
    assert plan["levels"] == []
    assert any("verl passes to every LoRA" in n for n in plan["context"]["unexecuted"])  # type: ignore[union-attr]
    assert overrides.overridden(lora, ["        dropout: float = 0.1,"], ("ParallelLinearAdapter.__init__",)) == ()
    scale = [
        "                 model_parallel_config=module.config,",
        "-                alpha=self.alpha,",
        "+                alpha=self.dim,",
    ]
    plan = _plan(
        matrix, tmp_path, _hunk(lora, "    def transform(self, module, name=None, prefix=None):", scale, 234), lora
    )
    assert 5 in plan["levels"]  # type: ignore[operator]


def test_the_dtype_flags_verl_sets_are_numerics_where_they_are_set_and_overridden_where_providers_set_them(
    matrix: Matrix, tmp_path: Path
) -> None:
    provider = "src/megatron/bridge/models/model_provider.py"
    swap = [
        "             self.params_dtype = dtype",
        "-            self.fp16 = dtype == torch.float16",
        "+            self.fp16 = dtype == torch.bfloat16",
    ]
    plan = _plan(
        matrix, tmp_path, _hunk(provider, "class ModelProviderMixin(abc.ABC, Generic[ModelT]):", swap, 156), provider
    )
    assert 5 in plan["levels"]  # type: ignore[operator]
    qwen2 = "src/megatron/bridge/models/qwen/qwen2_bridge.py"
    autocast = ["-        provider.autocast_dtype = torch.bfloat16", "+        provider.autocast_dtype = torch.float16"]
    plan = _plan(matrix, tmp_path, _hunk(qwen2, "class Qwen2Bridge(MegatronModelBridge):", autocast, 55), qwen2)
    assert plan["levels"] == []


ACTIVATIONS = "src/megatron/bridge/utils/activation_map.py"


def test_an_activation_name_resolving_to_another_function_is_a_learning_signal_change(
    matrix: Matrix, tmp_path: Path
) -> None:
    """`"silu": F.gelu` keeps every shape: the trainer's MLP is GeGLU while vLLM (which reads the HF name
    itself) computes SwiGLU; nothing raises, so Level 5 joins Level 0. A comment there selects nothing."""
    swap = ['     "relu": F.relu,', '-    "silu": F.silu,', '+    "silu": F.gelu,', '     "sigmoid": F.sigmoid,']
    plan = _plan(
        matrix, tmp_path, _hunk(ACTIVATIONS, "ACTIVATION_FUNC_MAP: dict[str, Callable] = {", swap), ACTIVATIONS
    )
    assert 5 in plan["levels"]  # type: ignore[operator]
    assert any(r["rule"] == "aspect:activation-map" for r in plan["reasons"]["5"])  # type: ignore[index]
    note = ['     "relu": F.relu,', "-    # the gated ones", "+    # the gated activations", '     "silu": F.silu,']
    quiet = _plan(
        matrix, tmp_path, _hunk(ACTIVATIONS, "ACTIVATION_FUNC_MAP: dict[str, Callable] = {", note), ACTIVATIONS
    )
    assert 5 not in quiet["levels"]  # type: ignore[operator]


def test_an_export_split_that_reverses_the_query_groups_is_a_weight_layout_change(
    matrix: Matrix, tmp_path: Path
) -> None:
    """Reversing the order the query groups are gathered in keeps the shape and raises nothing: Level 5.
    (`num_query_groups` also draws Level 2: real PRs' labellers want TP's group split checked.)"""
    rows = [
        "             torch.arange(total_heads_per_group * i, total_heads_per_group * i + heads_per_group)",
        "-            for i in range(num_query_groups)",
        "+            for i in reversed(range(num_query_groups))",
        "         ]",
    ]
    plan = _plan(matrix, tmp_path, _hunk(MAPPING, "def split_qkv_weights(", rows, 3330), MAPPING)
    assert 5 in plan["levels"], plan["reasons"]  # type: ignore[operator]
    assert any(r["rule"] == "aspect:weight-layout" for r in plan["reasons"]["5"])  # type: ignore[index]
