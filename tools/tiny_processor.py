"""The processor side of a tiny multimodal model, for tools/make_tiny_model.py (tiny_build.py builds it).

vLLM loads a multimodal model's processor even for text prompts, and the processor has to agree with the
towers the shrink built (patch size, merge size, mel bins) and with the tokenizer (a token for every
image/video/audio id of the config). transformers is imported inside the functions.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_keys import SPECIAL_TOKEN_KEYS, _one_line
from tiny_shrink import _is_int


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


def audio_geometry(config: Any) -> dict[str, int]:
    """The mel bins the audio tower's first convolution takes, as a feature extractor names them: one at
    its class defaults makes 80 bins for a tower built on 128 (a tiny Qwen2-Audio in vLLM: "expected
    input[10, 80, 3000] to have 128 channels")."""
    bins = [b for b in (getattr(c, "num_mel_bins", None) for c in _sub_configs(config)) if _is_int(b)]
    return {"feature_size": int(bins[0])} if bins else {}


def _built(cls: Any, sizes: Mapping[str, int]) -> Any:
    try:
        return cls(**sizes)
    except TypeError:  # a processor without these settings (an audio feature extractor)
        return cls()


def _processor_parts(
    model_type: str,
    proc_cls: Any,
    tokenizer: Any,
    sizes: Mapping[str, int] | None = None,
    audio: Mapping[str, int] | None = None,
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
        names = next((found for t in _type_and_bases(model_type) if (found := tables[attr]().get(t))), None)
        names = names.values() if isinstance(names, Mapping) else ([names] if isinstance(names, str) else names or [])
        name = next(n for n in names if n)
        cls = getattr(transformers, name)
        settings = dict(sizes or {})
        if attr == "video_processor" and getattr(cls, "draw_on_frames", False):
            # ERNIE-4.5-VL draws timestamps on video frames with a font file the release ships beside its
            # processor, and refuses to save without one; text-prompt cells send no video
            settings["draw_on_frames"] = False
        parts[attr] = _built(cls, settings) if attr in ("image_processor", "video_processor") else cls()
        if attr == "feature_extractor" and audio:
            parts[attr] = _built(cls, audio)
    return parts


def _type_and_bases(model_type: str) -> list[str]:
    """`qwen3_vl_moe`, then `qwen3_vl`, then `qwen3`: a MoE or text variant shares its base's processors,
    which the auto tables list under the base's model type only."""
    parts = model_type.split("_")
    return ["_".join(parts[:n]) for n in range(len(parts), 0, -1)]


_GLM_V = {
    "image_start": "<|begin_of_image|>",
    "image_end": "<|end_of_image|>",
    "video_start": "<|begin_of_video|>",
    "video_end": "<|end_of_video|>",
}
# model_type -> the release tokenizer's spelling of tokens no processor names: vLLM's GLM-4.x V matches its
# video placeholder as the text "<|begin_of_video|><|video|><|end_of_video|>" (glm4_1v.py), which finds
# nothing where the frame tokens are spelled after the config key ("Failed to apply prompt replacement for
# mm_items['video'][0]", H200, 2026-12-04)
RELEASE_SPELLINGS: dict[str, Mapping[str, str]] = {"glm4v": _GLM_V, "glm4v_moe": _GLM_V}


def _name_tokens(tokenizer: Any, changed: Mapping[str, str]) -> None:
    """Register each added token under the name a processor reads off the tokenizer (`image_token`,
    `boi_token`, whose `_id` follows): the released tokenizers carry them as model-specific special
    tokens, and Gemma 3's, Gemma 4's and ERNIE-4.5-VL's processors fail without them."""
    named = {key.rsplit("_token", 1)[0] + "_token": text for key, text in changed.items()}
    setter = getattr(tokenizer, "_set_model_specific_special_tokens", None)
    if named and setter is not None:
        setter(special_tokens=named)


def multimodal_tokens(config: Any, tokenizer: Any, notes: list[str]) -> Any:
    """Give every image/video/audio token id of the config a token of its own in the tokenizer, named as the
    architecture's processor names it (`<|image_pad|>`, `<start_of_image>`, ...) or, where no processor
    could be built yet, `<|stem|>` after the config key (`vision_start_token_id` -> `<|vision_start|>`,
    Qwen's own spelling), registered under the name processors read (`image_token`). Returns the processor,
    built to the tokens once they exist, or None where it cannot be (the report says why: the model is then
    for text prompts, and vLLM will not load it); the config is updated in place."""
    import transformers  # noqa: PLC0415
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES  # noqa: PLC0415

    proc_name = next((n for t in _type_and_bases(config.model_type) if (n := PROCESSOR_MAPPING_NAMES.get(t))), None)
    try:
        proc_cls = getattr(transformers, str(proc_name), None)
    except ImportError as exc:  # a lazy import the node's libraries cannot satisfy (an image library)
        notes.append(f"processor {proc_name} not written: {_one_line(exc)[:160]}")
        proc_cls = None
    named: dict[str, str] = dict(RELEASE_SPELLINGS.get(config.model_type, {}))
    first_try: str | None = None
    try:
        processor = _processor(config, proc_cls, tokenizer)
        named |= {
            a[: -len("_token")]: getattr(processor, a)
            for a in dir(processor)
            if a.endswith("_token") and isinstance(getattr(processor, a, None), str)
        }
    except Exception as exc:  # the tokens below come first; the processor is built again after them
        first_try = _one_line(exc)[:160]
    changed = _add_tokens(config, tokenizer, named)
    if changed:
        notes.append("tokens: " + ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
        _name_tokens(tokenizer, changed)
    try:  # built (again) so that it reads the ids and names of the tokens just added
        processor = _processor(config, proc_cls, tokenizer)
    except Exception as exc:
        notes.append(f"processor {proc_name or '(none)'} not written: {_one_line(exc)[:160]}")
        return None
    if first_try is not None:
        notes.append(f"processor {proc_name} written once the tokenizer named its tokens (before: {first_try})")
    return processor


def _add_tokens(config: Any, tokenizer: Any, named: Mapping[str, str]) -> dict[str, str]:
    """Each multimodal token id past the tokenizer's vocabulary, or one inside it that is not the token the
    processor names (EXAONE 4.5's default image id is 67, an ordinary token of the tiny vocabulary, while
    vLLM looks up the processor's `<|image_pad|>`: KeyError, H200, 2026-12-04) -> a token added for it
    (config updated)."""
    real = len(tokenizer)
    changed = {}
    for sub in _sub_configs(config):
        for key, value in list(vars(sub).items()):
            if not (key.endswith(("_token_id", "_token_index")) and _is_int(value)) or key in SPECIAL_TOKEN_KEYS:
                continue
            stem = key.rsplit("_token", 1)[0]
            if value < real and (stem not in named or tokenizer.convert_ids_to_tokens(value) == named[stem]):
                continue  # a token of the vocabulary already, and no processor names another for it
            text = named.get(stem) or f"<|{stem}|>"
            if tokenizer.convert_tokens_to_ids(text) in (None, tokenizer.unk_token_id):
                tokenizer.add_special_tokens({"additional_special_tokens": [text]}, replace_extra_special_tokens=False)
            setattr(sub, key, tokenizer.convert_tokens_to_ids(text))
            changed[key] = text
    return changed


def _processor(config: Any, proc_cls: Any, tokenizer: Any) -> Any:
    """The architecture's processor, built to the tiny towers' patch geometry and mel bins."""
    if proc_cls is None:
        raise LookupError(f"transformers has no processor class for model type {config.model_type}")
    return proc_cls(
        **_processor_parts(config.model_type, proc_cls, tokenizer, vision_geometry(config), audio_geometry(config))
    )


# ChatML, as the tiny tokenizer's own template renders a string message, plus the parts of a multimodal one:
# verl's dataset turns "<image>What colour ..." into [{"type": "image", ...}, {"type": "text", ...}], and the
# tokenizer's template would concatenate that list into the prompt as text
_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ IMAGE }}{% elif part['type'] == 'video' %}{{ VIDEO }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def chat_template(config: Any, tokenizer: Any, processor: Any) -> str:
    """The chat template of a tiny VLM: each picture becomes the processor's image token (which the processor
    expands to the picture's patch count), between the vision start and end tokens where the config has them
    (Qwen's `<|vision_start|><|image_pad|><|vision_end|>`: its rope index finds pictures by the start token)."""
    where = [config, getattr(config, "text_config", None)]  # Qwen keeps them at the top, some in the text config
    start, end = (
        next((v for c in where if _is_int(v := getattr(c, f"vision_{edge}_token_id", None))), None)
        for edge in ("start", "end")
    )
    around = (
        (tokenizer.convert_ids_to_tokens(start), tokenizer.convert_ids_to_tokens(end))
        if start is not None and end is not None
        else ("", "")
    )

    def literal(kind: str) -> str:
        token = getattr(processor, f"{kind}_token", None)
        return json.dumps(f"{around[0]}{token}{around[1]}" if isinstance(token, str) else "")

    return _TEMPLATE.replace("IMAGE", literal("image")).replace("VIDEO", literal("video"))
