# ruff: noqa: F811 - the run-cell fixtures are shared with the local-backend tests by import
"""The Slurm backend against a real Slurm: slurmctld + slurmd (Debian's slurm-wlm) on this machine.

`tests/slurm/start-slurm.sh` starts a one-node cluster for the session; every test submits through the
real `srun` and cancels through the real `scancel`. The trainer is verl's test double (tests/fake_verl),
as in the local-backend tests: Slurm is what is under test here, not verl.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from verl_e2e.run.runopts import RunOptions
from verl_e2e.run.slurm import srun_command

from .conftest import ROOT
from .rundirs import cell_for
from .test_containers import bridge, fake_verl, plan_file, verdict  # noqa: F401 - shared fixtures

CELL = "L0-lora-ddp-qwen"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        if os.environ.get("VERL_E2E_REQUIRE_ENGINE") == "1":
            pytest.fail("VERL_E2E_REQUIRE_ENGINE=1 but slurm-wlm/munge are not installed (tools/test.sh installs them)")
        pytest.skip("slurm-wlm and munge are not installed (`tools/test.sh --setup packages`, as root)")
    state = tmp_path_factory.mktemp("slurm")
    start = subprocess.run(
        [str(ROOT / "tests/slurm/start-slurm.sh"), str(state)], capture_output=True, text=True, check=False
    )
    assert start.returncode == 0, start.stderr
    env = dict(os.environ, SLURM_CONF=start.stdout.strip().splitlines()[-1])
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    yield env
    subprocess.run([str(ROOT / "tests/slurm/start-slurm.sh"), str(state), "stop"], check=False)


def _cmd(plan: Path, bridge: Path, verl: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "verl_e2e", "run-cell", str(plan), "--cell-id", CELL, "--bridge", str(bridge),
        "--out", str(out), "--backend", "slurm", "--verl", str(verl), "--gpus", "none",
        "--import-check", "location", "--no-preflight", "--no-bridge-tests", "--cache", str(out.parent / "cache"),
        *extra,
    ]  # fmt: skip


def _queue(env: dict[str, str], settle_s: float = 0.0) -> str:
    """The job names still queued; a job scancel just ended may take slurmctld a moment to drop."""
    deadline = time.monotonic() + settle_s
    while True:
        names = subprocess.run(
            ["squeue", "-h", "-o", "%j"], capture_output=True, text=True, env=env, check=False
        ).stdout
        if CELL not in names or time.monotonic() > deadline:
            return names
        time.sleep(1)


def test_a_cell_runs_as_a_slurm_job_and_leaves_the_same_run_dir(
    slurm: dict[str, str], tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "runs" / CELL
    proc = subprocess.run(
        _cmd(plan_file, bridge, fake_verl, out), capture_output=True, text=True, env=slurm, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert verdict(out)["result"] == "Pass"
    host = (out / "host.json").read_text()
    assert '"backend": "slurm"' in host and f'"job": "verl-e2e-{CELL}-' in host
    assert {"driver.log", "run.log", "verdict.json", "junit.xml", "evidence.json"} <= {p.name for p in out.iterdir()}
    assert "Training Progress" in (out / "run.log").read_text()  # streamed from srun into the phase log
    assert CELL not in _queue(slurm, 30)


def test_a_phase_deadline_inside_the_job_is_a_timeout_and_frees_the_allocation(
    slurm: dict[str, str], tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "runs" / CELL
    extra = ("--env", "FAKE_VERL_MODE=hang", "--phase-timeout", "5", "--retries", "0")
    started = time.monotonic()
    proc = subprocess.run(
        _cmd(plan_file, bridge, fake_verl, out, *extra),
        capture_output=True,
        text=True,
        env=slurm,
        timeout=300,
        check=False,
    )
    assert time.monotonic() - started < 200, proc.stdout[-2000:]
    assert '"status": "timeout"' in (out / "phases.json").read_text()
    assert "submit_error" not in (out / "host.json").read_text()  # the job ran; its task failed
    assert verdict(out)["result"] in ("Fail", "Blocked")
    assert CELL not in _queue(slurm, 30)  # the job is gone from the queue, not left running


def test_a_cancelled_run_scancels_its_job_and_still_leaves_a_verdict(
    slurm: dict[str, str], tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "runs" / CELL
    cmd = _cmd(plan_file, bridge, fake_verl, out, "--env", "FAKE_VERL_MODE=hang", "--retries", "0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=slurm)
    for _ in range(120):  # wait until the job is in the queue and training has started
        if CELL in _queue(slurm) and (out.parent / f".work-{CELL}").exists():
            break
        time.sleep(1)
    assert CELL in _queue(slurm)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert '"status": "cancelled"' in (out / "host.json").read_text()
    assert (out / "verdict.json").is_file()
    for _ in range(30):
        if CELL not in _queue(slurm):
            break
        time.sleep(1)
    assert CELL not in _queue(slurm, 30)


def test_a_job_slurm_refuses_is_blocked_with_slurms_reason(
    slurm: dict[str, str], tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "runs" / CELL
    cmd = _cmd(plan_file, bridge, fake_verl, out, "--slurm-partition", "no-such-partition", "--retries", "0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=slurm, timeout=120, check=False)
    v = verdict(out)
    assert v["result"] == "Blocked", proc.stdout[-2000:]
    assert "Slurm did not run the job" in (out / "provenance.json").read_text()
    assert "partition" in (out / "provenance.json").read_text().lower()


def test_site_srun_options_are_validated_one_by_one(
    tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "o"
    cmd = _cmd(plan_file, bridge, fake_verl, out, "--slurm-arg", "--qos=high;touch /tmp/x")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "not one srun option" in proc.stderr


def _slurm_options(tmp_path: Path, **extra: object) -> RunOptions:
    """A Slurm cell's options over checkouts under `tmp_path` (the command is built, nothing runs)."""
    return RunOptions(
        cell_file=tmp_path / "cell.json",
        bridge=tmp_path / "bridge",
        out=tmp_path / "out",
        backend="slurm",
        verl=tmp_path / "verl",
        **extra,  # type: ignore[arg-type]
    )


def test_pyxis_jobs_mount_the_checkout_read_only_and_write_only_scratch(matrix, tmp_path: Path) -> None:
    cell = cell_for(matrix, 0)
    scratch = tmp_path / "scratch"
    opts = _slurm_options(
        tmp_path,
        cache={"models": tmp_path / "cache/models"},
        container_paths={"models": "/cache/models"},
        slurm_container="nvcr.io#verlai/verl:vllm017",
        slurm_partition="gpu",
    )
    cmd, _env = srun_command(cell, opts, scratch, "verl-e2e-x")
    sep = cmd.index("--")
    srun, inner = cmd[:sep], cmd[sep + 1 :]
    assert "--container-image=nvcr.io#verlai/verl:vllm017" in srun and "--partition=gpu" in srun
    mounts = next(a for a in srun if a.startswith("--container-mounts=")).split("=", 1)[1].split(",")
    assert f"{tmp_path / 'bridge'}:/workspace/Megatron-Bridge:ro" in mounts
    assert f"{tmp_path / 'cache/models'}:/cache/models:ro" in mounts
    assert [m for m in mounts if not m.endswith(":ro")] == [f"{scratch}:{scratch}"]  # verl is read-only too
    assert f"{tmp_path / 'verl'}:/workspace/verl:ro" in mounts
    assert inner[:2] == ["python3", "/opt/verl-e2e/driver.py"] and "--map" not in inner
    assert inner[inner.index("--bridge") + 1] == "/workspace/Megatron-Bridge"
    assert inner[inner.index("--work") + 1] == f"{scratch}/work"
    assert any(a.startswith("--time=") for a in srun) and f"--gpus-per-node={cell.gpus}" in srun


@pytest.mark.parametrize(
    "arg",
    ["--prolog=/tmp/x.sh", "--task-prolog=/tmp/x.sh", "--output=/tmp/o", "--container-mounts=/:/host", "--export=ALL"],
)
def test_site_srun_options_are_allowed_by_name(arg: str) -> None:
    """Options that run a program, move output, mount or change the environment are never a site's to add."""
    from verl_e2e.errors import UsageError
    from verl_e2e.run.slurm import check_slurm_args

    with pytest.raises(UsageError, match="not an option a site may add"):
        check_slurm_args([arg])
    assert check_slurm_args(["--qos=high", "--constraint=h100"]) == ["--qos=high", "--constraint=h100"]


def test_the_job_step_exports_an_allow_list_not_the_runners_environment(matrix, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_ENV", "/runner/_temp/_runner_file_commands/set_env")
    monkeypatch.setenv("GITHUB_PATH", "/runner/_temp/_runner_file_commands/add_path")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    cell = cell_for(matrix, 0)
    opts = _slurm_options(tmp_path, env={"VERL_E2E_GSM8K_RAW": "/cache/datasets/gsm8k"})
    cmd, env = srun_command(cell, opts, tmp_path / "scratch", "verl-e2e-x")
    export = next(a for a in cmd if a.startswith("--export=")).split("=", 1)[1].split(",")
    assert "--export=ALL" not in cmd
    assert {"PATH", "NCCL_SOCKET_IFNAME", "VERL_E2E_GSM8K_RAW", "PYTHONUNBUFFERED"} <= set(export)
    assert not {"GITHUB_ENV", "GITHUB_PATH", "AWS_SECRET_ACCESS_KEY"} & set(export)
    assert "GITHUB_ENV" not in env and "GITHUB_PATH" not in env and "AWS_SECRET_ACCESS_KEY" not in env
