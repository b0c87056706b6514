#!/usr/bin/env python3
"""Make a tiny random Qwen3-MoE checkpoint that shares a local tokenizer, for MoE cells on an offline node.

    python tools/make_tiny_moe.py TOKENIZER_DIR OUT_DIR [--experts 8] [--top-k 2]

TOKENIZER_DIR is any local Hugging Face model directory whose tokenizer files are copied (the tiny
Qwen2 of the GPU node's asset script has one). The model is `Qwen3MoeForCausalLM` (the architecture the
`qwen3_moe` family's bridge serves): 2 layers, hidden 256, every layer sparse with `--experts` experts
of which `--top-k` route each token, random bf16 weights, no hub access. It exists so a MoE family's
Level 0 (and, with enough GPUs, its expert-parallel cells) can run where no real MoE checkpoint fits
or can be downloaded; a cell on it proves construction and training mechanics only.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def make(tokenizer_dir: Path, out: Path, experts: int, top_k: int) -> int:
    """Write the checkpoint; returns its parameter count."""
    # torch and transformers exist on the GPU node only; --help and argument errors work without them
    import torch  # noqa: PLC0415
    from transformers import (  # noqa: PLC0415
        AutoTokenizer,
        GenerationConfig,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy2(tokenizer_dir / name, out / name)
    vocab = -(-len(tokenizer) // 128) * 128  # a multiple of 128, as Megatron pads it
    config = Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_experts=experts,
        num_experts_per_tok=top_k,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id).save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    args = ap.parse_args()
    if not (args.tokenizer_dir / "tokenizer_config.json").is_file():
        print(
            f"make_tiny_moe: {args.tokenizer_dir} has no tokenizer_config.json; pass a local HF model directory",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.top_k <= args.experts:
        print(f"make_tiny_moe: --top-k {args.top_k} must be between 1 and --experts {args.experts}", file=sys.stderr)
        return 2
    params = make(args.tokenizer_dir, args.out, args.experts, args.top_k)
    what = f"Qwen3MoeForCausalLM, {args.experts} experts (top-{args.top_k}), {params} parameters"
    print(f"make_tiny_moe: {args.out}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
