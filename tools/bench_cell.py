#!/usr/bin/env python3
"""Benchmark the harness around a cell: everything but the trainer, with the image already cached.

Builds (once) the image from containers/Dockerfile on the local test base with the trainer double from
tests/fake_verl as "verl", then:
  * ensures the image again with unchanged inputs and counts builds (must be zero);
  * runs a Level 0 and a Level 1 cell `--repeat` times and reports, per cell, wall time minus the
    time spent inside verl's wrapper (the phases' durations): container start and stop, import checks
    (driver and a real Ray worker), data preparation, `ray stop`, log streaming and judging.

    python tools/bench_cell.py [--repeat 3] [--bridge PATH_TO_A_BRIDGE_CHECKOUT]

Needs a Docker engine and the base image from tests/base-image/make-base-image.sh (.ci/run makes both).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import docker

from verl_e2e.cli.main import main as cli_main
from verl_e2e.run.image import ImageInputs, ensure_image, verl_commit

ROOT = Path(__file__).resolve().parents[1]
BASE = "verl-e2e-test-base:bookworm"


def quiet(message: str) -> None:
    """Image progress is not part of what is measured."""


def fake_verl(tmp: Path) -> Path:
    root = tmp / "verl"
    shutil.copytree(ROOT / "tests/fake_verl", root)
    shutil.copy(ROOT / "tests/verl_log.py", root / "verl/trainer/verl_formats.py")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=b@b", "-c", "user.name=b", "commit", "-qm", "v"],
    ):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return root


def bridge_checkout(tmp: Path) -> Path:
    wheel = next((ROOT / ".cache/wheels").glob("megatron_bridge-*.whl"))
    root = tmp / "Megatron-Bridge"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root / "src")
    (root / "3rdparty/Megatron-LM").mkdir(parents=True)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bridge", type=Path)
    args = ap.parse_args()
    client = docker.from_env()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        verl = fake_verl(tmp)
        bridge = args.bridge or bridge_checkout(tmp)
        inputs = ImageInputs(base=BASE, verl=verl, verl_commit=verl_commit(verl), extra_pip="")
        first = ensure_image(client, inputs, say=quiet)
        t0 = time.perf_counter()
        second = ensure_image(client, inputs, say=quiet)
        reuse_ms = (time.perf_counter() - t0) * 1000
        builds = [r.how for r in (first, second)].count("built")
        print(
            f"image {second.tag}: first {first.how}, then {second.how} in {reuse_ms:.0f} ms "
            f"(builds with unchanged inputs: {int(second.how == 'built')}; builds in total: {builds})"
        )

        plan = tmp / "plan.json"
        cli_main(["plan", "--levels", "1", "--out", str(plan), "--format", "json"], stdout=io.StringIO())
        for cell_id in ("L0-lora-ddp-qwen", "L1-save-resume-qwen"):
            overheads, walls = [], []
            for i in range(args.repeat):
                out = tmp / "runs" / f"{cell_id}-{i}"
                argv = [
                    "run-cell",
                    str(plan),
                    "--cell-id",
                    cell_id,
                    "--bridge",
                    str(bridge),
                    "--out",
                    str(out),
                    "--image",
                    second.tag,
                    "--gpus",
                    "none",
                    "--import-check",
                    "location",
                    "--ulimit",
                    "memlock=default",
                    "--cache",
                    str(tmp / "cache"),
                    "--no-bridge-tests",
                ]
                t0 = time.perf_counter()
                code = cli_main(argv, stdout=io.StringIO())
                wall = time.perf_counter() - t0
                phases = json.loads((out / "phases.json").read_text())
                trainer = sum(p.get("duration_s") or 0 for p in phases)
                assert code == 0, (out / "driver.log").read_text()[-2000:]
                walls.append(wall)
                overheads.append(wall - trainer)
            print(
                f"{cell_id}: wall median {statistics.median(walls):.2f} s; harness overhead median "
                f"{statistics.median(overheads):.2f} s, best {min(overheads):.2f} s "
                f"(over {args.repeat} runs, {len(phases)} phase(s))"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
