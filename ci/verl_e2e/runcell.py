"""Run one cell: the host side of `verl-e2e run-cell` (docker SDK, or the same driver locally).

The host owns what the driver cannot: the container (GPU requests, shm and ulimits, read-only Bridge
mount, caches, an allow-list of environment variables), the cell's overall deadline, cancellation
(SIGTERM/SIGINT stop and remove the container), live output with a cell prefix, and a run dir that
is always complete: cell.json first, the driver's records as it goes, host.json and driver.log at the
end, then the verdict. Nothing here interprets verl's output; `judging` does that afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import docker
import docker.errors
import docker.types
import requests

from verl_e2e.cells import Cell, cell_from_json
from verl_e2e.errors import UsageError, VerlE2EError
from verl_e2e.judging import judge_run_dir
from verl_e2e.resources import containers_dir
from verl_e2e.verdict import Verdict

BRIDGE_MOUNT = "/workspace/Megatron-Bridge"
DRIVER_MOUNT = "/opt/verl-e2e"
RUN_MOUNT = "/run/verl-e2e"
VERL_IN_IMAGE = "/workspace/verl"
# Variables a runner may legitimately pass to the container; everything else, tokens included, stays out.
PASS_THROUGH = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "TZ",
    "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "CUDA_DEVICE_ORDER",
)
SECRET_LIKE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|AUTH", re.IGNORECASE)
DEFAULT_ULIMITS = {"memlock": -1, "stack": 67108864}  # what verl's docs run its images with
SETUP_ALLOWANCE_S = 900  # image start, import checks, data preparation, Bridge tests
STOP_GRACE_S = 20


class RunError(VerlE2EError):
    exit_code = 1


class CancelledError(VerlE2EError):
    """The cell was stopped by SIGTERM/SIGINT; its run dir and verdict were still written."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"cancelled by signal {signum}; the run dir and its verdict were written")
        self.exit_code = 128 + signum


@dataclass(frozen=True)
class RunOptions:
    cell_file: Path
    bridge: Path
    out: Path
    backend: str = "docker"  # docker | local
    image: str | None = None
    verl: Path | None = None
    gpus: str | None = None  # None: the cell's count; "none"; "all"; "0,1"
    env: Mapping[str, str] = field(default_factory=dict)
    phase_timeout: float | None = None
    import_check: str = "fast"
    megatron_lm: str = "submodule"  # submodule | installed | a Megatron-LM path (host path, local backend)
    preflight: str = "auto"
    bridge_tests: str = "auto"
    cache: Mapping[str, Path] = field(default_factory=dict)  # models / datasets / hf_home on the host
    container_paths: Mapping[str, str] = field(default_factory=dict)
    shm_size: str = "16g"
    ulimits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_ULIMITS))


# --------------------------------------------------------------------------------------- validation


def load_cell(path: Path) -> Cell:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cell_from_json(data)
    except FileNotFoundError:
        raise UsageError(f"run-cell: {path}: no such file; write one with `verl-e2e plan --out plan.json`") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"run-cell: {path}: not a cell record ({exc}); take a cell from `verl-e2e plan`") from None


def check_bridge(path: Path) -> Path:
    if not path.exists():
        raise UsageError(f"--bridge {path}: no such directory; pass your Megatron-Bridge checkout")
    if not (path / "src" / "megatron" / "bridge").is_dir():
        raise UsageError(
            f"--bridge {path}: not a Megatron-Bridge checkout (no src/megatron/bridge); pass the repo's root"
        )
    return path.resolve()


def check_env(pairs: Mapping[str, str]) -> dict[str, str]:
    for name in pairs:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"--env {name}: not a variable name; pass NAME=VALUE")
        if SECRET_LIKE.search(name):
            raise UsageError(
                f"--env {name}: looks like a secret; secrets never reach the cell's container "
                "(prefetch models on the host instead of passing a token)"
            )
    return dict(pairs)


def host_gpus() -> int:
    """GPUs visible on this host (0 when there is no NVIDIA driver)."""
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def gpu_request(cell: Cell, gpus: str | None, available: int) -> list[str] | int | None:
    """None: no GPUs; an int: that many; a list: these device ids."""
    if gpus == "none":
        return None
    if gpus in (None, "all"):
        need = cell.gpus if gpus is None else max(available, 1)
        if available < need:
            raise UsageError(
                f"run-cell: the cell {cell.id} needs {need} GPU(s) but this host has {available}; run it on "
                "a "
                f"runner labelled {', '.join(cell.runs_on)}, or pass --gpus none to run without GPUs"
            )
        return need
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids or not all(g.isdigit() for g in ids):
        raise UsageError(f"--gpus {gpus}: expected none, all, or device ids such as 0,1")
    if len(ids) != cell.gpus:
        raise UsageError(
            f"--gpus {gpus}: {len(ids)} device(s) for cell {cell.id}, which runs on {cell.gpus}; pass "
            f"--num-gpus {len(ids)} to run it on {len(ids)} (stated as a limitation), or name {cell.gpus} devices"
        )
    return ids


# ---------------------------------------------------------------------------------------- run dir


@contextmanager
def run_dir_writes(out: Path) -> Iterator[None]:
    """Turn a full disk into one clear message instead of a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise RunError(
                f"the run dir {out} ran out of space (No space left on device); free space or pass --out "
                "on a larger disk, then rerun the cell"
            ) from None
        raise


def _write(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def _patch_phases(out: Path, status: str, reason: str) -> None:
    """After a host-side stop: phases still running (or cancelled by it) get the host's status."""
    path = out / "phases.json"
    try:
        phases = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    for phase in phases:
        if phase.get("status") in ("running", "cancelled"):
            log = out / phase.get("log", f"{phase['name']}.log")
            tail = log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []
            phase.update(status=status, log_tail=[*tail, f"verl-e2e: {reason}"])
            phase.setdefault("exit_code", None)
    _write(path, phases)


class Streamer:
    """Prefix every output line with the cell id on the console and keep all of it in driver.log."""

    def __init__(self, cell_id: str, log_path: Path, console: TextIO) -> None:
        self.prefix = f"[{cell_id}] "
        self.console = console
        self.file: Any = log_path.open("ab", buffering=0)
        self.pending = b""
        self.error: OSError | None = None

    def feed(self, chunk: bytes) -> None:
        if self.file is not None:
            try:
                self.file.write(chunk)
            except OSError as exc:  # e.g. a full disk: keep streaming to the console, report it at the end
                self.error = exc
                self.file = None
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self.console.write(self.prefix + line.decode("utf-8", errors="replace") + "\n")
        self.console.flush()

    def close(self) -> None:
        if self.pending:
            self.console.write(self.prefix + self.pending.decode("utf-8", errors="replace") + "\n")
        if self.file is not None:
            self.file.close()
        if self.error is not None:
            raise self.error


# ------------------------------------------------------------------------------------------ signals


class Cancellation:
    """SIGTERM/SIGINT while a cell runs: remember it and call `stop` once (stop the container/process)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.stop: Callable[[], None] | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Cancellation:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:  # noqa: ARG002
        if self.signum is None:
            self.signum = signum
            sys.stderr.write(f"verl-e2e: signal {signum}: stopping the cell\n")
            if self.stop is not None:
                threading.Thread(target=self.stop, daemon=True).start()

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


# ---------------------------------------------------------------------------------------- backends


def _driver_args(opts: RunOptions, *, cell: str, out: str, bridge: str, verl: str, work: str) -> list[str]:
    args = [
        "--cell",
        cell,
        "--out",
        out,
        "--bridge",
        bridge,
        "--verl",
        verl,
        "--work",
        work,
        "--import-check",
        opts.import_check,
        "--bridge-tests",
        opts.bridge_tests,
        "--preflight",
        opts.preflight,
        "--megatron-lm",
        opts.megatron_lm,
    ]
    if opts.phase_timeout:
        args += ["--phase-timeout", str(opts.phase_timeout)]
    return args


def _deadline(cell: Cell, opts: RunOptions) -> float:
    per_phase = opts.phase_timeout or cell.timeout_minutes * 60
    return per_phase * len(cell.phases) + SETUP_ALLOWANCE_S + STOP_GRACE_S


@dataclass(frozen=True)
class ContainerSpec:
    """Everything about a cell's container, for the SDK and for the equivalent `docker run` line."""

    image: str
    command: list[str]
    mounts: list[tuple[str, str, bool]]  # (host path, container path, read-only)
    environment: dict[str, str]
    gpus: list[str] | int | None
    shm_size: str
    ulimits: dict[str, int]


def container_spec(opts: RunOptions, gpus: list[str] | int | None) -> ContainerSpec:
    mounts = [
        (str(opts.bridge), BRIDGE_MOUNT, True),
        (str(containers_dir()), DRIVER_MOUNT, True),
        (str(opts.out), RUN_MOUNT, False),
    ]
    for name, host_path in sorted(opts.cache.items()):
        target = opts.container_paths.get(name)
        if target:
            mounts.append((str(host_path), target, name == "models"))
    environment = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    environment |= {
        "HOME": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if "hf_home" in opts.container_paths:
        environment["HF_HOME"] = opts.container_paths["hf_home"]
    environment |= dict(opts.env)
    command = [
        "python3",
        f"{DRIVER_MOUNT}/driver.py",
        *_driver_args(
            opts,
            cell=f"{RUN_MOUNT}/cell.json",
            out=RUN_MOUNT,
            bridge=BRIDGE_MOUNT,
            verl=VERL_IN_IMAGE,
            work="/tmp/verl-e2e-work",
        ),
        "--no-final-ray-stop",  # the container's exit ends the cluster
    ]
    return ContainerSpec(opts.image or "IMAGE", command, mounts, environment, gpus, opts.shm_size, dict(opts.ulimits))


def docker_command(cell: Cell, opts: RunOptions) -> list[str]:
    """The `docker run` command line equivalent to what `run-cell` does through the SDK."""
    gpus: list[str] | int | None = (
        None if opts.gpus == "none" else (cell.gpus if opts.gpus in (None, "all") else opts.gpus.split(","))
    )
    spec = container_spec(opts, gpus)
    cmd = ["docker", "run", "--rm", "--init", f"--shm-size={spec.shm_size}"]
    if isinstance(spec.gpus, int):
        cmd.append(f"--gpus={spec.gpus}")
    elif isinstance(spec.gpus, list):
        cmd.append(f'--gpus="device={",".join(spec.gpus)}"')
    cmd += [f"--ulimit={k}={v}" for k, v in spec.ulimits.items()]
    cmd += [f"--volume={src}:{dst}{':ro' if ro else ''}" for src, dst, ro in spec.mounts]
    cmd += [f"--env={k}" if k in PASS_THROUGH else f"--env={k}={v}" for k, v in sorted(spec.environment.items())]
    return [*cmd, f"--workdir={VERL_IN_IMAGE}", spec.image, *spec.command]


def run_docker(cell: Cell, opts: RunOptions, stream: Streamer, cancel: Cancellation, client: Any) -> dict[str, Any]:
    image = opts.image
    assert image is not None
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        try:
            client.images.pull(image)
        except docker.errors.APIError:
            raise UsageError(
                f"run-cell: image {image} is neither present nor pullable; build it with `verl-e2e image` "
                "(or pass --image with a tag this host has)"
            ) from None
    spec = container_spec(opts, gpu_request(cell, opts.gpus, host_gpus()))
    for src, _dst, read_only in spec.mounts[3:]:
        if not read_only:
            Path(src).mkdir(parents=True, exist_ok=True)
    device_requests = []
    if isinstance(spec.gpus, int):
        device_requests = [docker.types.DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])]
    elif isinstance(spec.gpus, list):
        device_requests = [docker.types.DeviceRequest(device_ids=spec.gpus, capabilities=[["gpu"]])]
    name = f"verl-e2e-{cell.id.lower()}-{uuid.uuid4().hex[:8]}"
    container = client.containers.create(
        image,
        spec.command,
        name=name,
        detach=True,
        init=True,
        environment=spec.environment,
        mounts=[
            docker.types.Mount(dst, src, type="bind", read_only=ro)
            for src, dst, ro in spec.mounts
            if Path(src).exists()
        ],
        user=f"{os.getuid()}:{os.getgid()}",
        shm_size=spec.shm_size,
        device_requests=device_requests,
        ulimits=[docker.types.Ulimit(name=k, soft=v, hard=v) for k, v in spec.ulimits.items()],
        labels={"io.verl-e2e.cell": cell.id, "io.verl-e2e.run-dir": str(opts.out)},
        working_dir=VERL_IN_IMAGE,
    )
    info: dict[str, Any] = {
        "backend": "docker",
        "container": name,
        "image": image,
        "image_id": client.images.get(image).id,
        "gpus": spec.gpus,
        "environment": sorted(spec.environment),
    }

    def stop() -> None:
        with contextlib.suppress(docker.errors.APIError):
            container.stop(timeout=STOP_GRACE_S)

    cancel.stop = stop
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:
            raise RunError(_start_problem(exc, spec)) from None

        def pump() -> None:
            for chunk in container.logs(stream=True, follow=True):
                stream.feed(chunk)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = _deadline(cell, opts)
        status = "finished"
        try:
            info["exit_code"] = container.wait(timeout=deadline).get("StatusCode")
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            status = "timeout"
            stop()
            info["exit_code"] = container.wait(timeout=STOP_GRACE_S + 30).get("StatusCode")
        reader.join(timeout=10)
        info["status"] = "cancelled" if cancel.signum is not None else status
        info["deadline_s"] = deadline
        return info
    finally:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)


def _start_problem(exc: Exception, spec: ContainerSpec) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    if "rlimit" in text:
        return (
            f"the engine could not apply the container's ulimits {spec.ulimits} ({text.strip()[-120:]}); "
            "this host caps them: pass e.g. --ulimit memlock=default to keep the host's limit "
            "(NCCL over InfiniBand may need memlock unlimited)"
        )
    if "gpu" in text.lower() or "nvidia" in text.lower():
        detail = text.strip()[-160:]
        return f"the engine could not give the container GPUs ({detail}); install the NVIDIA container toolkit"
    return f"the container could not start: {text.strip()[-200:]}"


def run_local(cell: Cell, opts: RunOptions, stream: Streamer, cancel: Cancellation) -> dict[str, Any]:
    if opts.verl is None:
        raise UsageError("run-cell: --backend local needs --verl PATH (a verl checkout on this machine)")
    devices = gpu_request(cell, opts.gpus, host_gpus())
    work = opts.out.parent / f".work-{cell.id}"
    maps = [f"{opts.container_paths[k]}={v}" for k, v in opts.cache.items() if k in opts.container_paths]
    cmd = [
        sys.executable,
        str(containers_dir() / "driver.py"),
        *_driver_args(
            opts,
            cell=str(opts.out / "cell.json"),
            out=str(opts.out),
            bridge=str(opts.bridge),
            verl=str(opts.verl),
            work=str(work),
        ),
    ]
    for m in maps:
        cmd += ["--map", m]
    env = {k: v for k, v in os.environ.items() if not SECRET_LIKE.search(k)} | dict(opts.env)
    env["PYTHONUNBUFFERED"] = "1"
    if isinstance(devices, list):  # named devices: the run (and every Ray worker) sees only these
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop() -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=STOP_GRACE_S)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue

    cancel.stop = stop
    assert proc.stdout is not None
    timer = threading.Timer(_deadline(cell, opts), stop)
    timer.start()
    try:
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            stream.feed(chunk)
        code = proc.wait()
    finally:
        timer.cancel()
    status = (
        "cancelled"
        if cancel.signum is not None
        else ("timeout" if timer.finished.is_set() and code < 0 else "finished")
    )
    return {"backend": "local", "command": cmd, "exit_code": code, "status": status}


# ------------------------------------------------------------------------------------------- entry


def docker_client() -> Any:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise UsageError(
            f"Docker engine not reachable at {host} ({str(exc).splitlines()[0][:120]}); start it "
            "(e.g. `sudo systemctl start docker`) or use --backend local"
        ) from None
    return client


def run_cell(opts: RunOptions, console: TextIO = sys.stdout, client: Any = None) -> Verdict:
    cell = load_cell(opts.cell_file)
    bridge = check_bridge(opts.bridge)
    opts = RunOptions(**{**opts.__dict__, "bridge": bridge, "env": check_env(opts.env), "out": opts.out.resolve()})
    if opts.backend == "docker" and opts.megatron_lm not in ("submodule", "installed"):
        raise UsageError(
            f"--megatron-lm {opts.megatron_lm}: a path works with --backend local only; in a container use "
            "submodule or installed (the image's megatron-core)"
        )
    if opts.backend == "docker" and client is None:
        client = docker_client()
    out = opts.out
    with run_dir_writes(out):
        out.mkdir(parents=True, exist_ok=True)
        for stale in (
            "phases.json",
            "provenance.json",
            "evidence.json",
            "verdict.json",
            "junit.xml",
            "driver.log",
            "checkpoints.json",
            "bridge-tests.json",
        ):
            (out / stale).unlink(missing_ok=True)
        _write(out / "cell.json", cell.to_json())
        _write(
            out / "phases.json",
            [{"name": p.name, "log": f"{p.name}.log", "status": "not_run"} for p in cell.phases],
        )
        started = time.time()
        stream = Streamer(cell.id, out / "driver.log", console)
        info: dict[str, Any] = {"started": started}
        with Cancellation() as cancel:
            try:
                if opts.backend == "docker":
                    info |= run_docker(cell, opts, stream, cancel, client)
                else:
                    info |= run_local(cell, opts, stream, cancel)
            finally:
                stream.close()
        info["duration_s"] = round(time.time() - started, 3)
        if info.get("status") in ("timeout", "cancelled"):
            reason = "cell deadline reached; stopped" if info["status"] == "timeout" else "cancelled by a signal"
            _patch_phases(out, info["status"], reason)
        _write(out / "host.json", info)
        _merge_provenance(out, info)
        verdict = judge_run_dir(out)
    if cancel.signum is not None:
        raise CancelledError(cancel.signum)
    return verdict


def _merge_provenance(out: Path, info: Mapping[str, Any]) -> None:
    path = out / "provenance.json"
    try:
        provenance = json.loads(path.read_text())
    except (OSError, ValueError):
        provenance = {
            "steps": [],
            "setup_failure": {
                "step": "driver",
                "class": "setup",
                "reason": f"the driver wrote no records (exit {info.get('exit_code')}); see driver.log",
            },
        }
    if "image" in info:
        provenance["image"] = {"tag": info["image"], "id": info.get("image_id")}
    provenance["host_exit_code"] = info.get("exit_code")
    _write(path, provenance)


def parse_env_pairs(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item}: expected NAME=VALUE")
        out[name] = value
    return out
