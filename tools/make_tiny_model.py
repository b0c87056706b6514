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
Qwen3-MoE config) to any family. A family flagged `remote_code` (its checkpoint ships its own code) is
built from the classes Bridge's package registers with transformers where it does (tools/tiny_remote.py:
Bridge on the path, as on the node), and written with the configuration file and `auto_map` a release has.

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
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tiny_build import Result, build, mrope_default, resolve  # noqa: E402
from tiny_keys import Family, UsageError, _one_line, load_families  # noqa: E402
from tiny_shrink import (  # noqa: E402
    deep_merge,
    moe_overrides,
    mtp_overrides,
    padded_vocab,
    shrink_overrides,
)


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
