#!/usr/bin/env python3
"""Write Level 5's arithmetic task and measure how much GRPO signal a model gets from it before training.

    python3 tools/make_arith_task.py OUT_DIR [--train N] [--test N] [--seed S]
                                     [--calibrate MODEL_DIR [--temperature T ...] [--prompts N]]

Why: the learning-signal cell only shows a trend when the model already earns the reward sometimes, so
the four answers GRPO samples per prompt differ (equal rewards give zero advantage and no gradient). This
tool writes the task and, with --calibrate, samples a local model on it the way the cell's rollout does.

The task itself is containers/arith_task.py's (loaded by path; it is the one source of the rows, the prompt
and reward.py that the driver and tools/offline_node.sh also write): OUT_DIR gets train.parquet, test.parquet
in verl's RL layout and reward.py with `compute_score(data_source, solution_str, ground_truth, extra_info=None,
**kwargs)`, the call verl's `reward.custom_reward_function` makes. Calibration loads that reward.py the way
verl's load_extern_object does, applies the tokenizer's chat template (add_generation_prompt=True, as verl's
RL dataset does), samples 4 answers per prompt at each --temperature with top_p 1.0, no top-k and 64 new
tokens (the cell's rollout), and decodes greedily for 20 prompts (verl's validation).

Figures for SmolLM2-135M-Instruct from make_smollm2.py (bf16 checkpoint run in float32 on a CPU, seed 0,
the first 64 test prompts of the default task; "varied" = prompts whose 4 rewards are not all equal):
  T=0.7 (the cell's): mean reward 0.196, 13.3 % of answers right, per-prompt sd 0.219, 86 % of prompts varied,
    11 % all zero;
  T=1.0 (verl's default): mean reward 0.098, 6.2 % right, per-prompt sd 0.137, 67 % varied, 33 % all zero;
  greedy: 7 of 20 right.
Wrong answers are mostly chatter ("What a delightful conundrum!") or a wrong sum ("3 + 48 = 126"); the 0.2 for
a short wrong number lifts the mean above the share right. Other wordings did no better (exact credit only,
T=1.0, 32 prompts x 4): for numbers 1..50 the task's wording 4.7 % right, "What is a + b?" 3.1 %, with a
one-shot example 2.3 %; for 10..99 a one-shot example 1.6 % and "a + b =" 0.8 %.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

TASK_MODULE = Path(__file__).resolve().parents[1] / "containers" / "arith_task.py"
Score = Callable[..., float]


def load_file(path: Path, name: str) -> ModuleType:
    """Import a .py file by path without adding it to sys.modules, as verl's load_module does."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generate(model_dir: Path, prompts: list[str], samples: int, temperature: float) -> list[list[str]]:
    """`samples` answers per prompt at `temperature` (0 decodes greedily), 64 new tokens each."""
    import torch  # noqa: PLC0415 - only --calibrate needs torch and transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
    options: dict[str, Any] = {"do_sample": False} if temperature == 0 else sampling
    torch.manual_seed(0)
    answers: list[list[str]] = []
    for start in range(0, len(prompts), 16):
        batch = tokenizer(prompts[start : start + 16], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            ids = model.generate(
                **batch.to(device),
                max_new_tokens=64,
                num_return_sequences=samples,
                pad_token_id=tokenizer.pad_token_id,
                **options,
            )
        texts = tokenizer.batch_decode(ids[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        answers += [texts[i : i + samples] for i in range(0, len(texts), samples)]
    return answers


def chat_prompts(model_dir: Path, rows: list[dict[str, Any]]) -> list[str]:
    """The prompt strings verl's RL dataset builds from the rows' chat messages."""
    from transformers import AutoTokenizer  # noqa: PLC0415

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]


def summary(groups: list[list[float]]) -> str:
    """Mean reward, exact-right share, per-prompt spread, and the share of prompts whose rewards vary."""
    means = [statistics.mean(g) for g in groups]
    right = statistics.mean(s == 1.0 for g in groups for s in g)
    varied = statistics.mean(len(set(g)) > 1 for g in groups)
    return (
        f"mean reward {statistics.mean(means):.3f}, right {right:.3f}, per-prompt sd {statistics.pstdev(means):.3f},"
        f" varied {varied:.2f}, all zero {statistics.mean(max(g) == 0 for g in groups):.2f}"
    )


def calibrate(model_dir: Path, out: Path, args: argparse.Namespace) -> None:
    """Print the figures for each temperature, three example answers, and greedy accuracy."""
    import pandas as pd  # noqa: PLC0415

    score: Score = load_file(out / "reward.py", "arith_reward").compute_score
    rows = pd.read_parquet(out / "test.parquet").head(args.prompts).to_dict("records")
    prompts = chat_prompts(model_dir, rows)
    truths = [r["reward_model"]["ground_truth"] for r in rows]
    for temperature in args.temperature:
        answers = generate(model_dir, prompts, 4, temperature)
        groups = [[score("verl_e2e/arith", a, t) for a in g] for g, t in zip(answers, truths, strict=True)]
        print(f"calibrate: T={temperature}, {len(groups)} prompts x 4: {summary(groups)}")
        for row, group in zip(rows[:3], answers[:3], strict=True):
            print(f"  {row['prompt'][0]['content']!r} ({row['reward_model']['ground_truth']}) -> {group[0][:80]!r}")
    greedy = generate(model_dir, prompts[:20], 1, 0.0)
    right = sum(score("verl_e2e/arith", g[0], t) == 1.0 for g, t in zip(greedy, truths[:20], strict=True))
    print(f"calibrate: greedy {right}/{len(greedy)} right; e.g. {greedy[0][0][:80]!r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="directory for train.parquet, test.parquet and reward.py")
    ap.add_argument("--train", type=int, default=2048)
    ap.add_argument("--test", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibrate", type=Path, metavar="MODEL_DIR", help="then sample this local HF model")
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.7, 1.0], help="sampling temperatures")
    ap.add_argument("--prompts", type=int, default=64, help="test prompts to sample (default 64)")
    args = ap.parse_args()
    if min(args.train, args.test, args.prompts) < 1:
        print("make_arith_task: --train, --test and --prompts must be positive", file=sys.stderr)
        return 2
    if args.calibrate is not None and not (args.calibrate / "config.json").is_file():
        print(f"make_arith_task: {args.calibrate} is not a local HF model directory (no config.json)", file=sys.stderr)
        return 2
    task = load_file(TASK_MODULE, "arith_task")
    counts = ["--train", str(args.train), "--test", str(args.test), "--seed", str(args.seed)]
    status: int = task.main([str(args.out), *counts])
    if status == 0 and args.calibrate is not None:
        calibrate(args.calibrate, args.out, args)
    return status


if __name__ == "__main__":
    sys.exit(main())
