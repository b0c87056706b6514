#!/usr/bin/env python3
"""Level 4's VLM task: one small picture per prompt, so a VLM cell runs its vision path, not text alone.

    python3 image_task.py OUT_DIR [--train N] [--test N] [--size PX] [--seed S]

writes OUT_DIR/train.parquet, OUT_DIR/test.parquet in the layout verl's multimodal RL dataset reads (its
geo3k preprocessing: `prompt` as chat messages whose text holds an `<image>` placeholder, `images` as a list
of `{"bytes": PNG}`), and OUT_DIR/reward.py: 1.0 when the answer's last word is the picture's colour.

Why this task: a text-only prompt never calls the vision tower, the projector or the image-token merge
that Bridge maps for a VLM, nor vLLM's image path at rollout, so a Bridge change to any of them would pass
on GSM8K. A solid-colour square is the smallest input that goes through all of them; the reward only has
to be well-defined (Level 4 proves the step runs and the weights agree, not that the model learns).

The pictures are written by the standard library (zlib and struct; no imaging library), so the files can
be made where Pillow is missing; verl decodes them with Pillow. Deterministic: the same seed gives the
same rows.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import zlib
from pathlib import Path

DATA_SOURCE = "verl_e2e/colours"
PROMPT = "<image>What colour is this picture? Reply with one word."
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 180, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 220, 40),
    "black": (10, 10, 10),
    "white": (245, 245, 245),
    "orange": (245, 140, 20),
    "purple": (130, 50, 170),
}
REWARD = '''"""verl-e2e Level 4 VLM reward (written by containers/image_task.py): 1.0 when the response's last
word is the picture's colour, else 0."""

import re

_WORD = re.compile(r"[a-z]+")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    words = _WORD.findall(solution_str.lower()[-200:])
    return 1.0 if words and words[-1] == str(ground_truth).strip().lower() else 0.0
'''


def png(rgb: tuple[int, int, int], size: int) -> bytes:
    """A `size` x `size` 8-bit RGB PNG of one colour (signature, IHDR, one IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * size  # filter type 0 (None), then the pixels
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8 bits, colour type 2 (RGB)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b"")
    )


def rows(count: int, split: str, size: int, seed: int) -> list[dict[str, object]]:
    """`count` prompts, colours drawn in a seeded order; the picture's bytes travel in the row."""
    names = sorted(COLOURS)
    rng = random.Random(f"{seed}-{split}")
    out = []
    for i in range(count):
        name = rng.choice(names)
        out.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": PROMPT}],
                "images": [{"bytes": png(COLOURS[name], size)}],
                "ability": "vision",
                "reward_model": {"style": "rule", "ground_truth": name},
                "extra_info": {"split": split, "index": i, "answer": name},
            }
        )
    return out


def write(out: Path, train: int = 256, test: int = 64, size: int = 64, seed: int = 0) -> list[Path]:
    """The two parquet files and reward.py under `out`; returns their paths."""
    import pyarrow as pa  # noqa: PLC0415 - verl's image has it; the CLI's --help must not need it
    import pyarrow.parquet as pq  # noqa: PLC0415

    if min(train, test, size) < 1:
        raise ValueError(f"--train, --test and --size must be positive (got {train}, {test}, {size})")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, count in (("train", train), ("test", test)):
        path = out / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows(count, name, size, seed)), path)
        written.append(path)
    (out / "reward.py").write_text(REWARD)
    return [*written, out / "reward.py"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory for train.parquet, test.parquet and reward.py")
    ap.add_argument("--train", type=int, default=256)
    ap.add_argument("--test", type=int, default=64)
    ap.add_argument("--size", type=int, default=64, help="the pictures' side in pixels (default 64)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        for path in write(args.out, args.train, args.test, args.size, args.seed):
            print(f"image_task: wrote {path}")
    except (ValueError, OSError, ImportError) as exc:
        print(f"image_task: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
