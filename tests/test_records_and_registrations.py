"""What the records and the registrations say beyond a changed line's words (probes-20 and -21, first
contact): a MoE-only reading of a block that recorded MoE cells ran around and never entered
(refuted.py); a shared helper one bridge class of a two-bridge file calls (users.py by class); a mapping
class's conversion hook no cell recorded, whose namesakes the weight sync ran (unrun.ran_at); a class
name that says "safetensors" around code Level 0 ran at every build (unrun.kept_hits). Recorded-cell
doubles in the shape `data/runtime.json` gives (functions, lines, blob ids)."""

from __future__ import annotations

from dataclasses import replace

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import users
from verl_e2e.plan.branches import from_source
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.refuted import refuted
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.select import select

from .recorded_cells import recorded

LORA = "src/megatron/bridge/peft/lora.py"
TRANSFORM = """\
class LoRA:
    def transform(self, module, name):
        use_grouped_expert_adapter = self.share_expert_adapters is False
        kwargs = {}
        if use_grouped_expert_adapter:
            kwargs.update(num_local_experts=module.num_gemms)
        return build(module, **kwargs)
"""
CHANGED = 6  # the `num_local_experts=` line, under a test layout.py reads as the model's kind


def _cells(family: str, taken: set[int], cells: int = 3) -> list[Ran]:
    return recorded(LORA, TRANSFORM, {"LoRA.transform"}, taken, family=family, cells=cells)


def _change() -> ChangedFile:
    return ChangedFile(
        LORA,
        diff_lines=(
            "            kwargs.update(num_local_experts=module.num_gemms)",
            "            kwargs.update(num_local_experts=module.num_gemms - 1)",
        ),
        scopes=("transform",),
        module_level=False,
        functions=("LoRA.transform",),
        added_at=(CHANGED,),
        base_lines=(CHANGED,),
        old_blob=blob_id(TRANSFORM.encode())[:10],
        branches=tuple(from_source(TRANSFORM.encode(), [CHANGED], removed=False)),
    )


def test_a_moe_cell_that_ran_around_a_moe_only_block_and_skipped_it_refutes_the_layout(matrix: Matrix) -> None:
    change = _change()
    assert change.branches, "the block reads as a MoE-only branch"
    ran = _cells("qwen3_moe", {1, 2, 3, 4, 5, 7})
    why = refuted(matrix, change, ran)
    assert why is not None and "L0-lora-ddp-qwen3_moe" in why, why
    plan = select(matrix, [change], ran=ran)
    assert not plan.levels, plan.reasons
    assert any(f"{LORA}:{CHANGED}" in line for line in plan.unexecuted), plan.unexecuted


def test_a_dense_cell_or_a_cell_that_took_the_block_refutes_nothing(matrix: Matrix) -> None:
    assert refuted(matrix, _change(), _cells("qwen", {1, 2, 3, 4, 5, 7})) is None  # no experts: not its layout
    assert refuted(matrix, _change(), _cells("qwen3_moe", {1, 2, 3, 4, 5, 6, 7})) is None  # it took the line
    typed = replace(_change(), typed_conditions=True)  # also under a test on what a caller hands over
    assert refuted(matrix, typed, _cells("qwen3_moe", {1, 2, 3, 4, 5, 7})) is None
    assert 4 in select(matrix, [_change()], ran=_cells("qwen", {1, 2, 3, 4, 5, 7})).levels


TWO_BRIDGES = b"""from megatron.bridge.models.conversion.utils import experts_packed


@MegatronModelBridge.register_bridge(source="DemoMoeForCausalLM", target=GPTModel)
class DemoMoEBridge(MegatronModelBridge):
    def mapping_registry(self):
        packed = experts_packed(self.hf_pretrained, "model.layers.")
        return packed


@MegatronModelBridge.register_bridge(source="DemoForCausalLM", target=GPTModel)
class DemoBridge(MegatronModelBridge):
    def mapping_registry(self):
        return []
"""
UTILS = "src/megatron/bridge/models/conversion/utils.py"
BRIDGE = "src/megatron/bridge/models/demo/demo_bridge.py"


def test_a_helper_one_bridge_class_calls_serves_that_class_s_architecture() -> None:
    """probes-20: `moe_experts_stored_packed` is called by Qwen3.5's MoE bridge only, yet the file also
    registers the dense Qwen3.5, which the plan picked as the fewest-flags user."""
    found = users.architectures(
        UTILS, ("experts_packed",), b"def experts_packed(h, p):\n    return True\n", {BRIDGE: TWO_BRIDGES}
    )
    assert found == ("DemoMoeForCausalLM",), found
    shared = TWO_BRIDGES.replace(
        b"class DemoBridge(MegatronModelBridge):\n    def mapping_registry(self):\n        return []",
        b"class DemoBridge(MegatronModelBridge):\n    def mapping_registry(self):\n        return experts_packed(1, 2)",
    )
    both = users.architectures(
        UTILS, ("experts_packed",), b"def experts_packed(h, p):\n    return True\n", {BRIDGE: shared}
    )
    assert both == ("DemoForCausalLM", "DemoMoeForCausalLM"), both


PARAM_MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"


def _mappings(classes: int) -> list[Ran]:
    names = frozenset(f"Kind{i}Mapping.megatron_to_hf" for i in range(classes))
    return [Ran(0, "lora-ddp", "qwen", "b", "v", {PARAM_MAPPING: names})]


def _export_change() -> ChangedFile:
    function = "MambaInProjMapping.megatron_to_hf"
    return ChangedFile(
        PARAM_MAPPING,
        diff_lines=(
            "        C_shard_idx = torch.arange(d_ssm) + 2 * d_inner + d_ssm",
            "        C_shard_idx = torch.arange(d_ssm) + 2 * d_inner",
        ),
        scopes=("megatron_to_hf",),
        module_level=False,
        functions=(function,),
    )


def test_a_mapping_hook_no_cell_recorded_runs_where_its_namesakes_ran(matrix: Matrix) -> None:
    """probes-20: a Mamba mapping's export (no hybrid family recorded) drew Level 1 from the export path
    rule, which a hook the weight sync runs at every step does not need."""
    assert 1 not in select(matrix, [_export_change()], ran=_mappings(3)).levels
    assert 1 in select(matrix, [_export_change()], ran=_mappings(2)).levels


STATE = "src/megatron/bridge/models/hf_pretrained/state.py"


def _load_change(function: str) -> ChangedFile:
    return ChangedFile(
        STATE,
        diff_lines=("        if remaining_keys:", "        if not remaining_keys:"),
        scopes=tuple(function.split(".")),
        module_level=False,
        functions=(function,),
    )


def _state_cells(function: str) -> list[Ran]:
    return [Ran(level, "v", "qwen", "b", "v", {STATE: frozenset({function})}) for level in (0, 1)]


def test_a_checkpoint_word_in_a_class_name_adds_no_save_level_to_code_every_build_runs(matrix: Matrix) -> None:
    read = "SafeTensorsStateSource.load_tensors"
    assert 1 not in select(matrix, [_load_change(read)], ran=_state_cells(read)).levels
    own = "PEFT.set_params_to_save"  # the function's own name says what a save keeps
    assert 1 in select(matrix, [_load_change(own)], ran=_state_cells(own)).levels


ADAPTER = "src/megatron/bridge/peft/utils.py"
REPLICA = """\
class ParallelLinearAdapter:
    def _set_expert_replica_ids(self, state):
        for value in state.values():
            replica_id = value.replica_id
            if isinstance(replica_id, int):
                replica_id = (0, 0, replica_id)
            value.replica_id = replica_id
"""


def _replica_change(unrecorded: bool) -> ChangedFile:
    function = "ParallelLinearAdapter._set_expert_replica_ids"
    return ChangedFile(
        ADAPTER,
        diff_lines=(
            "                replica_id = (0, 0, replica_id)",
            "                replica_id = (replica_id, 0, 0)",
        ),
        scopes=("_set_expert_replica_ids",),
        module_level=False,
        functions=(function,),
        added_at=(6,),
        base_lines=(6,),
        old_blob=blob_id(REPLICA.encode())[:10],
        unrecorded_conditions=unrecorded,
        typed_conditions=unrecorded,
    )


def _saving_cells() -> list[Ran]:
    function = "ParallelLinearAdapter._set_expert_replica_ids"
    return recorded(
        ADAPTER, REPLICA, {function}, {1, 2, 3, 4, 5, 7}, family="qwen3_moe", level=1, variant="save-resume"
    )


def test_lines_under_a_handed_over_type_run_where_their_function_ran(matrix: Matrix) -> None:
    """probes-22: an integer replica id (another checkpointing version's) put in the wrong slot; the saving
    cell ran the function with tuple ids and never took the line, which says nothing of the next library."""
    plan = select(matrix, [_replica_change(unrecorded=True)], ran=_saving_cells())
    assert 1 in plan.levels, plan.reasons
    assert not any(f"{ADAPTER}:6" in line for line in plan.unexecuted), plan.unexecuted
    settled = select(matrix, [_replica_change(unrecorded=False)], ran=_saving_cells())
    assert 1 not in settled.levels and any("no recorded cell ran" in line for line in settled.unexecuted)


def test_a_mapping_helper_runs_where_other_mappings_hooks_ran(matrix: Matrix) -> None:
    change = replace(_export_change(), functions=("MambaConv1dMapping.get_shard_idx",), scopes=("get_shard_idx",))
    assert 1 not in select(matrix, [change], ran=_mappings(3)).levels
    assert 1 in select(matrix, [change], ran=_mappings(2)).levels
