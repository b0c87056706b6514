#!/usr/bin/env python3
"""Benchmark the evidence parser: throughput (MB/s) and peak memory on a large verl-shaped log.

The log is synthetic but follows verl's real console formats (Ray actor prefixes with colours,
`[repeated Nx across cluster]`, ~100-metric `step:N - ...` lines, tqdm progress with carriage
returns, checkpoint saves every 50 steps, a validation dict, a traceback at the end) with worker
chatter between steps, about 8 KB of log per training step as in real verl runs.

    python tools/bench_evidence.py [--mb 200] [--repeat 3] [--workers N]
    python tools/bench_evidence.py --mb 1024 --memory    # a 1 GB log, with peak RSS

`--excerpts DIR` concatenates the real excerpts in DIR instead (read in place, never copied): a
worst case, since they were chosen for their tracebacks and checkpoint lines.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from verl_e2e.judge.parallel import parse_file

CHATTER = [
    "\x1b[36m(WorkerDict pid={pid})\x1b[0m kwargs: {{'n': 1, 'logprobs': 0, 'max_tokens': 512, "
    "'detokenize': False, 'temperature': 1.0, 'top_k': -1, 'top_p': 1, 'ignore_eos': False}}",
    "\x1b[36m(WorkerDict pid={pid}, ip=10.0.0.{ip})\x1b[0m /usr/local/lib/python3.10/dist-packages/torch/"
    "distributed/fsdp/fully_sharded_data_parallel.py:690: FutureWarning: state_dict_type() is deprecated."
    "\x1b[32m [repeated 7x across cluster]\x1b[0m",
    "\x1b[36m(TaskRunner pid={pid})\x1b[0m list(reward_extra_infos_dict.keys())=[]",
    "\x1b[36m(WorkerDict pid={pid})\x1b[0m INFO {n:02d}-01 12:00:00 [async_llm.py:270] Added request {n}.",
    "\x1b[36m(AgentLoopWorker pid={pid})\x1b[0m rollout batch {n}: 256 prompts, 1024 responses, "
    "mean length 231.4 tokens, 0 aborted",
    "\x1b[36m(WorkerDict pid={pid})\x1b[0m [Rank {r}] micro batch {n} done in 0.{n:03d}s, tokens/s 5{n:03d}",
]


def step_line(step: int, rnd: random.Random) -> str:
    metrics = {
        "training/global_step": step,
        "training/epoch": 0,
        "actor/pg_loss": rnd.uniform(-0.05, 0.05),
        "actor/grad_norm": rnd.uniform(0.01, 0.4),
        "actor/entropy": rnd.uniform(0.2, 0.6),
        "actor/kl_loss": rnd.uniform(0, 0.01),
        "actor/lr": 2e-06,
        "critic/vf_loss": rnd.uniform(0.01, 0.2),
        "critic/score/mean": min(1.0, 0.3 + step / 2000 + rnd.uniform(-0.05, 0.05)),
        "critic/rewards/mean": rnd.uniform(0.2, 0.9),
        "response_length/mean": rnd.uniform(150, 300),
    }
    for i in range(90):
        metrics[f"timing_s/stage_{i}"] = rnd.uniform(0, 20)
    body = " - ".join(f"{k}:{v}" for k, v in metrics.items())
    return f"\x1b[36m(TaskRunner pid=1200)\x1b[0m step:{step} - {body}"


def synthetic_log(target_bytes: int, seed: int = 0) -> Iterator[str]:
    rnd = random.Random(seed)
    yield "+ ENGINE=vllm\n+ USE_MBRIDGE=True\n+ VANILLA_MBRIDGE=False\n+ LORA_RANK=4\n"
    yield "+ python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml\n"
    yield "\x1b[36m(TaskRunner pid=1200)\x1b[0m Training from scratch\n"
    size, step, total = 0, 0, max(1, target_bytes // 8200)
    while size < target_bytes:
        step += 1
        chunk = []
        for _ in range(30):
            n = rnd.randrange(1000)
            chunk.append(rnd.choice(CHATTER).format(pid=2000 + n % 16, ip=n % 8, n=n, r=n % 8))
        chunk.append(step_line(step, rnd))
        pct = min(100, step * 100 // total)
        chunk.append(f"Training Progress: {pct:3d}%|#####     | {step}/{total} [01:00<10:00, 1.2s/it]\r")
        if step % 50 == 0:
            root = "/ckpt/verl-test/run/global_step_"
            chunk.append(f"\x1b[36m(TaskRunner pid=1200)\x1b[0m local_global_step_folder: {root}{step}")
            chunk += [
                f"\x1b[36m(WorkerDict pid=20{r})\x1b[0m [Rank {r}] Saved model to {root}{step}/actor" for r in range(8)
            ]
        text = "\n".join(chunk) + "\n"
        size += len(text)
        yield text
    prefix = "\x1b[36m(TaskRunner pid=1200)\x1b[0m"
    yield f"{prefix} (\"Final validation metrics: {{'val-core/openai/gsm8k/acc/mean@1': \"\n"
    yield "\x1b[36m(TaskRunner pid=1200)\x1b[0m  '0.71}')\n"


def write_log(path: Path, mb: int, excerpts: Path | None) -> int:
    target = mb * 1024 * 1024
    written = 0
    with path.open("wb") as fh:
        if excerpts is not None:
            blob = b"\n".join(p.read_bytes() for p in sorted(excerpts.glob("*.log")))
            while written < target:
                fh.write(blob)
                written += len(blob)
        else:
            for part in synthetic_log(target):
                data = part.encode()
                fh.write(data)
                written += len(data)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200, help="log size in MB (default 200)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="parser processes (default: all cores)")
    ap.add_argument("--excerpts", type=Path, help="concatenate real excerpts from this directory instead")
    ap.add_argument("--memory", action="store_true", help="report the peak RSS of one parse")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "verl.log"
        size = write_log(log, args.mb, args.excerpts)
        mb = size / 1024 / 1024
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ev = parse_file(log, workers=args.workers)
            times.append(time.perf_counter() - t0)
        best = min(times)
        print(
            f"{mb:.0f} MB, {ev.step_lines} step lines, saves {len(ev.saves)}, class {ev.failure_class}: "
            f"best {mb / best:.0f} MB/s, median {mb / sorted(times)[len(times) // 2]:.0f} MB/s "
            f"(workers={args.workers or 'auto'})"
        )
        if args.memory:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"peak RSS of this process after parsing: {rss:.0f} MB (the log itself is {mb:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
