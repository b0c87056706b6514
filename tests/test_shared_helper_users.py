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
