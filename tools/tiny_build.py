"""The builder: transformers' classes, torch and files, for tools/make_tiny_model.py.

Instantiates each family's architecture from its shrunk config with seeded random weights, adds what
the released checkpoints have and transformers does not build (MTP layers, processor files, turn
tokens), and writes the checkpoint directory. transformers and torch are imported inside the functions,
so the pure rules load without them.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_keys import DERIVED, MAX_MB, MTP_COUNT_KEYS, MTP_NAMING, TOKENIZER_FILES, Family, _one_line
from tiny_processor import chat_template, multimodal_tokens
from tiny_release import add_release_keys, release_names
from tiny_remote import SHELLS, remote_classes, write_auto_map, write_shell
from tiny_shrink import (
    _is_int,
    _per_layer_keys,
    deep_merge,
    moe_overrides,
    mtp_overrides,
    padded_vocab,
    shrink_overrides,
)
from tiny_tokens import add_role_tokens, add_vocab_tokens


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
        if over.get(k) == DERIVED:
            continue
        sub = vars(obj).get(k)  # not getattr: per-layer configs refuse reads of their per-layer attributes
        if isinstance(sub, PretrainedConfig) and isinstance(v, Mapping):
            sub_over = over.get(k)
            out[k] = _config_kwargs(sub, v, sub_over if isinstance(sub_over, Mapping) else {})
        elif names is None or k in names or k in over or k == "model_type":  # a parent picks a sub-config's class by it
            out[k] = v
    return out


def _with_towers(default: Any, config_class: Any) -> Any:
    """The default config with its vision tower: some multimodal classes leave `vision_config` None by
    default (Gemma 4), and Bridge's VL bridge builds the tower from it (a Level 0 cell stopped there)."""
    sub_configs = getattr(config_class, "sub_configs", None) or {}
    if getattr(default, "vision_config", 1) is None and "vision_config" in sub_configs:
        return config_class(vision_config=sub_configs["vision_config"]().to_dict())
    return default


def tiny_config(
    cls: Any, config_class: Any, family: Family, architecture: str, tokens: tuple[int, int | None, int | None]
) -> tuple[Any, dict[str, Any], list[str]]:
    """The tiny config for one architecture; tokens is (vocab, eos, pad) of the tokenizer."""
    vocab, eos, pad = tokens
    default = _with_towers(config_class(), config_class) if "vlm" in family.kinds else config_class()
    defaults = default.to_dict()
    over, notes = shrink_overrides(
        defaults, vocab, eos=eos, pad=pad, architecture=architecture, mrope=mrope_default(cls)
    )
    if "moe" in family.kinds:
        over = deep_merge(over, moe_overrides(defaults))
    if "mtp" in family.kinds:
        over = deep_merge(over, mtp_overrides(defaults, architecture))
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
        name = {
            "layers": f"{m['prefix']}.{m['i']}.{m['rest']}",
            "mtp_layers": f"{m['prefix'].removesuffix('layers')}mtp_layers.{i}.{m['rest']}",
        }.get(naming, f"mtp.layers.{i}.{m['rest']}")
        out[name] = tensor.clone()
    gen = torch.Generator().manual_seed(2)
    prefix = next(m["prefix"] for k in state if (m := layer_re.match(k)) and "visual" not in k)
    for i in range(count):
        proj = (torch.randn(hidden, 2 * hidden, generator=gen) * 0.02).to(torch.bfloat16)
        out.update(_mtp_extras(naming, prefix=prefix, layers=layers, i=i, proj=proj, norm=state[norm_key]))
    return out


def _mtp_extras(naming: str, *, prefix: str, layers: int, i: int, proj: Any, norm: Any) -> dict[str, Any]:
    """What MTP layer i adds beside its decoder layer, by the release's naming: the projection of the
    [embedding, hidden] pair and the norms around it."""
    if naming == "layers":  # DeepSeek-V3's: the stack's next layers
        base = f"{prefix}.{layers + i}"
        names = ("eh_proj", "enorm", "hnorm", "shared_head.norm")
    elif naming == "mtp_layers":  # MiMo's: model.mtp_layers.N
        base = f"{prefix.removesuffix('layers')}mtp_layers.{i}"
        names = ("input_proj", "token_layernorm", "hidden_layernorm", "final_layernorm")
    elif i == 0:  # Qwen3-Next's: one `mtp.` block
        base, names = "mtp", ("fc", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm")
    else:
        return {}
    return {f"{base}.{names[0]}.weight": proj, **{f"{base}.{n}.weight": norm.clone() for n in names[1:]}}


def _write_mtp(cls: Any, config: Any, architecture: str, out: Path, res: Result) -> None:
    from safetensors.torch import load_file, save_file  # noqa: PLC0415

    extra = mtp_tensors(cls, config, architecture)
    if not extra:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        past = f"layers.{text.num_hidden_layers}."
        built = _mtp_count(config) > 0 and any(past in k for k in load_file(out / "model.safetensors"))
        res.notes.append(
            "mtp: the checkpoint's own model class builds its MTP layers"
            if built
            else "mtp: config count set, no MTP weights (naming of this checkpoint not known here)"
        )
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


def _classes(family: Family, architecture: str, res: Result) -> tuple[Any, Any]:
    """(model class, config class) from transformers, else from what Bridge registers for a family whose
    checkpoint ships its own code; res says why where there is none."""
    cls, config_class = resolve(architecture)
    why = f"{architecture} is not in transformers (its bridge needs the checkpoint's remote code)"
    if cls is None and family.remote_code:
        cls, config_class, why = remote_classes(family.package, architecture)
    res.found = cls is not None
    if cls is None:
        res.error = why
    elif config_class is None:
        res.error = f"{architecture} has no config_class in transformers"
    return cls, config_class


def build(family: Family, architecture: str, tokenizer_dir: Path, out_root: Path) -> Result:
    import torch  # noqa: PLC0415
    from transformers import AutoTokenizer, GenerationConfig  # noqa: PLC0415

    res = Result(family.name, architecture, list(family.kinds), borrowed_from=family.borrowed_from)
    cls, config_class = _classes(family, architecture, res)
    if cls is None or config_class is None:
        return res
    res.config_class = config_class.__name__
    out = out_root / family.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        role_notes: list[str] = []
        add_role_tokens(str(getattr(config_class, "model_type", "")), tokenizer, role_notes)
        add_vocab_tokens(str(getattr(config_class, "model_type", "")), tokenizer, role_notes)
        vocab = padded_vocab(len(tokenizer))
        tokens = (vocab, tokenizer.eos_token_id, tokenizer.pad_token_id)
        config, res.overrides, res.notes = tiny_config(cls, config_class, family, architecture, tokens)
        res.notes += role_notes + add_release_keys(architecture, config)
        processor = multimodal_tokens(config, tokenizer, res.notes) if "vlm" in family.kinds else None
        if len(tokenizer) > vocab:
            raise ValueError(f"the tokenizer grew to {len(tokenizer)} tokens, past the {vocab} embedding rows")
        torch.manual_seed(0)
        model = cls(config).to(torch.bfloat16)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        model.save_pretrained(out, safe_serialization=True)
        if architecture in SHELLS:
            res.notes += write_shell(architecture, out, config_class)
        elif not cls.__module__.startswith("transformers."):
            res.notes += write_auto_map(config_class, out)
        res.notes += release_names(architecture, out / "model.safetensors")
        res.params = sum(p.numel() for p in model.parameters())
        if "mtp" in family.kinds:
            _write_mtp(cls, config, architecture, out, res)
        GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(out)
        if processor is not None:
            processor.chat_template = tokenizer.chat_template = chat_template(config, tokenizer, processor)
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
        # a half-written directory would be taken for a model (an ERNIE-4.5-VL cell loaded one whose
        # processor file was cut short, H200, 2026-12-04)
        shutil.rmtree(out, ignore_errors=True)
    return res
