"""The shrink rules: a config's defaults -> the overrides that make the model tiny, for tools/make_tiny_model.py.

Pure (dicts in, dicts out, no transformers or torch), so every rule is tested on plain config dicts; the
families of matrix.yaml are read here too. Standard library only.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_keys import (
    ARCH_OVERRIDES,
    EXPERT_KEYS,
    EXPERTS,
    HEAD_DIM,
    HEAD_DIM_KEYS,
    HEAD_KEYS,
    HEADS,
    HIDDEN,
    HIDDEN_KEYS,
    INDEX_LIST_SUFFIXES,
    INTERMEDIATE,
    INTERMEDIATE_KEYS,
    KV_HEADS,
    LAYER_INDEX_SCALARS,
    LAYER_KEYS,
    LINEAR_KEY_HEADS,
    LINEAR_VALUE_HEADS,
    LM_FACING_KEYS,
    MAMBA_GROUP_KEYS,
    MAMBA_HEAD_DIM_KEYS,
    MAMBA_HEAD_KEYS,
    MAMBA_HEADS,
    MAX_LAYERS,
    MAX_POSITIONS,
    MIN_LAYERS,
    MOE_INTERMEDIATE,
    MOE_INTERMEDIATE_KEYS,
    MTP_COUNT_KEY_DEFAULT,
    MTP_COUNT_KEYS,
    MTP_NAMING,
    Q_LORA_RANK,
    ROUTING_GROUP_KEYS,
    SHARED_EXPERT_KEYS,
    SPECIAL_TOKEN_KEYS,
    TOP_K,
    TOP_K_KEYS,
    TOWER_HEADS,
    TOWER_HIDDEN,
    TOWER_INTERMEDIATE,
    TOWER_NAMES,
    VOCAB_KEYS,
)


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


def mtp_overrides(defaults: Mapping[str, Any], architecture: str = "") -> dict[str, Any]:
    """One MTP layer: set the count key the config has (or the one its bridge reads) to 1. A checkpoint
    in DeepSeek-V3's MTP format (layers.{L+i}) counts them in DeepSeek's `num_nextn_predict_layers`, which
    that format's bridges read (Hy3's: a tiny config with the other key built MTP layers its bridge had no
    mapping for, H200, 2026-12-04)."""
    path = text_config_path(defaults)
    node: Mapping[str, Any] = defaults
    for k in path:
        node = node[k]
    fallback = MTP_COUNT_KEYS[0] if MTP_NAMING.get(architecture) in ("layers", "mtp_layers") else MTP_COUNT_KEY_DEFAULT
    key = next((k for k in MTP_COUNT_KEYS if k in node), fallback)
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
