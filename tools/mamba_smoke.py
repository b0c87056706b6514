#!/usr/bin/env python3
"""The Mamba kernels Megatron-Core's mixer calls, checked on the GPU before a cell needs them; and the one
edit tools/build_mamba.sh makes to the sdists' setup.py.

    python3 tools/mamba_smoke.py                       forward and backward through causal_conv1d_fn,
                                                       mamba_chunk_scan_combined and
                                                       mamba_split_conv1d_scan_combined (bf16, on cuda)
    python3 tools/mamba_smoke.py --patch SETUP_PY 90   build for sm_90 only

Why the smoke: a wheel that imports may still lack kernels for the node's GPU ("no kernel image is available"),
and the mixer's memory-efficient path reaches causal-conv1d's CUDA functions only in the backward, three
minutes into a cell. Why the patch: causal-conv1d 1.7.0 and mamba-ssm 2.3.2 build nine architectures with
CUDA 13 (sm_75 to sm_121), one GPU kind needs one; their setup.py keeps the list in `cc_flag`, filled just
before the `# HACK` comment that both files carry, so the list is replaced there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MARKER = "    # HACK"


def patched(text: str, arch: str) -> str:
    """The setup.py text with `cc_flag` cut to one architecture, right before the `# HACK` comment."""
    if text.count(MARKER) != 1 or "cc_flag" not in text:
        raise ValueError("expected one '    # HACK' line after the cc_flag list (causal-conv1d 1.7.0, mamba-ssm 2.3.2)")
    keep = (
        '    cc_flag = [f for f in cc_flag if f != "-gencode" and not f.startswith("arch=")]'
        f' + ["-gencode", "arch=compute_{arch},code=sm_{arch}"]\n'
    )
    at = text.index(MARKER)
    return text[:at] + keep + text[at:]


def smoke() -> None:
    """Forward and backward through each kernel entry point, failing on any error or a zero gradient.
    (Imported here: `--patch` runs where the build has not happened yet, without torch.)"""
    import torch  # noqa: PLC0415
    from causal_conv1d import causal_conv1d_fn  # noqa: PLC0415
    from mamba_ssm.ops.triton.ssd_combined import (  # noqa: PLC0415
        mamba_chunk_scan_combined,
        mamba_split_conv1d_scan_combined,
    )

    dev, half = "cuda", torch.bfloat16
    torch.manual_seed(0)
    x = torch.randn(2, 64, 128, device=dev, dtype=half, requires_grad=True)
    w = torch.randn(64, 4, device=dev, dtype=half, requires_grad=True)
    causal_conv1d_fn(x, w, None, activation="silu").float().sum().backward()
    b, seq, heads, hdim, groups, state = 2, 128, 4, 16, 1, 16
    xs = torch.randn(b, seq, heads, hdim, device=dev, dtype=half, requires_grad=True)
    dt = torch.rand(b, seq, heads, device=dev, requires_grad=True)
    a = -torch.rand(heads, device=dev)
    bb = torch.randn(b, seq, groups, state, device=dev, dtype=half)
    cc = torch.randn(b, seq, groups, state, device=dev, dtype=half)
    mamba_chunk_scan_combined(xs, dt, a, bb, cc, chunk_size=64).float().sum().backward()
    width = 2 * heads * hdim + 2 * groups * state + heads
    zxbcdt = torch.randn(b, seq, width, device=dev, dtype=half, requires_grad=True)
    conv = heads * hdim + 2 * groups * state
    cw, cb = torch.randn(conv, 4, device=dev, dtype=half), torch.zeros(conv, device=dev, dtype=half)
    out = mamba_split_conv1d_scan_combined(
        zxbcdt, cw, cb, torch.zeros(heads, device=dev), a, torch.ones(heads, device=dev), 64, headdim=hdim
    )
    out.float().sum().backward()
    for name, grad in (("causal_conv1d", x.grad), ("chunk_scan", xs.grad), ("split_conv1d_scan", zxbcdt.grad)):
        if grad is None or not torch.isfinite(grad).all() or float(grad.abs().sum()) == 0.0:
            raise SystemExit(f"mamba_smoke: {name}: no finite, non-zero gradient")
        print(f"mamba_smoke: {name} forward and backward ran")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--patch", nargs=2, metavar=("SETUP_PY", "ARCH"), help="cut setup.py's cc_flag to sm_ARCH")
    args = ap.parse_args(argv)
    if args.patch:
        path, arch = Path(args.patch[0]), args.patch[1]
        if not arch.isdigit():
            print(f"mamba_smoke: ARCH {arch!r} is no compute capability like 90; pass its digits", file=sys.stderr)
            return 2
        try:
            path.write_text(patched(path.read_text(encoding="utf-8"), arch), encoding="utf-8")
        except (OSError, ValueError) as exc:
            print(f"mamba_smoke: {path}: {exc}", file=sys.stderr)
            return 1
        print(f"mamba_smoke: {path} builds for sm_{arch} only")
        return 0
    smoke()
    return 0


if __name__ == "__main__":
    sys.exit(main())
