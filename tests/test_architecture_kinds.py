"""Family choice by architecture kind: shared code that only some architectures run goes to a family
that has it (not the dense default, which would never execute it)."""

from __future__ import annotations

from verl_e2e.plan.cells import expand
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"


def _change(path: str, line: str, scopes: tuple[str, ...]) -> ChangedFile:
    return ChangedFile(path, diff_lines=(line,), scopes=scopes, module_level=False, functions=(".".join(scopes),))


def test_a_mamba_mapping_change_runs_the_hybrid_family(matrix) -> None:
    change = _change(
        MAPPING, "+        conv = self.mamba_conv1d_split(weight)", ("MambaConv1dMapping", "hf_to_megatron")
    )
    sel = select(matrix, [change])
    assert "nemotronh" in sel.targets[4]
    assert "nemotronh" in sel.targets[0]  # its Level 0 comes along
    cells = {c.id for c in expand(matrix, sel)}
    assert "L4-custom-layers-nemotronh" in cells and "L4-custom-layers-qwen" not in cells


def test_a_gated_delta_change_runs_a_family_with_gated_deltanet_layers(matrix) -> None:
    change = _change(MAPPING, "+        q, k, v = split_gdn_in_proj(x)", ("GDNLinearMapping", "megatron_to_hf"))
    sel = select(matrix, [change])
    assert matrix.defaults.kind_families["gdn"] in sel.targets[4]


def test_a_lora_change_to_layer_code_keeps_lora_in_the_custom_layers_cell(matrix) -> None:
    change = _change(
        "src/megatron/bridge/peft/lora_layers.py",
        "+        out = self.core_attention(x) * scale",
        ("LoRALinear", "forward"),
    )
    sel = select(matrix, [change])
    (cell,) = [c for c in expand(matrix, sel) if c.variant == "custom-layers"]
    assert cell.phases[0].env["LORA_RANK"] == "4"  # the base's rank, not the full-parameter 0
    assert any("trained with LoRA adapters" in x for x in cell.limitations)
    assert not any("full-parameter" in x for x in cell.limitations)


def test_a_layer_change_outside_lora_stays_full_parameter(matrix) -> None:
    change = _change(
        "src/megatron/bridge/models/gpt_provider.py",
        "+    spec.submodules.core_attention = Attn",
        ("default_layer_spec",),
    )
    sel = select(matrix, [change])
    (cell,) = [c for c in expand(matrix, sel) if c.variant == "custom-layers"]
    assert cell.phases[0].env["LORA_RANK"] == "0"


def test_moe_quantisation_code_runs_qat_on_the_moe_model(matrix) -> None:
    change = _change(
        "src/megatron/bridge/models/conversion/quant_mapping.py",
        "+        amax = self.grouped_expert_amax(num_experts)",
        ("MoeAmaxFanoutMapping", "megatron_to_hf"),
    )
    sel = select(matrix, [change])
    cells = {c.variant: c for c in expand(matrix, sel) if c.level == 4}
    family = matrix.families[cells["qat"].family]
    assert family.has("moe") and cells["qat"].model == family.model.model  # the MoE family that ran for real


HEADS = "src/megatron/bridge/models/common/heads.py"


def _ran(family: str, functions: dict[str, frozenset[str]]):  # type: ignore[no-untyped-def]
    from verl_e2e.plan.runtime import Ran

    return Ran(0, "lora-ddp", family, "b" * 40, "v" * 40, functions)


def test_code_its_users_family_ran_beside_other_families_is_shared_in_practice(matrix) -> None:
    """Code one family's model files name (Ling's MTP head uses the last-layer linear) but every critic runs
    is shared: once recorded cells of other families ran it, the users rule stays out, even when the
    family's own cell is recorded running it too (it was not, before the twenty-first batch kept one)."""
    change = ChangedFile(
        HEADS,
        diff_lines=("+        if getattr(self, 'perform_initialization', True):",),
        scopes=("LinearForLastLayer", "reset_parameters"),
        module_level=False,
        functions=("LinearForLastLayer.reset_parameters",),
        serves=("BailingMoeV2ForCausalLM",),
    )
    ran = {HEADS: frozenset({"LinearForLastLayer.reset_parameters"})}
    alone = select(matrix, [change])
    assert "bailing" in alone.targets[0] and "bailing" in alone.targets[4]  # the users rule, without records
    for records in ([_ran("qwen", ran)], [_ran("qwen", ran), _ran("bailing", ran)]):
        sel = select(matrix, [change], ran=records)
        rules = {r.rule for reasons in sel.reasons.values() for r in reasons}
        assert "shared-code-users" not in rules, sel.reasons
        assert 4 not in sel.levels
