#!/usr/bin/env python3
"""Selection on labelled real Bridge PRs: must-recall, waste and GPU-minutes per PR, in either planning mode.

    python tools/bench_selection.py --data ../shared/bench/selection-dev.jsonl            # diff mode
    python tools/bench_selection.py --data ... --repo /path/to/Megatron-Bridge.git       # checkout mode
    python tools/bench_selection.py --data ... --budget 0                                # no GPU budget

Each line of the data file is one squash-merged PR (`sha`, `files`, `diff`, `must` and `allowed`
levels, as `score-selection` reads them). Diff mode plans `--changed-files F --diff D`; checkout mode
plans `--repo R --base SHA^ --head SHA`, as CI plans a PR. Levels are scored with the same rough
GPU-minute weights as score-selection (so runs compare); GPU-minutes per PR are the plan's own
(`gpu_minutes`: gpus x minutes of the cells that run within the budget). "run-recall" counts a must
level only when a cell of it runs (not deferred by the budget).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

COST = {0: 15, 1: 25, 2: 80, 3: 15, 4: 40, 5: 60}


def plan(row: dict[str, Any], args: argparse.Namespace, tmp: Path) -> tuple[dict[str, Any] | None, float, str]:
    cmd = [sys.executable, "-m", "verl_e2e", "plan", "--format", "json"]
    if args.budget is not None:
        cmd += ["--budget", str(args.budget)]
    if args.repo:
        cmd += ["--repo", args.repo, "--base", f"{row['sha']}^", "--head", row["sha"]]
    else:
        files, diff = tmp / f"{row['id']}.txt", tmp / f"{row['id']}.diff"
        files.write_text("\n".join(row["files"]) + "\n")
        diff.write_text(row.get("diff", ""))
        cmd += ["--changed-files", str(files), "--diff", str(diff)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    try:
        return json.loads(proc.stdout), took, ""
    except ValueError:
        return None, took, (proc.stderr or proc.stdout).strip()[-200:]


def pct(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/bench/selection-dev.jsonl")
    ap.add_argument("--repo", help="a Megatron-Bridge git dir holding every PR's commit (checkout mode)")
    ap.add_argument("--budget", type=int, help="pass --budget to plan (default: matrix.yaml's)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", action="store_true", help="list misses, waste and the costliest plans")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda r: plan(r, args, Path(tmp)), rows))
    must = hit = run_hit = cost = waste = errors = 0
    minutes: list[int] = []
    times: list[float] = []
    notes: list[str] = []
    for row, (p, took, err) in zip(rows, results, strict=True):
        times.append(took)
        if p is None:
            errors += 1
            notes.append(f"{row['id']} ERROR {err}")
            continue
        chosen, wanted, allowed = set(p["levels"]), set(row["must"]), set(row["allowed"])
        ran = {c["level"] for c in p["cells"]}
        must += len(wanted)
        hit += len(wanted & chosen)
        run_hit += len(wanted & ran)
        cost += sum(COST[lv] for lv in chosen)
        waste += sum(COST[lv] for lv in chosen - allowed)
        minutes.append(int(p["gpu_minutes"]))
        if wanted - chosen or chosen - allowed or (args.show and p.get("deferred")):
            notes.append(
                f"{row['id']} missed={sorted(wanted - chosen)} wasted={sorted(chosen - allowed)} "
                f"gpu_min={p['gpu_minutes']} deferred={len(p.get('deferred') or [])} | {row['subject'][:70]}"
            )
    mode = "checkout" if args.repo else "diff"
    print(
        f"mode={mode} prs={len(rows)} must-recall={hit / must:.3f} ({hit}/{must}) run-recall={run_hit / must:.3f} "
        f"waste={waste / cost if cost else 0:.2f} of cost errors={errors} | GPU-minutes per PR "
        f"p50={pct(minutes, 0.5)} p90={pct(minutes, 0.9)} max={max(minutes, default=0)} | "
        f"plan median {statistics.median(times):.2f} s"
    )
    if args.show:
        print("\n".join(notes))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
