#!/usr/bin/env python3
"""Where real cells' time went, as a table: the benchmark for Level 0's wall time (before and after a
profile change) read from run dirs, never from timed asserts.

    python tools/cell_times.py tests/fixtures/real-runs/*/ [--markdown]

Each run dir is re-judged in a scratch copy (judging writes its records; the run dir stays as it was),
and its verdict's timings are printed: the driver's set-up steps, each phase's wall time, start-up and
shutdown, the start-up by stage (from the driver's stamps, where the run has them), the PPO steps and
their generation. The last line gives the median wall time of the Pass cells.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD: tuple[str, ...] = ("run dir", "cell", "model", "verdict", "set-up s", "phases s", "start-up s", "split")
HEAD += ("steps", "step s", "gen s", "untimed s")


def _judge(run_dir: Path) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / run_dir.name
        shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("trace"))
        out = subprocess.run(
            [sys.executable, "-m", "verl_e2e", "judge", "--format", "json", str(copy)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        verdicts = json.loads(out.stdout or "[]")
    return verdicts[0] if verdicts else {}


def _row(run_dir: Path) -> tuple[list[str], float | None]:
    verdict = _judge(run_dir)
    cell = json.loads((run_dir / "cell.json").read_text())
    timings = verdict.get("timings") or {}
    phases = timings.get("phases", []) if isinstance(timings, dict) else []
    wall = sum(p["wall_s"] for p in phases)
    setup = float(timings.get("setup_s", 0)) if isinstance(timings, dict) else 0.0
    row = [
        run_dir.name, cell["id"], cell["model"], str(verdict.get("result", "?")), f"{setup:.0f}", f"{wall:.0f}",
        f"{sum(p.get('startup_s', 0) for p in phases):.0f}", _split(phases),
        str(sum(p.get("steps", 0) for p in phases)),
        f"{sum(p.get('steps_s', 0) for p in phases):.0f}", f"{sum(p.get('gen_s', 0) for p in phases):.0f}",
        f"{sum(p.get('untimed_s', 0) for p in phases):.0f}",
    ]  # fmt: skip
    return row, (setup + wall) if phases else None


def _split(phases: list[dict[str, object]]) -> str:
    """The first phase's start-up by stage from the driver's stamps ("launch 29 / trainer 60 / ..."), or -."""
    split = phases[0].get("startup_split") if phases else None
    if not isinstance(split, dict) or not split:
        return "-"
    return " / ".join(f"{name} {seconds:.0f}" for name, seconds in split.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    rows, totals = [], []
    for run_dir in args.run_dirs:
        if not (run_dir / "cell.json").is_file():
            print(f"cell_times: {run_dir}: no cell.json; pass run dirs written by run-cell", file=sys.stderr)
            return 2
        row, total = _row(run_dir)
        rows.append(row)
        if total is not None and row[3] == "Pass":
            totals.append(total)
    if args.markdown:
        print("| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD))
        print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    else:
        widths = [max(len(r[i]) for r in [list(HEAD), *rows]) for i in range(len(HEAD))]
        for r in [list(HEAD), *rows]:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if totals:
        median = statistics.median(totals)
        print(f"median wall time of the passing cells (set-up + phases): {median:.0f} s over {len(totals)} run(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
