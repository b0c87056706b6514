#!/usr/bin/env python3
"""Selection on labelled real Bridge PRs: must-recall, waste and GPU-minutes per PR, in either planning mode.

    python tools/bench_selection.py --data ../shared/bench/selection-dev.jsonl            # diff mode
    python tools/bench_selection.py --data ... --repo /path/to/Megatron-Bridge.git       # checkout mode
    python tools/bench_selection.py --data ... --budget 0                                # no GPU budget
    python tools/bench_selection.py --probes tests/fixtures/selection-probes/probes.json --tree DIR

`--probes` plans one-to-three-line changes on a real Bridge tree instead (`--tree`: an unpacked Bridge
source tree, or its .tgz): each probe's diff is committed on a git copy of that tree and planned with
`--repo`, then scored against the levels written down for it (`must`, `allowed`, and `families` where
the change serves only some), per kind of change.

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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from verl_e2e.config.matrix import load_matrix
from verl_e2e.plan.build import PlanRequest, make_plan

COST = {0: 15, 1: 25, 2: 80, 3: 15, 4: 40, 5: 60}
MLM_PIN = "2a75ac12c54ba6a42b34024756820bf819a2e25f"  # the gitlink a probe tree starts from


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


T = TypeVar("T", int, float)


def pct(values: Sequence[T], q: float) -> T | int:
    """The value at quantile `q` of `values` (nearest rank, from below), 0 for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def probe_repo(tree: Path, work: Path) -> tuple[Path, str]:
    """A git copy of the Bridge tree (its src/, plus the Megatron-LM gitlink) and its base commit."""
    repo = work / "bridge"
    repo.mkdir()
    if tree.is_file():
        subprocess.run(["tar", "xzf", str(tree), "-C", str(work)], check=True)
        tree = next(p for p in work.iterdir() if (p / "src" / "megatron" / "bridge").is_dir())
    shutil.copytree(tree / "src", repo / "src")
    (repo / "3rdparty" / "Megatron-LM").mkdir(parents=True)
    pin = tree / ".main.commit"  # Bridge's record of the submodule commit, moved with the gitlink
    (repo / ".main.commit").write_text(pin.read_text() if pin.is_file() else MLM_PIN + "\n")
    _git(repo, "init", "-q")
    _git(repo, "config", "gc.auto", "0")  # no detached `git gc` writing objects while the copy is removed
    _git(repo, "add", "-A")
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{MLM_PIN},3rdparty/Megatron-LM")
    _git(repo, "-c", "user.name=probe", "-c", "user.email=probe@invalid", "commit", "-qm", "base")
    return repo, _git(repo, "rev-parse", "HEAD")


def score_probes(
    probes: list[dict[str, Any]], tree: Path, budget: int | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any], set[int], set[int], bool]]:
    """Each probe planned with `plan --repo` on a git copy of `tree`: (probe, plan, missed levels,
    over-run levels, wrong family or unsaid "no cell executes" note)."""
    matrix = load_matrix(Path(__file__).parents[1] / "matrix.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        repo, base = probe_repo(tree, Path(tmp))
        for p in probes:
            _git(repo, "checkout", "-q", "-f", "--detach", base)
            _git(repo, "apply", "--index", "-", stdin=p["diff"])
            _git(repo, "-c", "user.name=probe", "-c", "user.email=probe@invalid", "commit", "-qm", p["id"])
            plan = make_plan(PlanRequest(repo=str(repo), base=base, head="HEAD", budget=budget), matrix).to_json()
            chosen = set(plan["levels"])
            missed, over = set(p["must"]) - chosen, chosen - set(p["allowed"])
            # the family matters only where a level is required: a plan that rightly runs nothing has none
            wrong = bool(p.get("families")) and bool(p["must"]) and not set(plan["families"]) & set(p["families"])
            said = any(
                p["diff"].split(" b/", 1)[1].split("\n", 1)[0] in line
                for line in plan["context"].get("unexecuted") or []
            )
            yield p, plan, missed, over, wrong or (p.get("says_unexecuted", False) and not said)


def run_probes(args: argparse.Namespace) -> int:
    probes = json.loads(args.probes.read_text())["probes"]
    kinds: dict[str, list[int]] = {}
    notes: list[str] = []
    for p, plan, missed, over, wrong in score_probes(probes, args.tree, args.budget):
        chosen = set(plan["levels"])
        row = kinds.setdefault(p["kind"], [0, 0, 0, 0])
        row[0] += 1
        row[1] += bool(missed) or wrong
        row[2] += bool(over)
        row[3] += sum(COST[lv] for lv in over)
        if missed or over or wrong or args.show:
            extra = (plan["context"].get("unexecuted") or []) + [w for lv in plan["uncovered"].values() for w in lv]
            notes.append(
                f"{p['id']:<26} {p['kind']:<17} levels={sorted(chosen)} must={p['must']} families="
                f"{plan['families']}{' WRONG FAMILY/NOTE' if wrong else ''}{' | ' + extra[0] if extra else ''}"
            )
    total = [sum(r[i] for r in kinds.values()) for i in range(4)]
    print(f"{'kind':<18} probes missed over-ran wasted-cost")
    for kind, (n, miss, overran, cost) in [*sorted(kinds.items()), ("all", total)]:
        print(f"{kind:<18} {n:>6} {miss:>6} {overran:>8} {cost:>11}")
    print("\n".join(notes))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path(__file__).parents[2] / "shared/bench/selection-dev.jsonl")
    ap.add_argument("--repo", help="a Megatron-Bridge git dir holding every PR's commit (checkout mode)")
    ap.add_argument("--budget", type=int, help="pass --budget to plan (default: matrix.yaml's)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", action="store_true", help="list misses, waste and the costliest plans")
    ap.add_argument("--probes", type=Path, help="a probe file (tests/fixtures/selection-probes/probes.json)")
    ap.add_argument("--tree", type=Path, help="with --probes: the Bridge source tree (or .tgz) the probes diff")
    args = ap.parse_args()
    if args.probes:
        if not args.tree:
            ap.error("--probes needs --tree (the Bridge tree its diffs apply to)")
        return run_probes(args)
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
        f"plan median {statistics.median(times):.2f} s, p95 {pct(times, 0.95):.2f} s, max {max(times, default=0):.2f} s"
    )
    if args.show:
        print("\n".join(notes))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
