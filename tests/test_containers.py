"""Running cells for real: a real Docker engine, the image built from containers/Dockerfile on a local
base (Debian + Python + real Ray, made by tests/base-image/make-base-image.sh), a real Megatron-Bridge source
tree (the PyPI wheel unpacked into its src/ layout) mounted read-only, and the trainer double from
tests/fake_verl standing in for verl (it needs GPUs). The base image has no torch, so cells run with
`--import-check location`, `--no-preflight` and `--gpus none`; this sandbox forbids raising memlock, hence
`--ulimit memlock=default`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import docker
import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.run.image import ImageInputs, ensure_image, verl_commit

from .conftest import ROOT, engine_missing, stock_models
from .rundirs import cell_for

BASE = "verl-e2e-test-base:bookworm"
WHEELS = Path(os.environ.get("VERL_E2E_TEST_WHEELS", ROOT / ".cache" / "wheels"))


def _git_commit(path: Path, message: str) -> None:
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-qm", message],
    ):
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)


@pytest.fixture(scope="session")
def engine() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        engine_missing(f"container tests need a Docker engine (`tools/test.sh --setup packages engine`): {exc}")
    return client


def bridge_wheel() -> Path:
    """megatron-bridge's wheel (the real Bridge sources the cells mount), downloaded by the set-up."""
    wheel = next(WHEELS.glob("megatron_bridge-*.whl"), None)
    if wheel is None:
        engine_missing(f"the megatron-bridge wheel is missing in {WHEELS}: `tools/test.sh --setup wheels` downloads it")
    assert wheel is not None
    return wheel


@pytest.fixture(scope="session")
def base_image(engine: docker.DockerClient) -> str:
    try:
        engine.images.get(BASE)
    except docker.errors.ImageNotFound:
        bridge_wheel()  # Ray, pytest and megatron-bridge, installed offline into the image
        if shutil.which("debootstrap") is None:
            engine_missing(f"{BASE} needs debootstrap to be built: `tools/test.sh --setup packages base-image`")
        subprocess.run([str(ROOT / "tests/base-image/make-base-image.sh"), BASE, str(WHEELS)], check=True)
    return BASE


@pytest.fixture(scope="session")
def fake_verl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verl") / "verl"
    shutil.copytree(ROOT / "tests/fake_verl", root)
    shutil.copy(ROOT / "tests/verl_log.py", root / "verl/trainer/verl_formats.py")
    _git_commit(root, "verl test double")
    return root


@pytest.fixture(scope="session")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Megatron-Bridge checkout: the real 0.6.2 sources in src/, a submodule dir, one focused test."""
    wheel = bridge_wheel()
    root = tmp_path_factory.mktemp("bridge") / "Megatron-Bridge"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root / "src")
    for info in (root / "src").glob("*.dist-info"):
        shutil.rmtree(info)
    (root / "3rdparty/Megatron-LM").mkdir(parents=True)
    test = root / "tests/unit_tests/models/test_param_mapping.py"
    test.parent.mkdir(parents=True)
    test.write_text(
        "import importlib.util\n\n\ndef test_bridge_resolves_to_the_checkout():\n"
        "    origin = importlib.util.find_spec('megatron.bridge').origin\n"
        "    assert origin.startswith('/workspace/Megatron-Bridge/src/'), origin\n"
    )
    _git_commit(root, "bridge")
    return root


@pytest.fixture(scope="session")
def image(engine: docker.DockerClient, base_image: str, fake_verl: Path) -> str:
    inputs = ImageInputs(base=base_image, verl=fake_verl, verl_commit=verl_commit(fake_verl), extra_pip="")
    return ensure_image(engine, inputs, say=print).tag


@pytest.fixture
def plan_file(tmp_path: Path, matrix: Matrix) -> Path:
    cells = [cell_for(matrix, level).to_json() for level in (0, 1, 5)]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"cells": cells}))
    return path


def cell_cmd(tmp_path: Path, plan: Path, cell_id: str, bridge: Path, out: Path, image: str, *extra: str) -> list[str]:
    """`verl-e2e run-cell` as these tests run it: no GPUs, no torch in the image, the host's memlock."""
    return [
        sys.executable,
        "-m",
        "verl_e2e",
        "run-cell",
        str(plan),
        "--cell-id",
        cell_id,
        "--bridge",
        str(bridge),
        "--out",
        str(out),
        "--image",
        image,
        "--gpus",
        "none",
        "--import-check",
        "location",
        "--no-preflight",
        "--ulimit",
        "memlock=default",
        "--cache",
        str(stock_models(tmp_path / "cache")),
        *extra,
    ]


def run_cell(
    tmp_path: Path, plan: Path, cell_id: str, image: str, bridge: Path, *extra: str, timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "runs" / cell_id
    cmd = cell_cmd(tmp_path, plan, cell_id, bridge, out, image, *extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    return proc, out


def verdict(out: Path) -> dict:
    return json.loads((out / "verdict.json").read_text())


def leftover_containers(engine: docker.DockerClient, out: Path) -> list[str]:
    """Containers of the run dir `out` (other suites may share the engine)."""
    label = f"io.verl-e2e.run-dir={out.resolve()}"
    return [c.name for c in engine.containers.list(all=True, filters={"label": label})]


def test_image_tag_is_reused_not_rebuilt(
    engine: docker.DockerClient, base_image: str, fake_verl: Path, image: str
) -> None:
    inputs = ImageInputs(base=base_image, verl=fake_verl, verl_commit=verl_commit(fake_verl), extra_pip="")
    assert inputs.tag == image
    again = ensure_image(engine, inputs, say=print)
    assert again.how == "present"
    labels = engine.images.get(image).labels
    assert labels["io.verl-e2e.verl.commit"] == verl_commit(fake_verl)
    assert labels["org.opencontainers.image.base.name"] == base_image
    other = ImageInputs(base=base_image, verl=fake_verl, verl_commit=verl_commit(fake_verl), extra_pip="pytest")
    assert other.tag != inputs.tag  # a different extra dependency is a different image


def test_level0_passes_with_a_complete_run_dir(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path, engine: docker.DockerClient
) -> None:
    proc, out = run_cell(tmp_path, plan_file, "L0-lora-ddp-qwen", image, bridge)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name in (
        "cell.json",
        "provenance.json",
        "phases.json",
        "run.log",
        "driver.log",
        "host.json",
        "evidence.json",
        "verdict.json",
        "junit.xml",
        "bridge-tests.json",
        "checkpoints.json",
    ):
        assert (out / name).is_file(), name
    v = verdict(out)
    assert v["result"] == "Pass", v["headline"]
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["bridge_import"] == {
        "driver": "/workspace/Megatron-Bridge/src/megatron/bridge/__init__.py",
        "ray_worker": "/workspace/Megatron-Bridge/src/megatron/bridge/__init__.py",
    }
    assert provenance["repos"]["bridge"]["commit"] != "not a git checkout"
    assert json.loads((out / "bridge-tests.json").read_text())["status"] == "pass"
    phases = json.loads((out / "phases.json").read_text())
    assert [(p["name"], p["status"], p["exit_code"]) for p in phases] == [("run", "ok", 0)]
    log = (out / "run.log").read_text()
    assert "+ VANILLA_MBRIDGE=False" in log
    assert "verl-e2e: bridge import (pid" in log  # the probe saw the trainer look Bridge up
    assert "[L0-lora-ddp-qwen] [run] " in proc.stdout  # live output with the cell prefix
    assert "HF_TOKEN" not in json.loads((out / "host.json").read_text())["environment"]
    assert leftover_containers(engine, out) == []


def test_level1_saves_and_resumes_through_the_wrapper(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path
) -> None:
    proc, out = run_cell(tmp_path, plan_file, "L1-save-resume-qwen", image, bridge, "--no-bridge-tests")
    assert proc.returncode == 0, proc.stdout[-3000:]
    listing = json.loads((out / "checkpoints.json").read_text())
    assert listing["save"] == {"steps": [1], "tracker": 1, "roles": ["actor", "critic"]}
    assert listing["resume"]["tracker"] == 2 and listing["resume"]["steps"] == [1, 2]
    v = verdict(out)
    assert v["result"] == "Pass" and "resumed from 1" in v["deliverables"][3]["detail"]


@pytest.mark.parametrize(
    ("mode", "cell_id", "result", "klass"),
    [
        ("wrong-bridge", "L0-lora-ddp-qwen", "Blocked", "setup"),
        ("crash", "L0-lora-ddp-qwen", "Fail", "runtime"),
        ("setup-fail", "L0-lora-ddp-qwen", "Blocked", "setup"),
        ("exit137", "L0-lora-ddp-qwen", "Fail", "killed"),  # SIGKILL, no out-of-memory line: no OOM claim
        ("nan", "L5-learning-signal-qwen", "Fail", "nan"),
        ("nan", "L0-lora-ddp-qwen", "Fail", "nan"),  # NaN losses fail a level whose checks omit no_nan too
    ],
)
def test_trainer_faults(
    tmp_path: Path,
    plan_file: Path,
    image: str,
    bridge: Path,
    engine: docker.DockerClient,
    mode: str,
    cell_id: str,
    result: str,
    klass: str,
) -> None:
    if cell_id.startswith("L5"):  # a warmed runner's cache holds Level 5's task (the fake trainer never reads it)
        task = tmp_path / "cache" / "datasets" / "arith"
        task.mkdir(parents=True)
        for name in ("train.parquet", "test.parquet", "reward.py"):
            (task / name).write_text("")
    proc, out = run_cell(
        tmp_path, plan_file, cell_id, image, bridge, "--no-bridge-tests", "--env", f"FAKE_VERL_MODE={mode}"
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    v = verdict(out)
    assert (v["result"], v["failure_class"]) == (result, klass), v["headline"]
    assert (out / "evidence.json").is_file() and (out / "junit.xml").is_file()
    assert leftover_containers(engine, out) == []
    if mode == "wrong-bridge":
        assert "site-packages/megatron/bridge" in v["headline"]
    if mode == "nan":
        assert next(c for c in v["checks"] if c["name"] == "no_nan")["result"] == "Fail"


def test_links_planted_by_the_cell_are_not_followed(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path, engine: docker.DockerClient
) -> None:
    """The attack: code in the cell plants links in the run dir to a runner secret (to get it uploaded) and
    to a host file (to get it overwritten), and writes a verdict of its own. None of it leaves the cell."""
    secret = tmp_path / "docker-config.json"
    secret.write_text('{"auths": {"ghcr.io": {"auth": "c2VjcmV0LXRva2Vu"}}}')
    target = tmp_path / "host-script.sh"
    target.write_text("echo untouched\n")
    proc, out = run_cell(
        tmp_path, plan_file, "L0-lora-ddp-qwen", image, bridge, "--no-bridge-tests",
        "--env", "FAKE_VERL_MODE=plant-links", "--env", f"FAKE_VERL_STOLEN={secret}",
        "--env", f"FAKE_VERL_TARGET={target}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    assert target.read_text() == "echo untouched\n"
    for path in out.rglob("*"):
        assert not path.is_symlink(), path
        if path.is_file():
            assert "c2VjcmV0LXRva2Vu" not in path.read_text(errors="replace"), path
    v = verdict(out)
    assert v["result"] == "Fail" and "unsafe files" in v["headline"] and "symbolic link" in v["headline"]
    assert not (out / "bridge-tests.log").exists()


def test_phase_timeout_keeps_the_log_tail(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path, engine: docker.DockerClient
) -> None:
    proc, out = run_cell(
        tmp_path,
        plan_file,
        "L0-lora-ddp-qwen",
        image,
        bridge,
        "--no-bridge-tests",
        "--env",
        "FAKE_VERL_MODE=hang",
        "--phase-timeout",
        "4",
    )
    assert proc.returncode == 1
    phase = json.loads((out / "phases.json").read_text())[0]
    assert phase["status"] == "timeout"
    assert any("waiting for the rollout workers" in line for line in phase["log_tail"])
    v = verdict(out)
    assert (v["result"], v["failure_class"]) == ("Fail", "hang")
    assert leftover_containers(engine, out) == []


def test_missing_data_that_cannot_be_made_is_blocked(tmp_path: Path, plan_file: Path, image: str, bridge: Path) -> None:
    proc, out = run_cell(
        tmp_path,
        plan_file,
        "L0-lora-ddp-qwen",
        image,
        bridge,
        "--no-bridge-tests",
        "--env",
        "FAKE_VERL_DATA=fail",
    )
    assert proc.returncode == 1
    v = verdict(out)
    assert v["result"] == "Blocked" and "GSM8K preprocessing failed" in v["headline"]
    assert "prefetch" in v["headline"]


def test_sigterm_stops_the_container_and_leaves_a_verdict(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path, engine: docker.DockerClient
) -> None:
    out = tmp_path / "runs" / "cancelled"
    cmd = cell_cmd(
        tmp_path, plan_file, "L0-lora-ddp-qwen", bridge, out, image, "--no-bridge-tests", "--env", "FAKE_VERL_MODE=hang"
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and "waiting for the rollout workers" not in _read(out / "run.log"):
        time.sleep(0.5)
    assert leftover_containers(engine, out), "the cell never started"
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert leftover_containers(engine, out) == []
    phase = json.loads((out / "phases.json").read_text())[0]
    assert phase["status"] == "cancelled"
    assert verdict(out)["result"] in ("Blocked", "Fail")
    assert "waiting for the rollout workers" in (out / "run.log").read_text()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_local_backend_runs_the_same_driver(tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path) -> None:
    out = tmp_path / "runs" / "local"
    cmd = [
        sys.executable,
        "-m",
        "verl_e2e",
        "run-cell",
        str(plan_file),
        "--cell-id",
        "L1-save-resume-qwen",
        "--bridge",
        str(bridge),
        "--out",
        str(out),
        "--backend",
        "local",
        "--verl",
        str(fake_verl),
        "--gpus",
        "none",
        "--import-check",
        "location",
        "--no-preflight",
        "--cache",
        str(tmp_path / "cache"),
        "--no-bridge-tests",
    ]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["bridge_import"]["ray_worker"] == str(bridge / "src/megatron/bridge/__init__.py")
    assert verdict(out)["result"] == "Pass"


def test_a_transient_block_is_retried_once_and_both_attempts_kept(
    tmp_path: Path, plan_file: Path, fake_verl: Path, bridge: Path
) -> None:
    out = tmp_path / "runs" / "L0"
    cmd = [
        sys.executable, "-m", "verl_e2e", "run-cell", str(plan_file), "--cell-id", "L0-lora-ddp-qwen",
        "--bridge", str(bridge), "--out", str(out), "--backend", "local", "--verl", str(fake_verl),
        "--gpus", "none", "--import-check", "location", "--no-preflight", "--cache", str(tmp_path / "cache"),
        "--no-bridge-tests", "--env", "FAKE_VERL_MODE=gcs-once",
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Blocked by ray-gcs (transient); running it again" in proc.stdout
    first = verdict(out / "attempt-1")
    assert first["result"] == "Blocked" and "GCS" in first["headline"]
    final = verdict(out)
    assert final["result"] == "Pass" and any("attempt 1 was Blocked by ray-gcs" in x for x in final["limitations"])
    from verl_e2e.report.collect import collect

    assert [v.cell_id for v in collect([tmp_path / "runs"], [].append)] == ["L0-lora-ddp-qwen"]  # one row


def test_engine_not_reachable(tmp_path: Path, plan_file: Path, bridge: Path) -> None:
    env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
    cmd = [
        sys.executable,
        "-m",
        "verl_e2e",
        "run-cell",
        str(plan_file),
        "--cell-id",
        "L0-lora-ddp-qwen",
        "--bridge",
        str(bridge),
        "--out",
        str(tmp_path / "o"),
        "--image",
        "x",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 2
    assert "Docker engine not reachable at unix:///nonexistent/docker.sock" in proc.stderr
    assert "--backend local" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("bridge_arg", "extra", "message"),
    [
        ("missing", [], "no such directory"),
        ("not-bridge", [], "not a Megatron-Bridge checkout"),
        ("ok", ["--image", "verl-e2e:does-not-exist", "--gpus", "none"], "neither present nor pullable"),
        ("ok", ["--image", "IMAGE"], "needs 2 GPU(s) but this host has 0"),
        ("ok", ["--image", "IMAGE", "--gpus", "none", "--env", "HF_TOKEN=abc"], "looks like a secret"),
    ],
)
def test_bad_run_cell_input(
    tmp_path: Path, plan_file: Path, bridge: Path, image: str, bridge_arg: str, extra: list[str], message: str
) -> None:
    target = {"missing": tmp_path / "nope", "not-bridge": tmp_path, "ok": bridge}[bridge_arg]
    extra = [image if e == "IMAGE" else e for e in extra]
    cmd = [
        sys.executable,
        "-m",
        "verl_e2e",
        "run-cell",
        str(plan_file),
        "--cell-id",
        "L0-lora-ddp-qwen",
        "--bridge",
        str(target),
        "--out",
        str(tmp_path / "o"),
        *(extra or ["--image", image]),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_unbuildable_image(tmp_path: Path, engine: docker.DockerClient, fake_verl: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "verl_e2e",
        "image",
        "--verl",
        str(fake_verl),
        "--base",
        "verl-e2e-missing-base:none",
        "--extra-pip",
        "",
        "--no-pull",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "building verl-e2e:" in proc.stderr and "failed" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a tiny tmpfs as a full disk")
def test_disk_full_run_dir(
    tmp_path: Path, plan_file: Path, image: str, bridge: Path, engine: docker.DockerClient
) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20k", "tmpfs", str(small)], check=True)
    try:
        cmd = cell_cmd(tmp_path, plan_file, "L0-lora-ddp-qwen", bridge, small / "run", image, "--no-bridge-tests")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
        assert "ran out of space (No space left on device)" in proc.stderr and "Traceback" not in proc.stderr
        assert leftover_containers(engine, (small / "run")) == []
    finally:
        subprocess.run(["umount", str(small)], check=False)
