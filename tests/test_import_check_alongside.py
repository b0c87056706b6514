"""The import of verl's Bridge modules runs next to the first phase (containers/importcheck.py): a cell
that passes pays no wall time for it, and a Bridge module that fails to import still stops the cell
with the same verdict, the phase included (real driver, real processes, the local backend, and the
verl test double under tests/fake_verl standing in for verl's trainer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from verl_e2e.config.matrix import load_matrix

from .conftest import ROOT
from .rundirs import cell_for


def _bridge(root: Path, utils: str) -> Path:
    """A Bridge checkout whose peft/utils.py is `utils` (verl imports that module)."""
    pkg = root / "Megatron-Bridge" / "src" / "megatron" / "bridge"
    (pkg / "peft").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "peft" / "__init__.py").write_text("")
    (pkg / "peft" / "utils.py").write_text(utils)
    return root / "Megatron-Bridge"


def _verl(root: Path) -> Path:
    """The verl test double, plus a module that imports Bridge's peft utils the way verl's engine does."""
    verl = root / "verl"
    shutil.copytree(ROOT / "tests/fake_verl", verl)
    shutil.copy(ROOT / "tests/verl_log.py", verl / "verl/trainer/verl_formats.py")
    (verl / "verl/workers").mkdir(parents=True, exist_ok=True)
    (verl / "verl/workers/peft.py").write_text(
        textwrap.dedent(
            """
            def build():
                from megatron.bridge.peft.utils import create_peft
            """
        )
    )
    return verl


def _run(tmp_path: Path, bridge: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], Path, float]:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"cells": [cell_for(load_matrix(), 0).to_json()]}))
    out = tmp_path / "runs" / "l0"
    cmd = [
        sys.executable, "-m", "verl_e2e", "run-cell", str(plan), "--cell-id", "L0-lora-ddp-qwen",
        "--bridge", str(bridge), "--out", str(out), "--backend", "local", "--verl", str(_verl(tmp_path)),
        "--gpus", "none", "--import-check", "fast", "--no-preflight", "--cache", str(tmp_path / "cache"),
        "--no-bridge-tests",
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", FAKE_VERL_MODE=mode)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, env=env)
    return proc, out, time.monotonic() - started


def test_a_bridge_module_that_fails_to_import_stops_the_running_phase(tmp_path: Path) -> None:
    """verl would hang here (FAKE_VERL_MODE=hang): the import check, running beside the phase, stops it
    and the cell fails on the PR's line, as it did when the check ran before Ray."""
    bridge = _bridge(tmp_path, "import os\nfrom megatron.bridge.utils_missing import str_to_torch_dtype\n")
    proc, out, took = _run(tmp_path, bridge, "hang")
    provenance = json.loads((out / "provenance.json").read_text())
    failure = provenance.get("setup_failure") or {}
    assert (failure.get("step"), failure.get("class")) == ("imports", "model_build"), proc.stdout[-3000:]
    assert "`import megatron.bridge.peft.utils` (verl imports it) failed" in failure["reason"]
    assert "src/megatron/bridge/peft/utils.py:2" in failure["reason"]
    phases = json.loads((out / "phases.json").read_text())
    assert phases[0]["status"] == "failed", phases  # stopped by the check, not by the cell's timeout
    assert "stopping the phase" in (out / "run.log").read_text()
    assert took < 300, took
    verdict = json.loads((out / "verdict.json").read_text())
    assert (verdict["result"], verdict["failure_class"]) == ("Fail", "model_build"), verdict["headline"]


def test_a_cell_whose_imports_succeed_records_them_and_passes(tmp_path: Path) -> None:
    bridge = _bridge(tmp_path, "def create_peft():\n    return None\n")
    proc, out, _ = _run(tmp_path, bridge, "pass")
    provenance = json.loads((out / "provenance.json").read_text())
    assert "setup_failure" not in provenance, proc.stdout[-3000:]
    assert provenance["import_check"]["modules"] == {"megatron.bridge": None, "megatron.bridge.peft.utils": None}
    assert json.loads((out / "phases.json").read_text())[0]["status"] == "ok"
    # (the verdict itself wants a Ray worker's import record, which the test double, not being one, lacks)


def test_the_check_starts_before_the_phase_and_ends_after_it_started(tmp_path: Path) -> None:
    """The driver log shows the order: the check is started, the phase starts without waiting for it."""
    bridge = _bridge(tmp_path, "import time\ntime.sleep(3)\n\ndef create_peft():\n    return None\n")
    proc, out, _ = _run(tmp_path, bridge, "pass")
    assert json.loads((out / "phases.json").read_text())[0]["status"] == "ok", proc.stdout[-3000:]
    lines = [ln for ln in (out / "driver.log").read_text().splitlines() if ln.startswith("verl-e2e: ")]
    started = next(i for i, ln in enumerate(lines) if "next to the first phase" in ln)
    phase = next(i for i, ln in enumerate(lines) if ln.startswith("verl-e2e: phase run:"))
    done = next(i for i, ln in enumerate(lines) if "Bridge module(s) verl imports imported" in ln)
    assert started < phase < done, lines
