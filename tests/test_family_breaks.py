"""Families a real run found broken between verl, vLLM and Bridge: the run is kept, the judge still
names the break, and matrix.yaml's record for the family cites that run and the same error, so a plan
says "cannot run in verl today: ..." (or runs the family critic-free, or with merged adapters) instead of
giving a Bridge PR a Fail that is not its own.

The archives in fixtures/family-breaks/ are run dirs written by run-cell on one H200 (verl 1dda039,
Bridge 067f987, tools/offline_node.sh), one `FAMILY.tar.xz` per break, or `FAMILY.RECORD.tar.xz` for a
family's second record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_e2e.config.matrix import load_matrix
from verl_e2e.judge.judging import judge_run_dir

from .test_family_runs import _table_tool

ROOT = Path(__file__).resolve().parents[1]
ARCHIVES = sorted((ROOT / "tests/fixtures/family-breaks").glob("*.tar.xz"))

NO_MAPPING = "'NoneType' object has no attribute 'megatron_module'"
# family -> (record, result, failure class, a phrase of the error that both the verdict and the record carry)
EXPECTED = {
    "exaone": ("cannot_run", "Fail", "runtime", "must match the existing size (21) at non-singleton dimension 2"),
    "gpt_oss": ("cannot_run", "Fail", "runtime", "The size of tensor a (512) must match the size of tensor b (256)"),
    # Bridge's pinned Megatron-LM lacks the attention variant its DeepSeek-V4 bridge asks for
    "deepseek_v4": ("cannot_run", "Fail", "model_build", "Invalid experimental attention variant: dsv4_hybrid"),
    # Bridge's Qwen3-ASR bridge reads a config layout transformers' class does not have
    "qwen3_asr": ("cannot_run", "Fail", "model_build", "'Qwen3ASRConfig' object has no attribute 'thinker_config'"),
    # verl sizes every Bridge-built model's value head from a hidden_size Omni keeps under thinker_config
    "qwen3_omni": ("cannot_run", "Fail", "model_build", "'Qwen3OmniMoeConfig' object has no attribute 'hidden_size'"),
    # the critic's value head has no mapping: these families' cells run critic-free (GRPO)
    "ernie_vl": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "exaone45": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "glm_vl": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "gemma_vl": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "gemma4": ("no_critic", "Fail", "model_build", NO_MAPPING),
    # transformers 5.17 refuses the global head_dim read Bridge's Gemma 4 config mapping makes
    "gemma4.cannot_run": ("cannot_run", "Fail", "model_build", "'head_dim' is a per-layer attribute"),
    "gemma4_vl": ("cannot_run", "Fail", "model_build", "'head_dim' is a per-layer attribute"),
    "minimax_m3": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "qwen35_vl": ("no_critic", "Fail", "model_build", NO_MAPPING),
    "qwen3_vl_moe": ("no_critic", "Fail", "model_build", NO_MAPPING),
    # vLLM without LoRA support for the model: its LoRA cells sync merged adapters
    "qwen_audio": ("merged_lora", "Blocked", "setup", "does not support LoRA yet"),
    "mimo_v2_flash": ("merged_lora", "Blocked", "setup", "does not support LoRA yet"),
    "minimax_m3.merged_lora": ("merged_lora", "Blocked", "setup", "does not support LoRA yet"),
    # vLLM names the experts under base_layer with LoRA on; verl sends plain names
    "minimax_m2": ("merged_lora", "Fail", "runtime", "KeyError: 'layers.0.block_sparse_moe.experts.0.w1.weight'"),
    "step37": ("no_critic", "Fail", "model_build", NO_MAPPING),
    # Bridge's pinned Megatron-LM has no head-wise attention gate; Step-3.7's bridge maps the gate rows anyway
    "step37.cannot_run": (
        "cannot_run",
        "Fail",
        "model_build",
        "Shape mismatch for megatron param language_model.decoder.layers.0.self_attention.linear_qkv.weight",
    ),
    # Bridge's Gemma 3 VL forward returns (outputs, loss_mask); verl takes the output as logits
    "gemma_vl.cannot_run": ("cannot_run", "Fail", "runtime", "AttributeError: 'tuple' object has no attribute 'shape'"),
    # Bridge's GLM-4.5V forward passes verl's absent mm_token_type_ids to transformers' rope index
    "glm_vl.cannot_run": ("cannot_run", "Fail", "runtime", "TypeError: 'NoneType' object is not subscriptable"),
    "glm_vl.merged_lora": ("merged_lora", "Blocked", "setup", "KeyError: 'layers.1.mlp.experts.0.gate_proj.weight'"),
    "qwen35_vl_moe": ("no_critic", "Fail", "model_build", NO_MAPPING),
    # EXAONE 4.5's text model expands verl's [batch, seq] mask as EXAONE 4's attention does
    "exaone45.cannot_run": (
        "cannot_run",
        "Fail",
        "runtime",
        "must match the existing size (21) at non-singleton dimension 2",
    ),
    # merged, Bridge's QKV export splits a LoRA tensor with one head size where values are narrower
    "mimo_v2_flash.cannot_run": (
        "cannot_run",
        "Fail",
        "runtime",
        "shape '[8, 192, 4]' is invalid for input of size 5632",
    ),
    # vLLM serves Qwen3.5 only as the multimodal model: a text-only checkpoint's config is refused
    "qwen35": ("cannot_run", "Blocked", "setup", "Invalid type of HuggingFace config"),
    "qwen35_moe": ("cannot_run", "Blocked", "setup", "Invalid type of HuggingFace config"),
    # merged, the rollout runs other weights than the trainer (not traced to a tensor yet)
    "qwen_audio.cannot_run": ("cannot_run", "Fail", "rollout_weights", "ran other weights than the trainer"),
    # Qwen3-Next-style MoE blocks: the rollout runs other weights than the trainer (dense Qwen3.5-VL matches)
    "qwen3_next": ("cannot_run", "Fail", "rollout_weights", "ran other weights than the trainer"),
    "qwen35_vl_moe.cannot_run": ("cannot_run", "Fail", "rollout_weights", "ran other weights than the trainer"),
    # Bridge's ERNIE-4.5-VL forward passes verl's absent mm_token_type_ids to transformers' rope index
    "ernie_vl.cannot_run": ("cannot_run", "Fail", "runtime", "TypeError: 'NoneType' object is not subscriptable"),
    # vLLM with LoRA wraps the Mamba mixer's out_proj; verl sends the plain name
    "falcon_h1": ("merged_lora", "Fail", "runtime", "KeyError: 'layers.0.mamba.mamba.out_proj.weight'"),
    # merged, Bridge's Falcon-H1 forward refuses the packed_seq_params verl's model engine passes
    "falcon_h1.cannot_run": (
        "cannot_run",
        "Fail",
        "runtime",
        "got an unexpected keyword argument 'packed_seq_params'",
    ),
    # the pinned vLLM and transformers do not import Mistral 3's vision module together
    "ministral3": ("cannot_run", "Blocked", "setup", "cannot import name 'PixtralRotaryEmbedding'"),
}


def test_every_kept_break_is_described_here() -> None:
    assert sorted(a.name.removesuffix(".tar.xz") for a in ARCHIVES) == sorted(EXPECTED)


@pytest.mark.parametrize("archive", ARCHIVES, ids=[a.name for a in ARCHIVES])
def test_a_kept_break_is_judged_and_recorded_for_its_family(archive: Path, tmp_path: Path) -> None:
    stem = archive.name.removesuffix(".tar.xz")
    family = stem.split(".", 1)[0]
    kind, result, failure_class, phrase = EXPECTED[stem]
    v = judge_run_dir(_table_tool().unpack(archive, tmp_path))
    assert (v.result, v.failure_class, v.family, v.level) == (result, failure_class, family, 0), v.headline
    assert phrase in v.headline
    record = getattr(load_matrix(None).families[family], kind) or ""
    assert phrase in record, "the record quotes the error the kept run shows"
    assert f"family-breaks/{archive.name}" in record, "the record cites the kept run"
