#!/usr/bin/env python3
"""Build a tiny random checkpoint of every model family in matrix.yaml, offline, from transformers' own configs.

    python3 tools/make_tiny_model.py OUT_ROOT --tokenizer DIR [--family NAME ...] [--list] [--report FILE]

Why: a one-GPU Level 0 cell proves that Bridge builds, converts and trains an architecture inside verl, and
that needs a checkpoint of that architecture, not a good one. The public checkpoints run from 0.5B to 1T
parameters and need the hub; an offline node has neither the disk nor the network for them. Every
architecture transformers ships carries its own config class whose defaults describe the real model, so
one generic shrink of those defaults (few layers, narrow width, few experts, the local tokenizer's
vocabulary) gives a model of the same *shape of code* — the same layer kinds, routing, attention variants,
sub-towers and sub-configs — at a few MB. This generalises tools/make_tiny_moe.py (one hand-written
Qwen3-MoE config) to any family.

For each family the tool looks up `transformers.<Architecture>` and its `config_class`, shrinks the
config's defaults by attribute name (`shrink_overrides`, pure and tested without torch), applies the few
per-architecture overrides that no generic rule can express (`ARCH_OVERRIDES`, each with its reason),
instantiates the model with seeded random weights, and writes bf16 safetensors, config.json,
generation_config.json and the tokenizer copied from --tokenizer into OUT_ROOT/<family>/. Families flagged
`mtp` get one MTP layer in the config and, where `MTP_NAMING` knows how the released checkpoint names
them, its weights (transformers drops MTP weights on load, so it never builds them). Families flagged
`vlm` get a real tokenizer token behind every image/video/audio token id of their config, and the
processor files when the architecture's processor class can be built where the tool runs (image
processors need torchvision); where it cannot, the report says so and the model is for text prompts.

Exit status: 0 all requested families built (or listed), 1 some failed (the report says which and why),
2 bad input (unknown family, missing tokenizer, unreadable matrix).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_tokens import add_role_tokens  # noqa: E402 - this directory's helper, found when run as a script

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
    "index_n_heads",
)
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
# top-level mtp.* with fc/pre_fc_norm_embedding/pre_fc_norm_hidden/norm (Qwen3-Next's format). An MTP
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
}

# Per-architecture overrides, merged over the generic shrink, only where a generic rule cannot work.
ARCH_OVERRIDES: dict[str, dict[str, Any]] = {
    # transformers' default leaves sliding_window unset, yet the forward builds a sliding-window mask for
    # every Step-3.7 model, even one whose layers are all full attention (as the default's are): any
    # window will do, and 512 keeps it inside the 2048 positions
    "Step3p7ForConditionalGeneration": {"text_config": {"sliding_window": 512}},
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
    "MiniMaxM2ForCausalLM": {"rotary_dim": 32, "scoring_func": "sigmoid"},
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
    # GLM-5's DSA indexer rotates non-interleaved unless the config says so (vLLM's default, False)
    "GlmMoeDsaForCausalLM": {"indexer_rope_interleave": False},
    # MiMo-V2-Flash: Bridge takes (sliding-window, global) RoPE bases from swa_rope_theta and rope_theta;
    # transformers keeps them in rope_parameters (10k sliding, 5M full attention)
    "MiMoV2FlashForCausalLM": {"swa_rope_theta": 10000.0, "rope_theta": 5000000.0},
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


# --- pure part: matrix families and the shrink rules --------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...]
    model: str
    kinds: tuple[str, ...]
    borrowed_from: str | None = None  # a family without architectures runs another family's


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
        out[name] = Family(name, archs, str(f.get("model", "")), kinds, borrowed)
    return out


def padded_vocab(n_tokens: int) -> int:
    """The embedding rows for a tokenizer of n_tokens: a multiple of 128, as Megatron pads it."""
    return -(-n_tokens // 128) * 128


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """base with over written in; sub-configs (`*config` mappings) merge key by key, any other value (a
    rope dict, per-layer settings keyed by layer index) is replaced whole."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        if isinstance(v, Mapping) and isinstance(old, Mapping) and k.endswith("config") and not _by_layer(old):
            out[k] = deep_merge(old, v)
        else:
            out[k] = v
    return out


def _by_layer(value: Mapping[str, Any]) -> bool:
    return bool(value) and all(str(x).isdigit() for x in value)


def _kinds(seq: list[Any] | str) -> list[str]:
    return [json.dumps(x, sort_keys=True) for x in seq]


def _compress_lead(seq: list[Any] | str) -> list[Any] | str:
    """A leading block whose value never comes back (dense layers before the MoE ones, hash-routed layers
    before learnt routing) shrinks to one layer; a periodic pattern is left whole."""
    keys = _kinds(seq)
    run = 1
    while run < len(keys) and keys[run] == keys[0]:
        run += 1
    if 1 < run < len(keys) and keys[0] not in keys[run:]:
        return seq[:1] + seq[run:]
    return seq


def _cover(seq: list[Any] | str) -> int:
    """Length of the shortest prefix holding every kind of layer the pattern has."""
    keys = _kinds(seq)
    wanted = set(keys)
    seen: set[str] = set()
    for i, k in enumerate(keys):
        seen.add(k)
        if seen == wanted:
            return i + 1
    return len(keys)


def _layer_count(cfg: Mapping[str, Any]) -> tuple[str, int] | None:
    for key in LAYER_KEYS:
        if isinstance(cfg.get(key), int) and not isinstance(cfg.get(key), bool):
            return key, cfg[key]
    return None


def _per_layer_keys(cfg: Mapping[str, Any], layers: int) -> list[str]:
    """Attributes that hold one entry per layer: lists as long as the stack, and pattern strings."""
    keys = []
    for k, v in cfg.items():
        if layers <= 1 or k.endswith(INDEX_LIST_SUFFIXES):
            continue
        flat_list = isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v)
        pattern = isinstance(v, str) and "pattern" in k
        if (flat_list or pattern) and len(v) == layers:
            keys.append(k)
    return keys


def _remap_index(i: int, old: int, new: int) -> int:
    return max(0, min(new - 1, math.ceil((i + 1) * new / old) - 1))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class _Shrink:
    """What every level of one config's shrink shares."""

    vocab: int
    tokens: Mapping[str, int | None]
    mrope: list[int] | None = None
    notes: list[str] = field(default_factory=list)
    id_map: dict[int, int] = field(default_factory=dict)


class _Over(dict):  # type: ignore[type-arg]
    """The overrides of one config level: a key is written only when it changes the default."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        self.cfg = cfg

    def put(self, key: str, value: Any) -> None:
        if self.cfg.get(key) != value:
            self[key] = value

    def cap(self, keys: Iterable[str], limit: int) -> None:
        for key in keys:
            v = self.cfg.get(key)
            if _is_int(v) and v > limit:
                self.put(key, limit)
            elif isinstance(v, list) and v and all(_is_int(x) for x in v):
                self.put(key, [min(x, limit) for x in v])


def _widths(cfg: Mapping[str, Any], over: _Over, tower: bool) -> None:
    hidden, intermediate, heads = (
        (TOWER_HIDDEN, TOWER_INTERMEDIATE, TOWER_HEADS) if tower else (HIDDEN, INTERMEDIATE, HEADS)
    )
    over.cap([k for k in HIDDEN_KEYS if k not in LM_FACING_KEYS], hidden)
    over.cap(LM_FACING_KEYS, HIDDEN)
    moe_sized = any(k in cfg for k in MOE_INTERMEDIATE_KEYS)
    has_experts = any(_is_int(cfg.get(k)) for k in EXPERT_KEYS)
    # experts sized by `intermediate_size` itself (OLMoE, GPT-OSS, MiniMax) get the MoE width
    over.cap(INTERMEDIATE_KEYS, MOE_INTERMEDIATE * 2 if has_experts and not moe_sized else intermediate)
    over.cap(MOE_INTERMEDIATE_KEYS, MOE_INTERMEDIATE)
    heads_before = next((cfg[k] for k in HEAD_KEYS if _is_int(cfg.get(k))), None)
    over.cap(HEAD_KEYS, heads)
    kv = cfg.get("num_key_value_heads")
    if kv is None and "num_key_value_heads" in cfg and heads_before is not None:
        over.put("num_key_value_heads", min(heads_before, heads))  # None means multi-head; say it outright
    elif _is_int(kv) and kv > 1:  # multi-head stays multi-head, grouped stays grouped
        over.put("num_key_value_heads", heads if heads_before is not None and kv >= heads_before else min(kv, KV_HEADS))
    if not _is_int(cfg.get("kv_lora_rank")):  # MLA's head sizes are the shapes vLLM's MLA kernels are built for
        over.cap(HEAD_DIM_KEYS, HEAD_DIM)
    over.cap(("q_lora_rank", "o_lora_rank"), Q_LORA_RANK)


def _experts_and_mixers(cfg: Mapping[str, Any], over: _Over) -> None:
    over.cap(EXPERT_KEYS, EXPERTS)
    over.cap(TOP_K_KEYS, TOP_K)
    over.cap(SHARED_EXPERT_KEYS, 1)
    over.cap(ROUTING_GROUP_KEYS, 1)  # group-limited routing over 8 experts: one group
    over.cap(("linear_num_key_heads",), LINEAR_KEY_HEADS)
    over.cap(("linear_num_value_heads",), LINEAR_VALUE_HEADS)
    heads = next((min(cfg[k], MAMBA_HEADS) for k in MAMBA_HEAD_KEYS if _is_int(cfg.get(k))), None)
    if heads is None:
        return
    over.cap(MAMBA_HEAD_KEYS, MAMBA_HEADS)
    over.cap(MAMBA_HEAD_DIM_KEYS, HEAD_DIM)
    over.cap(MAMBA_GROUP_KEYS, 1)  # groups must divide the heads
    dim = next((min(cfg[k], HEAD_DIM) for k in MAMBA_HEAD_DIM_KEYS if _is_int(cfg.get(k))), None)
    if _is_int(cfg.get("mamba_d_ssm")) and dim is not None:
        over.put("mamba_d_ssm", heads * dim)


def scale_sections(sections: list[int], total: int) -> list[int]:
    """M-RoPE's (temporal, height, width) split of the rotary half, scaled to a new half size: the parts keep
    their proportions and add up to `total` exactly."""
    scaled = [max(1, round(s * total / sum(sections))) for s in sections]
    scaled[-1] += total - sum(scaled)
    return scaled


def _rotary_half(cfg: Mapping[str, Any], over: Mapping[str, Any]) -> int:
    """Half the rotary dimension of the shrunk text config: head size times the rotary fraction, over 2."""

    def now(key: str) -> Any:
        return over.get(key, cfg.get(key))

    heads = next((now(k) for k in HEAD_KEYS if _is_int(now(k))), 1)
    head = now("head_dim") if _is_int(now("head_dim")) else (now("hidden_size") or 0) // heads
    rope = cfg.get("rope_parameters") or {}
    fraction = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor")) or 1.0
    return int(head * fraction) // 2


def _tokens_and_rope(cfg: Mapping[str, Any], over: _Over, ctx: _Shrink, top: bool) -> None:
    is_text = "vocab_size" in cfg
    if is_text:
        over.cap(VOCAB_KEYS, ctx.vocab)
        over.cap(("max_position_embeddings",), MAX_POSITIONS)
        rope = dict(cfg.get("rope_parameters") or {})
        sections = rope.get("mrope_section") or ctx.mrope
        if sections and _layer_count(cfg) and "rope_type" in rope:
            rope["mrope_section"] = scale_sections(list(sections), _rotary_half(cfg, over))
            over.put("rope_parameters", rope)
    if not (is_text or top):
        return
    for key, value in ctx.tokens.items():
        if key in cfg:
            over.put(key, value)
    for k, v in cfg.items():  # image/video/audio token ids past the new vocabulary: into its padded tail
        if k in SPECIAL_TOKEN_KEYS or not (k.endswith(("_token_id", "_token_index")) and _is_int(v)) or v < ctx.vocab:
            continue
        if v not in ctx.id_map:
            ctx.id_map[v] = ctx.vocab - 1 - len(ctx.id_map)
        over.put(k, ctx.id_map[v])


def _depth(cfg: Mapping[str, Any], over: _Over, ctx: _Shrink, path: str) -> None:
    counted = _layer_count(cfg)
    if counted is None:
        return
    key, layers = counted
    first_k = cfg.get("first_k_dense_replace")
    over.cap(("first_k_dense_replace",), 1)
    per_layer = {k: _compress_lead(cfg[k]) for k in _per_layer_keys(cfg, layers)}
    need = max([MIN_LAYERS] + [_cover(seq) for seq in per_layer.values()])
    if _is_int(first_k) and first_k > 0:
        need = max(need, 2)  # one dense layer and one MoE layer
    if need > MAX_LAYERS:
        ctx.notes.append(f"{path}{key}: the layer pattern needs {need} layers, cut to {MAX_LAYERS}")
        need = MAX_LAYERS
    new = min(layers, need)
    over.cap(LAYER_KEYS, new)
    for k, seq in per_layer.items():
        over.put(k, (seq + seq[-1:] * new)[:new])
    for k, v in cfg.items():
        if (
            k.endswith(INDEX_LIST_SUFFIXES)
            and isinstance(v, list)
            and v
            and all(_is_int(x) and 0 <= x < layers for x in v)
        ):
            over.put(k, sorted({_remap_index(x, layers, new) for x in v}))
        elif isinstance(v, Mapping) and _by_layer(v) and all(int(x) < layers for x in v):
            over.put(k, {x: _per_layer_setting(y) for x, y in v.items() if int(x) < new})
    for k in LAYER_INDEX_SCALARS:
        if _is_int(cfg.get(k)) and cfg[k] >= new:
            over.put(k, new if k == "max_window_layers" else new - 1)


def _per_layer_setting(setting: Any) -> Any:
    """One layer's own settings (Gemma 4 gives its full-attention layers a wider head): shrunk alike."""
    if not isinstance(setting, Mapping):
        return setting
    over = _Over(setting)
    _widths(setting, over, tower=False)
    _experts_and_mixers(setting, over)
    return {**setting, **over}


def _shrink_one(cfg: Mapping[str, Any], ctx: _Shrink, path: str) -> dict[str, Any]:
    over = _Over(cfg)
    # sub-configs (text_config, vision_config, audio_config, thinker_config, llm_config, ...) first
    for k, v in cfg.items():
        if isinstance(v, Mapping) and k.endswith("config"):
            sub = _shrink_one(v, ctx, f"{path}{k}.")
            if sub:
                over[k] = sub
    tower = bool(path) and any(t in path.rsplit(".", 2)[-2] for t in TOWER_NAMES)
    _widths(cfg, over, tower)
    _experts_and_mixers(cfg, over)
    _tokens_and_rope(cfg, over, ctx, top=not path)
    _depth(cfg, over, ctx, path)
    return dict(over)


def shrink_overrides(
    defaults: Mapping[str, Any],
    vocab: int,
    *,
    eos: int | None = None,
    pad: int | None = None,
    architecture: str = "",
    mrope: list[int] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The overrides that turn a config's defaults (its `to_dict()`) into a tiny one, and notes on any rule
    that could not be met. `mrope` is the M-RoPE split the modeling code falls back to when the config has
    none. Pure: a dict in, a dict out."""
    ctx = _Shrink(vocab, {"bos_token_id": None, "eos_token_id": eos, "pad_token_id": pad}, mrope)
    over = _shrink_one(defaults, ctx, "")
    extra = ARCH_OVERRIDES.get(architecture)
    if extra:
        over = deep_merge(over, extra)
    return over, ctx.notes


def text_config_path(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    """Where the language model's config sits: () for a plain LM, ("text_config",) for most VLMs,
    ("thinker_config", "text_config") for an omni model, ... — the first config holding a vocabulary."""
    if "vocab_size" in cfg and _layer_count(cfg):
        return ()
    for k in ("text_config", "llm_config", "language_config", "thinker_config"):
        v = cfg.get(k)
        if isinstance(v, Mapping):
            return (k, *text_config_path(v))
    return ()


def mtp_overrides(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """One MTP layer: set the count key the config has (or the one its bridge reads) to 1."""
    path = text_config_path(defaults)
    node: Mapping[str, Any] = defaults
    for k in path:
        node = node[k]
    key = next((k for k in MTP_COUNT_KEYS if k in node), MTP_COUNT_KEY_DEFAULT)
    over: dict[str, Any] = {key: 1}
    if path and key not in defaults:  # bridges read the count from the top-level config too
        return deep_merge({key: 1}, _nest(path, over))
    return _nest(path, over)


def moe_overrides(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A family flagged `moe` whose architecture's defaults are dense (Gemma 4 ships its MoE behind
    `enable_moe_block` with no experts) gets its experts switched on at the tiny sizes."""
    path = text_config_path(defaults)
    node: Mapping[str, Any] = defaults
    for k in path:
        node = node[k]
    over: dict[str, Any] = {}
    for keys, value in ((EXPERT_KEYS, EXPERTS), (TOP_K_KEYS, TOP_K), (MOE_INTERMEDIATE_KEYS[:1], MOE_INTERMEDIATE)):
        for k in keys:
            if k in node and node[k] is None:
                over[k] = value
    if node.get("enable_moe_block") is False:
        over["enable_moe_block"] = True
    return _nest(path, over) if over else {}


def _nest(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    for k in reversed(path):
        leaf = {k: leaf}
    return leaf


# --- impure part: transformers, torch, files ------------------------------------------------------------


@dataclass
class Result:
    family: str
    architecture: str
    kinds: list[str]
    found: bool = False
    config_class: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    params: int = 0
    mb: float = 0.0
    ok: bool = False
    error: str = ""
    borrowed_from: str | None = None


def _one_line(exc: BaseException) -> str:
    """The exception as one line: its type and the most specific line of its message."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    detail = lines[-1] if lines and lines[0].endswith(":") else " ".join(lines)
    return f"{type(exc).__name__}: {detail}"[:300]


def resolve(architecture: str) -> tuple[Any, Any]:
    """(model class, config class) from the installed transformers; (None, None) when it has neither."""
    import transformers  # noqa: PLC0415

    try:
        cls = getattr(transformers, architecture)
    except (AttributeError, ImportError, RuntimeError):
        return None, None
    config_class = getattr(cls, "config_class", None)
    if config_class is None or isinstance(config_class, str):
        return cls, None
    return cls, config_class


def mrope_default(cls: Any) -> list[int] | None:
    """The M-RoPE split a model's code falls back to when its config names none (Qwen-VL, GLM-4V, ERNIE-VL
    read `rope_parameters.get("mrope_section", [...])`): it is sized for the real head, so the shrink must
    scale it with the head, and only the source holds it."""
    import inspect  # noqa: PLC0415
    import re  # noqa: PLC0415

    try:
        source = inspect.getsource(sys.modules[cls.__module__])
    except (KeyError, OSError, TypeError):
        return None
    m = re.search(r"mrope_section[\"']\s*,\s*\[([\d,\s]+)\]", source)
    return [int(x) for x in m.group(1).split(",") if x.strip()] if m else None


def _config_kwargs(obj: Any, merged: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """The merged dict less what the config class derives from its fields (`merged_hidden_size`, counts
    read off a layer pattern, ...): left in, a derived value would keep the full-size default."""
    import dataclasses  # noqa: PLC0415

    from transformers import PretrainedConfig  # noqa: PLC0415

    names = {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else None
    out = {}
    for k, v in merged.items():
        sub = vars(obj).get(k)  # not getattr: per-layer configs refuse reads of their per-layer attributes
        if isinstance(sub, PretrainedConfig) and isinstance(v, Mapping):
            sub_over = over.get(k)
            out[k] = _config_kwargs(sub, v, sub_over if isinstance(sub_over, Mapping) else {})
        elif names is None or k in names or k in over or k == "model_type":  # a parent picks a sub-config's class by it
            out[k] = v
    return out


def tiny_config(
    cls: Any, config_class: Any, family: Family, architecture: str, tokens: tuple[int, int | None, int | None]
) -> tuple[Any, dict[str, Any], list[str]]:
    """The tiny config for one architecture; tokens is (vocab, eos, pad) of the tokenizer."""
    vocab, eos, pad = tokens
    default = config_class()
    defaults = default.to_dict()
    over, notes = shrink_overrides(
        defaults, vocab, eos=eos, pad=pad, architecture=architecture, mrope=mrope_default(cls)
    )
    if "moe" in family.kinds:
        over = deep_merge(over, moe_overrides(defaults))
    if "mtp" in family.kinds:
        over = deep_merge(over, mtp_overrides(defaults))
    merged = deep_merge(defaults, over)
    for k in ("transformers_version", "_name_or_path", "architectures", "model_type"):
        merged.pop(k, None)
    merged["dtype"] = "bfloat16"
    config = config_class(**_config_kwargs(default, merged, over))
    config.architectures = [architecture]
    return config, over, notes


def _mtp_count(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for holder in (text, config):
        for k in MTP_COUNT_KEYS:
            if _is_int(getattr(holder, k, None)):
                return int(getattr(holder, k))
    return 0


def _saved_state(model: Any) -> dict[str, Any]:
    """The tensors `model.save_pretrained` writes, under the names it writes them."""
    import tempfile  # noqa: PLC0415

    from safetensors.torch import load_file  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        state: dict[str, Any] = {}
        for shard in sorted(Path(tmp).glob("*.safetensors")):
            state.update(load_file(shard))
    return state


def mtp_tensors(cls: Any, config: Any, architecture: str) -> dict[str, Any]:
    """MTP weights under the checkpoint's own names: each MTP layer is a decoder layer built by the model
    class itself (one more layer in the stack, of the stack's last kind), plus the fusion projection and
    norms that MTP adds. Empty when the architecture's naming is not known here."""
    import copy  # noqa: PLC0415
    import re  # noqa: PLC0415

    import torch  # noqa: PLC0415

    naming = MTP_NAMING.get(architecture)
    count = _mtp_count(config)
    if naming is None or count == 0:
        return {}
    big = copy.deepcopy(config)
    text = big.get_text_config() if hasattr(big, "get_text_config") else big
    layers = text.num_hidden_layers
    text.num_hidden_layers = layers + count
    for k in _per_layer_keys(text.to_dict(), layers):
        seq = getattr(text, k)
        setattr(text, k, seq + seq[-1:] * count)
    torch.manual_seed(1)
    # through save_pretrained, not state_dict(): transformers 5 keeps MoE experts fused in memory
    # (`mlp.experts.gate_up_proj`) and writes the checkpoint's own per-expert names on save, so MTP
    # layers taken from a state_dict came out fused beside per-expert decoder layers, and Bridge's
    # GLM-4.5 bridge, deciding fused from any match, asked for `model.layers.1.mlp.experts.gate_up_proj`
    # (H200, 2026-12-03)
    state = _saved_state(cls(big).to(torch.bfloat16))
    layer_re = re.compile(r"^(?P<prefix>(?:.*\.)?layers)\.(?P<i>\d+)\.(?P<rest>.+)$")
    norm_key = next(k for k in state if re.search(r"(^|\.)norm\.weight$", k) and "layers." not in k)
    hidden = state[norm_key].shape[0]
    out: dict[str, Any] = {}
    for key, tensor in state.items():
        m = layer_re.match(key)
        if not m or int(m["i"]) < layers or "visual" in key or "vision" in key or "audio" in key:
            continue
        i = int(m["i"]) - layers
        name = f"{m['prefix']}.{m['i']}.{m['rest']}" if naming == "layers" else f"mtp.layers.{i}.{m['rest']}"
        out[name] = tensor.clone()
    gen = torch.Generator().manual_seed(2)
    for i in range(count):
        proj = (torch.randn(hidden, 2 * hidden, generator=gen) * 0.02).to(torch.bfloat16)
        norm = state[norm_key].clone()
        if naming == "layers":
            prefix = next(m["prefix"] for k in state if (m := layer_re.match(k)) and "visual" not in k)
            base = f"{prefix}.{layers + i}"
            out.update(
                {
                    f"{base}.eh_proj.weight": proj,
                    f"{base}.enorm.weight": norm.clone(),
                    f"{base}.hnorm.weight": norm.clone(),
                    f"{base}.shared_head.norm.weight": norm.clone(),
                }
            )
        elif i == 0:
            out.update(
                {
                    "mtp.fc.weight": proj,
                    "mtp.pre_fc_norm_embedding.weight": norm.clone(),
                    "mtp.pre_fc_norm_hidden.weight": norm.clone(),
                    "mtp.norm.weight": norm.clone(),
                }
            )
    return out


def _sub_configs(config: Any) -> list[Any]:
    """The config and every config nested in it (text, vision, audio, thinker, ...)."""
    from transformers import PretrainedConfig  # noqa: PLC0415

    found = [config]
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            found.extend(_sub_configs(value))
    return found


def vision_geometry(config: Any) -> dict[str, int]:
    """The patch geometry the vision tower is built with, as image and video processors name it: a processor
    at its class defaults cuts 14-pixel patches for a tower built on 16 (a tiny Qwen3-VL in vLLM: "shape
    '[40960, -1, 2, 16, 16]' is invalid"), so the processor is built to the tower's sizes."""
    vision = getattr(config, "vision_config", None)
    names = (
        ("patch_size", "patch_size"),
        ("temporal_patch_size", "temporal_patch_size"),
        ("spatial_merge_size", "merge_size"),
    )
    found: dict[str, Any] = {ours: getattr(vision, theirs, None) for theirs, ours in names}
    return {k: int(v) for k, v in found.items() if _is_int(v)}


def _built(cls: Any, sizes: Mapping[str, int]) -> Any:
    try:
        return cls(**sizes)
    except TypeError:  # a processor without these settings (an audio feature extractor)
        return cls()


def _processor_parts(
    model_type: str, proc_cls: Any, tokenizer: Any, sizes: Mapping[str, int] | None = None
) -> dict[str, Any]:
    import transformers  # noqa: PLC0415
    from transformers.models.auto import (  # noqa: PLC0415
        feature_extraction_auto,
        image_processing_auto,
        video_processing_auto,
    )

    tables = {
        "image_processor": lambda: image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES,
        "video_processor": lambda: video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES,
        "feature_extractor": lambda: feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES,
    }
    parts: dict[str, Any] = {}
    for attr in proc_cls.get_attributes():
        if attr == "tokenizer":
            parts[attr] = tokenizer
            continue
        names = tables[attr]().get(model_type)
        names = names.values() if isinstance(names, Mapping) else ([names] if isinstance(names, str) else names or [])
        name = next(n for n in names if n)
        cls = getattr(transformers, name)
        parts[attr] = _built(cls, sizes or {}) if attr in ("image_processor", "video_processor") else cls()
    return parts


def multimodal_tokens(config: Any, tokenizer: Any, notes: list[str]) -> Any:
    """Give every image/video/audio token id of the config a token of its own in the tokenizer, named as the
    architecture's processor names it (`<|image_pad|>`, `<start_of_image>`, ...) or, where no processor
    could be built, `<|stem|>` after the config key (`vision_start_token_id` -> `<|vision_start|>`, Qwen's
    own spelling). Returns the processor when it could be built (it needs the image libraries the node
    has), else None; the config is updated in place."""
    import transformers  # noqa: PLC0415
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES  # noqa: PLC0415

    processor = None
    named: dict[str, str] = {}
    proc_name = PROCESSOR_MAPPING_NAMES.get(config.model_type)
    try:
        proc_cls = getattr(transformers, str(proc_name))
        processor = proc_cls(**_processor_parts(config.model_type, proc_cls, tokenizer, vision_geometry(config)))
        named = {
            a[: -len("_token")]: getattr(processor, a)
            for a in dir(processor)
            if a.endswith("_token") and isinstance(getattr(processor, a, None), str)
        }
    except Exception as exc:  # the processor is a convenience; the tokens below are what matters
        notes.append(f"processor {proc_name or '(none)'} not written: {_one_line(exc)[:160]}")
        processor = None
    real = len(tokenizer)
    changed = {}
    for sub in _sub_configs(config):
        for key, value in list(vars(sub).items()):
            if not (key.endswith(("_token_id", "_token_index")) and _is_int(value)) or key in SPECIAL_TOKEN_KEYS:
                continue
            if value < real:
                continue
            stem = key.rsplit("_token", 1)[0]
            text = named.get(stem) or f"<|{stem}|>"
            if tokenizer.convert_tokens_to_ids(text) in (None, tokenizer.unk_token_id):
                tokenizer.add_special_tokens({"additional_special_tokens": [text]}, replace_extra_special_tokens=False)
            setattr(sub, key, tokenizer.convert_tokens_to_ids(text))
            changed[key] = text
    if changed:
        notes.append("tokens: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
    if processor is not None:  # rebuilt so that it reads the ids of the tokens just added
        proc_cls = type(processor)
        processor = proc_cls(**_processor_parts(config.model_type, proc_cls, tokenizer, vision_geometry(config)))
    return processor


def _write_mtp(cls: Any, config: Any, architecture: str, out: Path, res: Result) -> None:
    from safetensors.torch import load_file, save_file  # noqa: PLC0415

    extra = mtp_tensors(cls, config, architecture)
    if not extra:
        res.notes.append("mtp: config count set, no MTP weights (naming of this checkpoint not known here)")
        return
    weights = out / "model.safetensors"
    state = load_file(weights)
    state.update(extra)
    save_file(state, weights, metadata={"format": "pt"})
    res.params += sum(t.numel() for t in extra.values())
    res.notes.append(f"mtp: {len(extra)} tensors in the {MTP_NAMING[architecture]!r} naming")


def _extra_files(architecture: str, out: Path) -> None:
    import torch  # noqa: PLC0415

    if architecture == "Qwen2_5OmniForConditionalGeneration":
        # its from_pretrained loads the talker's speaker table whether or not the talker exists
        torch.save({}, out / "spk_dict.pt")


def build(family: Family, architecture: str, tokenizer_dir: Path, out_root: Path) -> Result:
    import torch  # noqa: PLC0415
    from transformers import AutoTokenizer, GenerationConfig  # noqa: PLC0415

    res = Result(family.name, architecture, list(family.kinds), borrowed_from=family.borrowed_from)
    cls, config_class = resolve(architecture)
    res.found = cls is not None
    if cls is None:
        res.error = f"{architecture} is not in transformers (its bridge needs the checkpoint's remote code)"
        return res
    if config_class is None:
        res.error = f"{architecture} has no config_class in transformers"
        return res
    res.config_class = config_class.__name__
    out = out_root / family.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        role_notes: list[str] = []
        add_role_tokens(str(getattr(config_class, "model_type", "")), tokenizer, role_notes)
        vocab = padded_vocab(len(tokenizer))
        tokens = (vocab, tokenizer.eos_token_id, tokenizer.pad_token_id)
        config, res.overrides, res.notes = tiny_config(cls, config_class, family, architecture, tokens)
        res.notes += role_notes
        processor = multimodal_tokens(config, tokenizer, res.notes) if "vlm" in family.kinds else None
        if len(tokenizer) > vocab:
            raise ValueError(f"the tokenizer grew to {len(tokenizer)} tokens, past the {vocab} embedding rows")
        torch.manual_seed(0)
        model = cls(config).to(torch.bfloat16)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        model.save_pretrained(out, safe_serialization=True)
        res.params = sum(p.numel() for p in model.parameters())
        if "mtp" in family.kinds:
            _write_mtp(cls, config, architecture, out, res)
        GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(out)
        if processor is not None:
            processor.save_pretrained(out)
        elif len(tokenizer) > len(AutoTokenizer.from_pretrained(tokenizer_dir)):
            tokenizer.save_pretrained(out)
        else:
            for name in TOKENIZER_FILES:
                if (tokenizer_dir / name).is_file():
                    shutil.copy2(tokenizer_dir / name, out / name)
        _extra_files(architecture, out)
        res.mb = round(sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20, 2)
        if res.mb > MAX_MB:
            res.error = f"{res.mb} MB on disk, over the {MAX_MB:g} MB limit"
            return res
        res.ok = True
    except Exception as exc:  # one family's failure is a row of the report, not the end
        res.error = _one_line(exc)
    return res


def plan_row(family: Family, architecture: str, tokens: tuple[int, int | None, int | None]) -> Result:
    """What --list shows: the class, its config class and the overrides, without building."""
    res = Result(family.name, architecture, list(family.kinds), borrowed_from=family.borrowed_from)
    try:
        cls, config_class = resolve(architecture)
    except ImportError as exc:
        res.error = _one_line(exc)
        return res
    res.found = cls is not None
    if cls is None:
        res.error = f"{architecture} is not in transformers"
        return res
    if config_class is not None:
        res.config_class = config_class.__name__
        defaults = config_class().to_dict()
        res.overrides, res.notes = shrink_overrides(
            defaults, tokens[0], eos=tokens[1], pad=tokens[2], architecture=architecture, mrope=mrope_default(cls)
        )
        if "moe" in family.kinds:
            res.overrides = deep_merge(res.overrides, moe_overrides(defaults))
        if "mtp" in family.kinds:
            res.overrides = deep_merge(res.overrides, mtp_overrides(defaults))
        res.ok = True
    return res


def table(rows: Iterable[Result], built: bool) -> str:
    lines = [f"{'family':16} {'architecture':42} {'kinds':11} {'status':6} {'params':>10} {'MB':>6}  detail"]
    for r in rows:
        status = "ok" if r.ok else ("absent" if not r.found else "error")
        params = f"{r.params:,}" if built and r.ok else "-"
        mb = f"{r.mb:.2f}" if built and r.ok else "-"
        detail = r.error or (f"(architecture of {r.borrowed_from}) " if r.borrowed_from else "") + r.config_class
        lines.append(
            f"{r.family:16} {r.architecture:42} {','.join(r.kinds) or '-':11} {status:6} {params:>10} {mb:>6}  {detail}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_root", type=Path, nargs="?", help="write OUT_ROOT/<family>/ (not needed with --list)")
    ap.add_argument("--tokenizer", type=Path, help="local HF directory whose tokenizer every model shares")
    ap.add_argument("--family", action="append", default=[], help="build only this family (repeatable)")
    ap.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml")
    ap.add_argument("--list", action="store_true", help="print the table without building")
    ap.add_argument("--report", type=Path, help="write the per-family results as JSON")
    return ap.parse_args(argv)


def _select(families: Mapping[str, Family], wanted: list[str]) -> list[Family]:
    for name in wanted:
        if name not in families:
            close = difflib.get_close_matches(name, list(families), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(f"unknown family {name!r} (matrix.yaml has {len(families)}){hint}")
    return [families[n] for n in wanted] if wanted else list(families.values())


def run(args: argparse.Namespace) -> int:
    import yaml  # noqa: PLC0415

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    try:
        matrix = yaml.safe_load(args.matrix.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read {args.matrix}: {_one_line(exc)}") from exc
    families = load_families(matrix)
    selected = _select(families, args.family)
    tok = args.tokenizer
    if tok is None or not (tok / "tokenizer_config.json").is_file():
        raise UsageError(
            f"--tokenizer {tok}: no tokenizer_config.json there; pass a local HF tokenizer directory "
            "(python3 /work/shared/gpu/make-tiny-assets.py DIR writes one at DIR/tiny/qwen2)"
        )
    if not args.list and args.out_root is None:
        raise UsageError("OUT_ROOT is required unless --list")
    rows: list[Result] = []
    if args.list:
        from transformers import AutoTokenizer  # noqa: PLC0415

        tokenizer = AutoTokenizer.from_pretrained(tok)
        tokens = (padded_vocab(len(tokenizer)), tokenizer.eos_token_id, tokenizer.pad_token_id)
        for fam in selected:
            for arch in fam.architectures or ("-",):
                rows.append(
                    plan_row(fam, arch, tokens)
                    if arch != "-"
                    else Result(fam.name, "-", list(fam.kinds), error="the family names no architecture")
                )
    else:
        import torch  # noqa: PLC0415

        torch.set_num_threads(1)
        for fam in selected:
            if not fam.architectures:
                rows.append(Result(fam.name, "-", list(fam.kinds), error="the family names no architecture"))
            for arch in fam.architectures:
                rows.append(build(fam, arch, tok, args.out_root))
                print(table(rows[-1:], built=True).splitlines()[1], flush=True)
    print(table(rows, built=not args.list))
    if args.report:
        import transformers  # noqa: PLC0415

        doc = {"transformers": transformers.__version__, "built": not args.list, "families": [asdict(r) for r in rows]}
        args.report.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0 if args.list or all(r.ok for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"make_tiny_model: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
