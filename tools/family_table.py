#!/usr/bin/env python3
"""What has run for real, by family: README's table, written from the kept run dirs themselves.

    python tools/family_table.py tests/fixtures/family-runs/*.tar.xz tests/fixtures/real-runs/27-*/

Each argument is a run dir written by run-cell, or one packed as `FAMILY.tar.xz` (how the family
runs are kept: the logs compress about tenfold, and the device transfer counts the checkout's size).
Every run is judged afresh in a scratch copy, so the table shows today's judge, not the verdict the
device wrote. One row per run: family, the architecture its tiny model is built for, the model, the verdict,
and where the time went (set-up + phase; start-up and the PPO step). The last line is the median wall
time of the passing cells, the figure Level 0's fast-cell target is read against.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

from verl_e2e.config.matrix import Matrix, load_matrix
from verl_e2e.judge.judging import judge_run_dir

HEAD = ("family", "architecture", "model", "verdict", "seconds (set-up + phase)", "start-up s", "step s")
WRITTEN = ("verdict.json", "evidence.json", "junit.xml")  # judged afresh, never read back


def unpack(source: Path, into: Path) -> Path:
    """A scratch copy of the run dir `source` is, or holds: judging writes its records into it."""
    if source.is_dir():
        run = Path(shutil.copytree(source, into / source.name, ignore=shutil.ignore_patterns("trace")))
    else:
        with tarfile.open(source) as tar:
            tar.extractall(into / "x", filter="data")  # refuses links out of the tree and absolute paths
        found = [p.parent for p in (into / "x").rglob("cell.json")]
        if len(found) != 1:
            raise ValueError(f"{source}: expected one run dir (one cell.json) inside, found {len(found)}")
        run = found[0]
    for name in WRITTEN:
        (run / name).unlink(missing_ok=True)
    return run


def architecture(matrix: Matrix, family: str) -> str:
    """The architecture the family's tiny model is built for (its first registered one), else '?'."""
    fam = matrix.families.get(family)
    return fam.architectures[0] if fam and fam.architectures else "?"


def row(source: Path, matrix: Matrix) -> tuple[list[str], float | None]:
    """One table row for a run dir or archive, and its wall time when it passed."""
    with tempfile.TemporaryDirectory() as tmp:
        run = unpack(source, Path(tmp))
        verdict = judge_run_dir(run)
    timings = verdict.timings if isinstance(verdict.timings, dict) else {}
    phases = timings.get("phases", [])
    setup = float(timings.get("setup_s", 0))
    wall = sum(float(p.get("wall_s", 0)) for p in phases)
    startup = sum(float(p.get("startup_s", 0)) for p in phases)
    step = sum(float(p.get("steps_s", 0)) for p in phases)
    result = verdict.result if verdict.result == "Pass" else f"{verdict.result} ({verdict.failure_class})"
    cells = [
        verdict.family or "?", architecture(matrix, verdict.family), verdict.model or "?", result,
        f"{setup:.0f} + {wall:.0f}", f"{startup:.0f}", f"{step:.0f}",
    ]  # fmt: skip
    return cells, (setup + wall) if phases and verdict.result == "Pass" else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path, help="run dirs or FAMILY.tar.xz archives of one run dir")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.runs if not p.exists()]
    if missing:
        print(f"family_table: {missing[0]} does not exist; pass run dirs or .tar.xz archives of one", file=sys.stderr)
        return 2
    matrix = load_matrix(None)
    rows, walls = [], []
    for source in args.runs:
        try:
            cells, wall = row(source, matrix)
        except (ValueError, OSError, tarfile.TarError) as exc:
            print(f"family_table: {exc}", file=sys.stderr)
            return 2
        print(f"family_table: {source.name}: {cells[3]}", file=sys.stderr)
        rows.append(cells)
        if wall is not None:
            walls.append(wall)
    rows.sort(key=lambda r: r[0])
    print("| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    if walls:
        median = statistics.median(walls)
        print(f"\nmedian wall time of the {len(walls)} passing cells (set-up + phase): {median:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
