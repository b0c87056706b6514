"""Keys a released checkpoint's config.json carries that transformers' config class does not, and tensor
names it spells otherwise, for tools/make_tiny_model.py.

Why a module of its own: some releases ship remote code whose config names differ from the class
transformers later added (MiMo-V2-Flash's `hybrid_layer_pattern` where transformers has `layer_types`), and
Bridge's bridge or vLLM's model reads the release's names. A static override cannot hold them, because
they restate the tiny config's own pattern and sizes: they are derived here from the built config, so the
two namings always agree. Each entry was found by a Level 0 cell that stopped without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def _mimo_v2_flash(config: Any) -> dict[str, Any]:
    """MiMo-V2-Flash's remote-code names (Bridge's provider_bridge and vLLM's mimo_v2 model read them; a
    Level 0 cell stopped on `hybrid_layer_pattern`, H200, 2026-12-03): 1 marks a sliding-window layer in
    the attention pattern and a MoE layer in `moe_layer_freq`; transformers' model gives both kinds of
    attention layer the same head counts and sizes."""
    return {
        "hybrid_layer_pattern": [int(t == "sliding_attention") for t in config.layer_types],
        "moe_layer_freq": [int(t == "sparse") for t in config.mlp_layer_types],
        "sliding_window_size": config.sliding_window,
        "layernorm_epsilon": config.rms_norm_eps,
        "swa_num_attention_heads": config.num_attention_heads,
        "swa_num_key_value_heads": config.num_key_value_heads,
        "swa_head_dim": config.head_dim,
        "swa_v_head_dim": config.v_head_dim,
    }


def _minimax_m3(config: Any) -> dict[str, Any]:
    """MiniMax-M3 in vLLM, which reads config.json through a config class of its own: the vision tower
    takes its merge and temporal patch sizes from `vision_config.img_token_compression_config` (a Level 0
    cell stopped there, H200, 2026-12-03), and the MLP only the release's activation name ("Unsupported
    activation: silu. Only swigluoai is supported", 2026-12-04). transformers' class forces "silu" when it
    builds the config (its model computes the clamped SwiGLU inline), so the name is set on the built one."""
    vision = config.vision_config
    return {
        "text_config.hidden_act": "swigluoai",
        "vision_config.img_token_compression_config": {
            "spatial_merge_size": vision.spatial_merge_size,
            "temporal_patch_size": vision.temporal_patch_size,
        },
    }


def _step37(config: Any) -> dict[str, Any]:
    """Step-3.7's vision tower under the release's remote-code names, which Bridge's Step-3.7 model sizes its
    tower and align projector from (`width * 4` inputs: 6144 from the default 1536 where the tiny tower is
    128 wide, "Shape mismatch for megatron param image_insert_embedding.align_projector.weight", H200,
    2026-12-04)."""
    vision = config.vision_config
    return {
        # the per-head attention gate (`g_proj`), which transformers' model always has and the release
        # declares: without it Bridge builds a 512-row QKV for the tiny model's 516 with the gate (2026-12-04)
        "text_config.use_head_wise_attn_gate": True,
        "vision_config.width": vision.hidden_size,
        "vision_config.layers": vision.num_hidden_layers,
        "vision_config.heads": vision.num_attention_heads,
    }


def _ernie_vl(config: Any) -> dict[str, Any]:
    """ERNIE-4.5-VL as vLLM 0.24 reads it: the release's remote-code config keeps the vision merge sizes,
    the tower's width and the image patch id at the top, where transformers nests them under
    vision_config or names them otherwise (a Level 0 cell stopped on `spatial_conv_size`, H200, 2026-12-04;
    vllm/model_executor/models/ernie45_vl.py reads the six below). Its vision tower reads the release's
    `embed_dim` and `mlp_ratio` too, where transformers has `hidden_size` and `intermediate_size` (the next
    cell stopped on `embed_dim`, H200, 2026-12-04)."""
    vision = config.vision_config
    top = config.to_dict()
    # the release's config is flat: its text model's keys sit at the top, where vLLM's text model reads
    # them (`vocab_size` stopped the third cell, H200, 2026-12-04); transformers nests them in text_config
    text = config.text_config.to_dict()
    flat = {k: v for k, v in text.items() if k not in top and not k.startswith("_")}
    flat |= _ernie_vl_experts(text)
    return flat | {
        "vision_config.embed_dim": vision.hidden_size,
        "vision_config.mlp_ratio": vision.intermediate_size / vision.hidden_size,
        "spatial_conv_size": vision.spatial_merge_size,
        "use_temporal_conv": True,  # the release's; vLLM's resampler reads it (the cell after embed_dim)
        "temporal_conv_size": vision.temporal_merge_size,
        "pixel_hidden_size": vision.hidden_size,
        "im_patch_id": config.image_token_id,
        "hidden_size": config.text_config.hidden_size,
    }


def _ernie_vl_experts(text: dict[str, Any]) -> dict[str, Any]:
    """The release's expert keys are [text, vision] pairs and a first/last MoE layer, where transformers
    has one count, one width and `mlp_layer_types`; its model builds both groups alike (vLLM asserts
    equal counts)."""
    kinds = text.get("mlp_layer_types") or []
    sparse = [i for i, kind in enumerate(kinds) if kind == "sparse"]
    if not sparse or not isinstance(text.get("moe_num_experts"), int):
        return {}
    last = text["num_hidden_layers"] - 1

    def pair(value: Any) -> Any:  # transformers already keeps the width as a [text, vision] pair
        return value if isinstance(value, list) else [value, value]

    return {
        "moe_num_experts": pair(text["moe_num_experts"]),
        "moe_intermediate_size": pair(text["moe_intermediate_size"]),
        "moe_layer_start_index": [sparse[0]] * 2,
        "moe_layer_end_index": [last, last],
    }


def _hy_v3(config: Any) -> dict[str, Any]:
    """Hy3 as vLLM 0.24 reads it, through a config class of its own (vllm/transformers_utils/configs/hy_v3.py):
    the experts' width is the release's `expert_hidden_dim` (default 1536), where transformers has
    `moe_intermediate_size`. Without it vLLM built 1536-wide experts for the tiny model's 128: "start (0) +
    length (1536) exceeds dimension size (128)" at the first weight sync (H200, 2026-12-04)."""
    return {"expert_hidden_dim": config.moe_intermediate_size}


RELEASE_KEYS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "HYV3ForCausalLM": _hy_v3,
    "Ernie4_5_VLMoeForConditionalGeneration": _ernie_vl,
    "Step3p7ForConditionalGeneration": _step37,
    "MiMoV2FlashForCausalLM": _mimo_v2_flash,
    "MiniMaxM3SparseForConditionalGeneration": _minimax_m3,
}


# (architecture) -> (prefix transformers saves, the release's prefix) for tensor names that differ
RELEASE_NAMES: dict[str, tuple[tuple[str, str], ...]] = {
    # Gemma 3's release keeps the SigLIP tower under `vision_tower.vision_model.`; transformers 5.17 saves it
    # flattened (`vision_tower.`). Bridge exports in whichever namespace it loaded, and vLLM 0.24's SigLIP
    # loader takes only the release's: the first weight sync raised KeyError
    # 'embeddings.patch_embedding.bias' (H200, 2026-12-04).
    "Gemma3ForConditionalGeneration": (("vision_tower.", "vision_tower.vision_model."),),
}


def release_names(architecture: str, weights: Path) -> list[str]:
    """Rename the saved tensors to the release's names (RELEASE_NAMES); the note for the report, if any."""
    renames = RELEASE_NAMES.get(architecture)
    if not renames:
        return []
    from safetensors.torch import load_file, save_file  # noqa: PLC0415

    state, moved = load_file(weights), 0
    for old, new in renames:
        for key in [k for k in state if k.startswith(old) and not k.startswith(new)]:
            state[new + key[len(old) :]] = state.pop(key)
            moved += 1
    save_file(state, weights, metadata={"format": "pt"})
    return [f"release names: {moved} tensors renamed ({', '.join(f'{a} -> {b}' for a, b in renames)})"]


def add_release_keys(architecture: str, config: Any) -> list[str]:
    """Set the release's own keys on a built config (a dotted key names a sub-config); the keys set, for
    the report's notes."""
    derive = RELEASE_KEYS.get(architecture)
    if derive is None:
        return []
    keys = derive(config)
    for dotted, value in keys.items():
        holder = config
        *path, name = dotted.split(".")
        for part in path:
            holder = getattr(holder, part)
        setattr(holder, name, value)
    return [f"release keys: {', '.join(sorted(keys))}"]
