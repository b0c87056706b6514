#!/usr/bin/env python3
"""Benchmark `verl-e2e plan --changed-files F --diff D` on a change of GitHub's maximum size (3,000 files).

The synthetic change is Bridge-shaped: every model family directory, conversion, PEFT, training, docs,
tests and recipes, with renames, and a unified diff with two hunks per file whose lines name the
things aspects look for, so every rule, aspect and ignore list is exercised. Prints the in-process
planning time (parse + enrich + select + expand + render, best of N) and the end-to-end CLI wall time
(process start included, best of N), plus the peak RSS of the CLI run.

    python tools/bench_plan.py [--files 3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verl_e2e.config.matrix import load_matrix
from verl_e2e.plan.cells import expand, uncovered
from verl_e2e.plan.changes import parse_name_status
from verl_e2e.plan.contract import Plan, render_json
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_architectures, with_diff
from verl_e2e.plan.select import select
from verl_e2e.plan.surface import shipped

HUNK = (
    "@@ -{a},7 +{a},7 @@ class {cls}:\n"
    "     def {fn}(self):\n"
    "         value = self.config.hidden_size\n"
    "-        self.{field} = {old}\n"
    "+        self.{field} = {new}\n"
    "         return value\n"
)
FIELDS = ["tensor_model_parallel_size", "num_moe_experts", "lora_dropout", "rotary_base", "hidden_dropout"]

AREAS = [
    "src/megatron/bridge/models/{fam}/{name}_provider.py",
    "src/megatron/bridge/models/{fam}/{name}_bridge.py",
    "src/megatron/bridge/models/{fam}/modeling_{name}/layer_{i}.py",
    "src/megatron/bridge/models/{fam}/data/collate_{i}.py",
    "src/megatron/bridge/models/conversion/{name}_{i}.py",
    "src/megatron/bridge/peft/{name}_{i}.py",
    "src/megatron/bridge/training/{name}_{i}.py",
    "src/megatron/bridge/recipes/{fam}/{name}_{i}.py",
    "tests/unit_tests/models/{fam}/test_{name}_{i}.py",
    "docs/models/{fam}/{name}_{i}.md",
    "examples/models/{fam}/{name}_{i}.sh",
]


def synthetic_diff(families: list[str], count: int, seed: int = 0) -> str:
    rnd = random.Random(seed)
    lines: list[str] = []
    for i in range(count):
        fam = rnd.choice(families)
        path = rnd.choice(AREAS).format(fam=fam, name=f"{fam}_{i % 7}", i=i)
        status = rnd.choice("MMMMAD")
        if i % 50 == 0:
            lines.append(f"R095\t{path}\t{path.replace('.py', '_new.py')}")
        else:
            lines.append(f"{status}\t{path}")
    return "\n".join(lines) + "\n"


def unified_diff(listing: str, seed: int = 0) -> str:
    """Two hunks per file, as `git diff` prints them; a third of the files only change a plain value."""
    rnd = random.Random(seed)
    out: list[str] = []
    for line in listing.splitlines():
        parts = line.split("\t")
        old, new = (parts[1], parts[2]) if len(parts) == 3 else (parts[1], parts[1])
        out.append(f"diff --git a/{old} b/{new}\nindex 1111111..2222222 100644\n--- a/{old}\n+++ b/{new}\n")
        for h in range(2):
            field = rnd.choice(FIELDS) if rnd.random() > 0.33 else "name"
            out.append(HUNK.format(a=10 + 40 * h, cls="Provider", fn=f"method_{h}", field=field, old=1, new=2))
    return "".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--families", type=int, default=6, help="how many model families the change touches")
    args = ap.parse_args()
    matrix = load_matrix()
    # a few families, as one large PR touches: a 3,000-file change over all 57 exceeds GitHub's matrix
    text = synthetic_diff(sorted(matrix.families)[:: max(1, len(matrix.families) // args.families)], args.files)
    diff = unified_diff(text)

    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        files = with_architectures(with_diff(parse_name_status(text), parse_unified_diff(diff)), shipped())
        selection = select(matrix, files, surface=shipped())
        plan = Plan(selection, expand(matrix, selection), uncovered=uncovered(matrix, selection))
        render_json(plan)
        best = min(best, time.perf_counter() - t0)
    cells, ms = len(plan.cells), best * 1000
    print(
        f"in-process: {args.files} files, {len(diff) // 1024} KiB of diff -> {cells} cells in {ms:.0f} ms "
        f"(best of {args.repeat})"
    )

    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(text)
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as dh:
        dh.write(diff)
    cmd = [sys.executable, "-m", "verl_e2e", "plan", "--changed-files", fh.name, "--diff", dh.name, "--format", "json"]
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    Path(fh.name).unlink()
    Path(dh.name).unlink()
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    best_ms, median_ms = min(walls) * 1000, sorted(walls)[len(walls) // 2] * 1000
    print(f"CLI end to end: best {best_ms:.0f} ms, median {median_ms:.0f} ms, peak RSS {rss_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
