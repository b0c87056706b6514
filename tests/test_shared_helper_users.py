"""Who runs a shared mapping that only some bridges build (probes 16, 24, 26, 30): QKVGMapping lives in
`param_mapping.py`, every model imports that file, and only the Step-3.5 bridge builds the class. A shared
file that only asks `isinstance(mapping, QKVGMapping)` builds nothing, and a helper that only QKVGMapping
calls (`split_qkvg`) serves whoever builds QKVGMapping; and a field only multi-latent attention has runs on
the MLA family. The model files are doubles in the shape
`plan --repo` reads them at head: path -> source bytes."""

from __future__ import annotations

import pytest

from verl_e2e.config.aspects import find
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import users

PATH = "src/megatron/bridge/models/conversion/param_mapping.py"
SOURCE = b"""def split_qkvg(x):
    return x.chunk(4)


class QKVGMapping:
    def megatron_to_hf(self, w):
        return split_qkvg(w)


class QKVMapping:
    def megatron_to_hf(self, w):
        return w
"""
STEP = "src/megatron/bridge/models/stepfun/step35_bridge.py"
STEP_SOURCE = (
    b"from megatron.bridge.models.conversion.param_mapping import QKVGMapping\n\n\n"
    b"@MegatronModelBridge.register_bridge(source='Step3p5ForCausalLM')\nclass Step35Bridge:\n"
    b"    def mapping_registry(self):\n        return [QKVGMapping('q', 'k', 'v', 'g')]\n"
)
QUANT = "src/megatron/bridge/models/conversion/quant_mapping.py"
TESTS_TYPES = (
    b"from megatron.bridge.models.conversion.param_mapping import (\n    QKVGMapping,\n    QKVMapping,\n)\n\n\n"
    b"def quantize(mapping):\n    if not isinstance(mapping, (QKVGMapping, QKVMapping)):\n        return None\n"
    b"    return mapping.megatron_to_hf(1)\n"
)
BUILDS = TESTS_TYPES + b"\n\nDEFAULT = QKVGMapping('a', 'b', 'c', 'd')\n"


def _models(quant: bytes) -> dict[str, bytes]:
    return {PATH: SOURCE, STEP: STEP_SOURCE, QUANT: quant}


def test_a_type_test_in_shared_code_leaves_the_builders_as_users() -> None:
    words = users.symbols(SOURCE, [7])  # QKVGMapping.megatron_to_hf
    assert users.architectures(PATH, words, SOURCE, _models(TESTS_TYPES)) == ("Step3p5ForCausalLM",)
    assert users.architectures(PATH, words, SOURCE, _models(BUILDS)) is None  # shared code builds one itself


@pytest.mark.parametrize(
    ("other", "serves"),
    [
        ('    """Unlike :class:`QKVGMapping`, one fused tensor."""\n', ("Step3p5ForCausalLM",)),  # a docstring
        ("    def f(self):\n        # mirrors QKVGMapping\n        return 1\n", ("Step3p5ForCausalLM",)),  # a comment
        ("    def f(self):\n        return QKVGMapping('a', 'b', 'c', 'd')\n", None),  # code at home builds one
    ],
)
def test_only_code_at_home_makes_a_mapping_shared(other: str, serves: tuple[str, ...] | None) -> None:
    """probes-26 `gdn-linear-load-passes-ba-as-qkvz`: GDNLinearMappingSeparate's docstring and a comment
    name GDNLinearMapping, which only Qwen3-Next's bridge builds; they build nothing."""
    source = SOURCE + b"\n\nclass Other:\n" + other.encode()
    words = users.symbols(source, [7])  # QKVGMapping.megatron_to_hf
    assert users.architectures(PATH, words, source, {**_models(TESTS_TYPES), PATH: source}) == serves


def test_a_helper_only_an_unrun_mapping_calls_serves_that_mappings_builders() -> None:
    words = users.symbols(SOURCE, [2])  # split_qkvg
    assert words == ("split_qkvg",)
    ran = frozenset({"QKVMapping.megatron_to_hf"})  # the recorded cells never ran QKVGMapping
    assert users.architectures(PATH, words, SOURCE, _models(TESTS_TYPES), ran) == ("Step3p5ForCausalLM",)
    # a recorded cell ran the caller: the helper is every model's that reaches it, the default family's
    assert users.architectures(PATH, words, SOURCE, _models(TESTS_TYPES), ran | {"QKVGMapping.megatron_to_hf"}) is None
    assert users.architectures(PATH, words, SOURCE, _models(TESTS_TYPES)) is None  # no records: every use counts


@pytest.mark.parametrize(
    ("line", "fires"),
    [
        ('        ("qk_nope_head_dim", "qk_pos_emb_head_dim"),', True),  # a CONFIG_MAPPING row of MLA's
        ('        ("mscale", "mscale_all_dim"),', True),  # MLA's YaRN target, unprefixed
        ('        ("mscale", "yarn_mscale"),', False),  # the GPT providers' YaRN row
        ("        kv_lora_rank = self.config.kv_lora_rank", True),
        ('        ("head_dim", "kv_channels"),', False),
        ("            for key, value in mla_rope_params.items():", True),  # what only MLA configs carry
    ],
)
def test_multi_latent_attention_fields_run_on_the_mla_family(matrix: Matrix, line: str, fires: bool) -> None:
    """probes 22, 24, 30: a field only MLATransformerConfig has reaches only MLA providers; shared code that
    maps it runs on defaults.kind_families.mla (deepseek_v3), whose Level 4 cell builds one."""
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    hits = [h for h in find(matrix.aspects, path, [line], (), [line]) if h.aspect.name == "mla-layers"]
    assert bool(hits) is fires
    if fires:
        assert hits[0].aspect.architecture == "mla" and hits[0].aspect.levels == {4}
        assert matrix.defaults.kind_families["mla"] == "deepseek_v3"


@pytest.mark.parametrize(
    ("line", "fires"),
    [
        ('        ("n_routed_experts", "num_moe_experts"),', True),  # probes-26: the key misspelled
        ('        ("routed_scaling_factor", "moe_router_topk_scaling_factor"),', True),
        ('        ("num_experts", "num_moe_experts"),', False),  # Qwen3-MoE's and OLMoE's key
        ("        n_routed_experts = 8", False),  # a local name, not a config key
    ],
)
def test_deepseek_style_routing_keys_run_on_the_routing_family(matrix: Matrix, line: str, fires: bool) -> None:
    """probes-26: only DeepSeek-style checkpoints carry these HF keys; the default MoE family (Qwen3-MoE)
    would load a misspelled row exactly as before, so shared code mapping them runs on deepseek_v3."""
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    hits = [h for h in find(matrix.aspects, path, [line], (), [line]) if h.aspect.name == "grouped-routing"]
    assert bool(hits) is fires
    if fires:
        assert hits[0].aspect.architecture == "routing" and hits[0].aspect.levels == {4}
        assert matrix.defaults.kind_families["routing"] == "deepseek_v3"
