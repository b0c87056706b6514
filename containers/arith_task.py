#!/usr/bin/env python3
"""Level 5's task: two-digit additions a small pretrained model can get better at in minutes.

    python3 arith_task.py OUT_DIR [--train N] [--test N] [--seed S]

writes OUT_DIR/train.parquet, OUT_DIR/test.parquet in verl's RL dataset layout (the columns verl's
GSM8K preprocessing writes: data_source, prompt as chat messages, ability, reward_model with the
ground truth, extra_info) and OUT_DIR/reward.py, the rule reward the cell names through
`reward.custom_reward_function.path`: 1.0 when the last integer in the response is the sum, else 0.

Why this task: a learning-signal check needs a reward the model already earns sometimes (so GRPO's
four answers to a prompt differ and carry a gradient) and can earn more often after a few dozen
updates. GSM8K's strict "#### answer" format gives a 135M model almost no reward at all. Sums of
numbers from 1 to 50, answered with the number alone, sit in between: SmolLM2-135M-Instruct (from
its Q4_1 GGUF) sampled at temperature 0.7 gets 14% right and answers short with a number 31% of the
time (16 prompts x 4 samples on a CPU; at temperature 1.0: 5% and 11%), so the cell samples at 0.7
and gives partial credit for the short form (calibration: docs/real-runs.md).

Runs with the verl image's Python (pandas and pyarrow are verl dependencies); the driver makes the
files under the cell's work dir when the runner's cache lacks them, and `tools/offline_node.sh setup`
puts them in the cache. Deterministic: the same seed gives the same rows, train and test disjoint.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

DATA_SOURCE = "verl_e2e/arith"
PROMPT = "What is {a} + {b}? Reply with only the number."
REWARD = '''"""verl-e2e Level 5 reward (written by containers/arith_task.py).

1.0 when the response's last integer is the sum; 0.2 for a short answer (at most 8 words) that gives a
number but the wrong one: the format the prompt asks for is learnt first, the sums follow.
"""

import re

_INT = re.compile(r"-?\\d+")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    text = solution_str.replace(",", "").strip()
    found = _INT.findall(text[-300:])
    if found and found[-1] == str(ground_truth).strip():
        return 1.0
    return 0.2 if found and len(text.split()) <= 8 else 0.0
'''


def pairs(seed: int, count: int, low: int = 1, high: int = 50) -> list[tuple[int, int]]:
    """`count` distinct (a, b) pairs in a seeded order."""
    every = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1)]
    random.Random(seed).shuffle(every)
    if count > len(every):
        raise ValueError(f"asked for {count} problems; there are {len(every)} two-digit sums")
    return every[:count]


def rows(problems: list[tuple[int, int]], split: str) -> list[dict[str, object]]:
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": PROMPT.format(a=a, b=b)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": i, "question": f"{a} + {b}", "answer": str(a + b)},
        }
        for i, (a, b) in enumerate(problems)
    ]


def write(out: Path, train: int = 2048, test: int = 128, seed: int = 0) -> list[Path]:
    """The two parquet files and reward.py under `out`; returns their paths."""
    import pandas as pd  # noqa: PLC0415 - the image has it; the CLI's --help must not need it

    problems = pairs(seed, train + test)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, part in (("train", problems[:train]), ("test", problems[train:])):
        path = out / f"{name}.parquet"
        pd.DataFrame(rows(part, name)).to_parquet(path)
        written.append(path)
    (out / "reward.py").write_text(REWARD)
    return [*written, out / "reward.py"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory for train.parquet, test.parquet and reward.py")
    ap.add_argument("--train", type=int, default=2048)
    ap.add_argument("--test", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        for path in write(args.out, args.train, args.test, args.seed):
            print(f"arith_task: wrote {path}")
    except (ValueError, OSError, ImportError) as exc:
        print(f"arith_task: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
