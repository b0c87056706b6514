"""The special tokens verl's chat-turn builder requires of a model type, for the tiny models' tokenizer.

verl's agent loop builds prompts through a "continuous token" builder chosen by config.json's model_type
(verl/utils/tokenizer/continuous_token_wiring.py, `_MODEL_TYPE_TO_FAMILY`), and each builder looks up the
tokens that end a turn in that model's chat format (`require_token_id` in continuous_token.py and
deepseek.py, verl 1dda039). The tiny models share one local Qwen2 tokenizer, which has Qwen's `<|im_end|>`
but none of the others: a tiny DeepSeek stopped in the agent loop with "Tokenizer does not define
required token" DeepSeek's end-of-sentence token (H200, 2026-12-03). The released tokenizers define these tokens,
so the tiny ones get them as added special tokens. Standard library only (imported by make_tiny_model.py).
"""

from __future__ import annotations

from typing import Any

# DeepSeek spells its tokens with fullwidth vertical lines (U+FF5C) and lower one-eighth blocks (U+2581)
_DEEPSEEK = (
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
    "<\uff5cUser\uff5c>",
    "<\uff5cAssistant\uff5c>",
)
_MINIMAX = ("[e~[",)
_GLM = ("<|observation|>", "<|user|>")

# model_type -> the tokens its verl builder requires (or looks up), as the released tokenizer spells them
ROLE_TOKENS: dict[str, tuple[str, ...]] = {
    "deepseek_v2": _DEEPSEEK,
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v4": _DEEPSEEK,
    "minimax": _MINIMAX,
    "minimax_text_01": _MINIMAX,
    "minimax_m2": _MINIMAX,
    "minimax_vl_01": (*_MINIMAX, "<end_of_sentence>", "<beginning_of_sentence>"),
    "glm4_moe": _GLM,
    "glm_moe_dsa": _GLM,
    # GLM-4.5V: verl's tokenizer check requires the same role tokens (H200, 2026-12-04, evening)
    "glm4v_moe": _GLM,
    "gemma4": ("<|tool_response>",),
}


# model_type -> text vLLM's multimodal processor looks up in the vocabulary as single tokens: Gemma 3's
# merges the newlines around an image into the one token its SentencePiece vocabulary has for each run
# (vllm/model_executor/models/gemma3_mm.py `_apply_token_matches`: vocab["\n"] ... vocab["\n\n\n\n"]);
# a byte-level vocabulary has none ("KeyError: '\n'", a tiny Gemma 3 VLM on the H200, 2026-12-04)
VOCAB_TOKENS: dict[str, tuple[str, ...]] = {
    "gemma3": ("\n", "\n\n", "\n\n\n", "\n\n\n\n"),
    # MiniMax-M3's processor frames each image with these (vllm/models/minimax_m3/common/mm_preprocess.py
    # `VISION_START_TOKEN`, `VISION_END_TOKEN`: "KeyError: ']<]start of image[>['", H200, 2026-12-04)
    "minimax_m3_vl": ("]<]start of image[>[", "]<]end of image[>["),
}


def add_vocab_tokens(model_type: str, tokenizer: Any, notes: list[str]) -> None:
    """Add the VOCAB_TOKENS of model_type that the vocabulary lacks (as ordinary added tokens)."""
    missing = [t for t in VOCAB_TOKENS.get(model_type, ()) if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_tokens(missing)
        notes.append(f"tokenizer: added {', '.join(map(repr, missing))} (vLLM's {model_type} processor looks them up)")


def add_role_tokens(model_type: str, tokenizer: Any, notes: list[str]) -> None:
    """Add the tokens ROLE_TOKENS lists for model_type that the tokenizer lacks (as special tokens)."""
    missing = [t for t in ROLE_TOKENS.get(model_type, ()) if t not in tokenizer.get_vocab()]
    if not missing:
        return
    tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    notes.append(f"tokenizer: added {', '.join(missing)} (verl's {model_type} chat-turn builder requires them)")
