"""The tiny sizes and the config keys they apply to, for tools/make_tiny_model.py.

Why a module of its own: these numbers and names are the whole policy of what "tiny" means (how wide,
how deep, how many experts, which keys carry each of them across transformers' config classes, and the
few per-architecture values no generic rule can express); the shrink rules (tiny_shrink.py) and the
builder (tiny_build.py) only apply them. Also the families of matrix.yaml the tool builds. Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- the tiny sizes ------------------------------------------------------------------------------------
# hidden 256 over 4 heads gives head_dim 64, which every attention kernel on the node takes (vLLM's
# FlashAttention/FlashInfer, TE's fused attention); GQA keeps 2 KV heads so query groups stay > 1.
HIDDEN = 256
INTERMEDIATE = 512
MOE_INTERMEDIATE = 128
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
EXPERTS = 8
TOP_K = 2
MAX_POSITIONS = 2048
MIN_LAYERS = 2
MAX_LAYERS = 8
Q_LORA_RANK = 128
LINEAR_KEY_HEADS = 2
LINEAR_VALUE_HEADS = 4
MAMBA_HEADS = 8
MAX_MB = 30.0
# encoder towers (vision, audio) at half the width: their patch mergers and projectors grow with the square
# of it; what they hand the language model (out_hidden_size, output_dim) stays at HIDDEN
TOWER_HIDDEN = 128
TOWER_INTERMEDIATE = 256
TOWER_HEADS = 2
TOWER_NAMES = ("vision", "visual", "audio", "speech", "encoder")
LM_FACING_KEYS = ("out_hidden_size", "output_dim")

# --- config attribute names the generic rules act on -----------------------------------------------------
LAYER_KEYS = ("num_hidden_layers", "depth", "encoder_layers", "decoder_layers")
HIDDEN_KEYS = ("hidden_size", "d_model", "out_hidden_size", "output_dim", "thinker_hidden_size", "embedding_size")
INTERMEDIATE_KEYS = (
    "intermediate_size",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "dense_intermediate_size",
    "shared_intermediate_size",
    "projector_hidden_size",
)
MOE_INTERMEDIATE_KEYS = (
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "share_expert_dim",
)
HEAD_KEYS = (
    "num_attention_heads",
    "num_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "num_sliding_attention_heads",
)
# index_n_heads (the sparse-attention indexer of GLM-5 / DeepSeek-V3.2) keeps its default: vLLM runs the
# indexer through DeepGEMM's MQA-logits kernel, which asserts 32 or 64 heads (a 4-head indexer stopped
# glm_moe_dsa's Level 0 on the H200, 2026-12-04)
HEAD_DIM_KEYS = ("head_dim", "global_head_dim", "query_pre_attn_scalar")
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_k", "moe_topk", "top_k_experts", "moe_top_k")
SHARED_EXPERT_KEYS = ("n_shared_experts", "moe_num_shared_experts", "num_shared_experts")
ROUTING_GROUP_KEYS = ("n_group", "topk_group")
MAMBA_HEAD_KEYS = ("mamba_num_heads", "mamba_n_heads")
MAMBA_HEAD_DIM_KEYS = ("mamba_head_dim", "mamba_d_head")
MAMBA_GROUP_KEYS = ("n_groups", "mamba_n_groups")
VOCAB_KEYS = ("vocab_size", "vocab_size_per_layer_input")
# scalars that name a layer index or count inside the stack; they must stay inside the shrunk stack
LAYER_INDEX_SCALARS = ("max_window_layers", "moe_layer_end_index", "accept_hidden_layer")
INDEX_LIST_SUFFIXES = ("_indexes", "_indices", "_layers", "_layer_ids")
SPECIAL_TOKEN_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")
MTP_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")

# Where a config names no count of MTP layers, the key its bridge reads (Megatron-Bridge reads
# `mtp_num_hidden_layers` for Qwen3-Next and Qwen3.5, whose transformers configs do not declare it).
MTP_COUNT_KEY_DEFAULT = "mtp_num_hidden_layers"

# How each architecture's released checkpoint names its MTP weights (transformers drops them, so this is
# the one thing only the checkpoint format tells): "layers" appends them to the decoder stack as
# layers.{L+i} with enorm/hnorm/eh_proj/shared_head.norm (DeepSeek-V3's format); "mtp" keeps them under a
# top-level mtp.* with fc/pre_fc_norm_embedding/pre_fc_norm_hidden/norm (Qwen3-Next's format); "mtp_layers"
# keeps them as model.mtp_layers.N with input_proj/token_layernorm/hidden_layernorm/final_layernorm (MiMo's). An MTP
# family missing here gets its config's MTP count but no weights, and the report says so.
MTP_NAMING = {
    "DeepseekV3ForCausalLM": "layers",
    "Glm4MoeForCausalLM": "layers",
    "Glm4MoeLiteForCausalLM": "layers",
    "GlmMoeDsaForCausalLM": "layers",
    "HYV3ForCausalLM": "layers",
    "Qwen3NextForCausalLM": "mtp",
    "Qwen3_5ForCausalLM": "mtp",
    "Qwen3_5MoeForCausalLM": "mtp",
    "Qwen3_5ForConditionalGeneration": "mtp",
    "Qwen3_5MoeForConditionalGeneration": "mtp",
    "ExaoneMoeForCausalLM": "mtp",
    "MiMoForCausalLM": "mtp_layers",
}

# An override of this value leaves the key out of the config's arguments: the class derives it from the rest
# (Gemma 4 derives its per-layer settings from the layer pattern and `global_head_dim`)
DERIVED = "<derived by the config class>"

# Gemma 4: transformers 5.17 turns `global_head_dim` into per-layer head sizes of the full-attention layers and
# keeps no attribute of that name, so Bridge's Gemma 4 provider always reads its default, 512 (the release's
# value): the tiny model's full-attention layers must have 512-wide heads for Bridge to build the same shapes
# (with 64-wide ones the cell stopped on a global layer's weight shape, H200, 2026-12-04)
_GEMMA4_TEXT = {"per_layer_config": DERIVED, "global_head_dim": 512}

# the keys vLLM's Bailing class reads that Bridge's copy of Ling's configuration class leaves out (see below)
_BAILING = {
    "norm_topk_prob": True,
    "score_function": "sigmoid",
    "moe_router_enable_expert_bias": True,
    "use_rmsnorm": True,
    "router_dtype": "fp32",
    # group-limited routing as the release has it (8 groups of 32 experts, the best 4 groups, top-8), shrunk to
    # 2 groups of 4, the best group, top-2: the class default (8 groups, best 4) over 8 experts would give
    # Megatron-Core top-(2 // 4) = top-0 experts per group to score the groups with
    "n_group": 2,
    "topk_group": 1,
}

# Per-architecture overrides, merged over the generic shrink, only where a generic rule cannot work.
ARCH_OVERRIDES: dict[str, dict[str, Any]] = {
    "Gemma4ForCausalLM": _GEMMA4_TEXT,
    "Gemma4ForConditionalGeneration": {"text_config": _GEMMA4_TEXT},
    # transformers' default leaves sliding_window unset, yet the forward builds a sliding-window mask for
    # every Step-3.7 model, even one whose layers are all full attention (as the default's are): any
    # window will do, and 512 keeps it inside the 2048 positions
    "Step3p7ForConditionalGeneration": {"text_config": {"sliding_window": 512}},
    # Megatron-Core's Mamba mixer asserts norm_before_gate is off (mamba_mixer.py: its gated RMSNorm
    # normalises after the gate), as the Falcon-H1 releases set it; transformers' default turns it on
    "FalconH1ForCausalLM": {"mamba_norm_before_gate": False},
    # transformers 5.17's default layer list puts an MoE block in the main stack (Nemotron-3's shape); the
    # family's Level 0 model is the dense Nemotron-H (Mamba, MLP and attention blocks), and vLLM 0.24 with
    # LoRA on names MoE experts under `base_layer`, which verl's weight sync does not send (KeyError
    # 'layers.1.mixer.experts.0.up_proj.weight', eighteenth batch). Written as the list transformers reads;
    # the MTP block keeps its default
    "NemotronHForCausalLM": {"layers_block_type": ["linear_attention", "mlp", "full_attention", "mlp"]},
    # Gemma 3's projector pools the tower's patches per side down to sqrt(mm_tokens_per_image) = 16 per
    # side: transformers' default tower (224 px, 16 px patches) has 14, a pooling kernel of 14 // 16 = 0
    # ("RuntimeError: integer out of range" in vLLM's gemma3_mm, H200, 2026-12-04); the release's 14 px
    # patches give 16 at the processor's 224 px, a kernel of 1
    "Gemma3ForConditionalGeneration": {"vision_config": {"patch_size": 14}},
    # The omni models' talker and vocoder speak; verl trains the thinker (Bridge's omni providers build the
    # thinker, vLLM's thinker-only model ignores the rest), and the vocoder's convolution stacks are sized
    # by lists no generic rule can shrink (245 MB left in)
    "Qwen2_5OmniForConditionalGeneration": {"enable_audio_output": False},
    "Qwen3OmniMoeForConditionalGeneration": {"enable_audio_output": False},
    # Keys the released checkpoints' config.json carry and transformers' class leaves out, which vLLM
    # 0.24 reads (each found by a Level 0 run on the H200, 2026-12-03, that stopped in vLLM without it):
    # DeepSeek-V2 routes with grouped top-k (V2-Lite: one group, top-1 group)
    "DeepseekV2ForCausalLM": {"n_group": 1, "topk_group": 1},
    # DeepSeek-V3 routes with sigmoid scores and a score-correction bias (topk_method "noaux_tc"); vLLM
    # builds gate.e_score_correction_bias only for that method, and Bridge exports it ("KeyError:
    # 'layers.1.mlp.gate.e_score_correction_bias'" in vLLM's load_weights, H200, 2026-12-03)
    "DeepseekV3ForCausalLM": {"topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    # GLM-4.7-Flash: the dense lead layer count (mlp_layer_types of the tiny model starts with one)
    "Glm4MoeLiteForCausalLM": {"first_k_dense_replace": 1},
    # GLM-4.5: vLLM's Glm4MoeAttention reads config.head_dim, which Glm4MoeConfig leaves out (128 in the
    # release's config.json; "'Glm4MoeConfig' object has no attribute 'head_dim'", H200, 2026-12-03)
    "Glm4MoeForCausalLM": {"head_dim": HEAD_DIM},
    # MiniMax-M2 rotates half of each head (rotary_dim 64 of head_dim 128 in the release; 32 of 64 here)
    # and routes with sigmoid scores, which vLLM's MoE layer reads as `scoring_func`
    # and its router's score-correction bias, which vLLM builds only under the release's use_routing_bias
    # ("KeyError: 'layers.0.block_sparse_moe.e_score_correction_bias'" in vLLM's load_weights, H200, 2026-12-04)
    "MiniMaxM2ForCausalLM": {"rotary_dim": 32, "scoring_func": "sigmoid", "use_routing_bias": True},
    # EXAONE 4.0-1.2B ties its embeddings, and Bridge's EXAONE 4 bridge maps no lm_head: transformers'
    # default (untied) gives Megatron an output layer nothing loads ("No mapping found for megatron_param:
    # output_layer.weight", then AttributeError in load_weights_hf_to_megatron; H200, 2026-12-03)
    "Exaone4ForCausalLM": {"tie_word_embeddings": True},
    # Hy3 (Hunyuan V3): Bridge builds moe_layer_freq from the dense lead layer count
    "HYV3ForCausalLM": {"first_k_dense_replace": 1},
    # GLM-4.5V: Bridge's provider takes kv_channels from the text config's head_dim (128 in the release)
    # and reads text_config.use_qk_norm, which the text config class leaves out (GLM-4.5V is built on
    # GLM-4.5-Air, which has no QK norm; "'Glm4vMoeTextConfig' object has no attribute 'use_qk_norm'")
    "Glm4vMoeForConditionalGeneration": {"text_config": {"head_dim": HEAD_DIM, "use_qk_norm": False}},
    # The next three: Bridge's provider_bridge reads a key the release's config.json carries and
    # transformers 5.17's class keeps elsewhere or not at all (each stopped a Level 0 cell, H200, 2026-12-03).
    # GLM-5's DSA indexer rotates non-interleaved unless the config says so (vLLM's default, False); vLLM
    # runs GLM-5 with DeepSeek-V2's class, which builds the router's score-correction bias only under the
    # release's topk_method "noaux_tc" ("KeyError: 'layers.1.mlp.gate.e_score_correction_bias'", H200, 2026-12-04)
    "GlmMoeDsaForCausalLM": {"indexer_rope_interleave": False, "topk_method": "noaux_tc"},
    # MiMo-V2-Flash: Bridge takes (sliding-window, global) RoPE bases from swa_rope_theta and rope_theta;
    # transformers keeps them in rope_parameters (10k sliding, 5M full attention). The release's head sizes
    # (192 for query and key, 128 for value) stay: a third of 192 is the 64 rotary channels Bridge and vLLM
    # both take from partial_rotary_factor (tiny_release.py writes the release's other keys)
    "MiMoV2FlashForCausalLM": {
        "swa_rope_theta": 10000.0,
        "rope_theta": 5000000.0,
        "head_dim": 192,
        "v_head_dim": 128,
        "partial_rotary_factor": 0.334,
        # the release routes with sigmoid scores and a learned expert bias; Bridge sets the bias and reads the
        # score function from scoring_func (Megatron-Core refused the bias with softmax scores, H200, 2026-12-04)
        "scoring_func": "sigmoid",
    },
    # Ling 2.0 (BailingMoeV2) and Sarvam-MoE, which vLLM 0.24 runs with its Bailing class: that class reads
    # norm_topk_prob outright ("'BailingMoeV2Config' object has no attribute 'norm_topk_prob'", H100,
    # 2026-12-06) and otherwise defaults to softmax routing, LayerNorm on query and key and a bf16 router,
    # where Bridge's Ling bridge builds sigmoid routing with an expert bias, RMSNorm and an fp32 router
    "BailingMoeV2ForCausalLM": _BAILING,
    "SarvamMoEForCausalLM": _BAILING,
    # Qwen3-VL-MoE: vLLM's MoE block reads text_config.norm_topk_prob, which transformers 5.17's text config
    # class leaves out ("'Qwen3VLMoeTextConfig' object has no attribute 'norm_topk_prob'", H200, 2026-12-04)
    "Qwen3VLMoeForConditionalGeneration": {"text_config": {"norm_topk_prob": True}},
    # DeepSeek-V4: Bridge reads the compressed attention's YaRN factor and original length from
    # rope_parameters["compress"] (16 and 65536 in the release, per Bridge's own comments)
    "DeepseekV4ForCausalLM": {
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
            "compress": {
                "rope_type": "yarn",
                "rope_theta": 160000.0,
                "partial_rotary_factor": 0.125,
                "factor": 16.0,
                "original_max_position_embeddings": 65536,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
            },
        }
    },
    # Qwen2.5-VL: Bridge's provider keeps the release's M-RoPE split (16, 24, 24) whatever the config says,
    # so the rotary half must stay 64: heads of 128 (two query heads, one KV head, over hidden 256); with
    # 64-wide heads Bridge's rotary split fails ("split_sizes=[16, 24, 24, 16, 24, 24]" of 64, H200 run)
    "Qwen2_5_VLForConditionalGeneration": {
        "text_config": {
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
        }
    },
    # Ministral 3's text model is `ministral3` (YaRN with Llama-4 attention scaling), not Mistral 3's
    # default `mistral`: Bridge's provider reads rope_parameters["llama_4_scaling_beta"]
    "Mistral3ForConditionalGeneration": {
        "text_config": {
            "model_type": "ministral3",
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 16.0,
                "original_max_position_embeddings": 16384,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale_all_dim": 1.0,
                "mscale": 1.0,
                "llama_4_scaling_beta": 0.1,
            },
        }
    },
}

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


class UsageError(Exception):
    """Bad input: the CLI prints it on one line and exits 2."""


# --- matrix families ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...]
    model: str
    kinds: tuple[str, ...]
    borrowed_from: str | None = None  # a family without architectures runs another family's
    package: str = ""  # Bridge's models/<package>/ (matrix `dir`, else the family's name)
    remote_code: bool = False  # the checkpoint's own code, not transformers', defines the architecture


def load_families(matrix: Mapping[str, Any]) -> dict[str, Family]:
    """Families of a parsed matrix.yaml. One without `architectures` (a provider-only directory) takes those
    of the first family that runs the same `model`, which is the checkpoint its cells run."""
    raw = matrix.get("families") or {}
    by_model: dict[str, tuple[str, tuple[str, ...]]] = {}
    for name, f in raw.items():
        archs = tuple(f.get("architectures") or ())
        if archs and f.get("model") not in by_model:
            by_model[f.get("model")] = (name, archs)
    out = {}
    for name, f in raw.items():
        kinds = tuple(k for k in ("moe", "mtp", "vlm") if f.get(k))
        archs = tuple(f.get("architectures") or ())
        borrowed = None
        if not archs and f.get("model") in by_model:
            borrowed, archs = by_model[f["model"]]
        package = str(f.get("dir") or name)
        out[name] = Family(name, archs, str(f.get("model", "")), kinds, borrowed, package, bool(f.get("remote_code")))
    return out


def _one_line(exc: BaseException) -> str:
    """The exception as one line: its type and the most specific line of its message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = lines[-1] if lines and lines[0].endswith(":") else " ".join(lines)
    return f"{type(exc).__name__}: {detail}"[:300]
