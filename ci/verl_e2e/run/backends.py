"""The two ways a cell runs: a container through the docker SDK, or the same driver on this machine.

The host owns what the driver cannot: the container (GPU requests, shm and ulimits, read-only mounts,
no network, no capabilities, an allow-list of environment variables), the cell's overall deadline,
cancellation (SIGTERM/SIGINT stop and remove the container or the process group) and live output
with a cell prefix. The container writes only into the scratch dir it is given.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from verl_e2e.errors import UsageError
from verl_e2e.plan.cells import Cell
from verl_e2e.resources import containers_dir
from verl_e2e.run.cachelayout import cache_mounts
from verl_e2e.run.runopts import (
    BRIDGE_MOUNT,
    DRIVER_MOUNT,
    PASS_THROUGH,
    RUN_MOUNT,
    SECRET_LIKE,
    SETUP_ALLOWANCE_S,
    STOP_GRACE_S,
    VERL_IN_IMAGE,
    RunError,
    RunOptions,
    gpu_request,
    host_gpus,
)


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


def deadline(cell: Cell, opts: RunOptions) -> float:
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


def container_spec(opts: RunOptions, gpus: list[str] | int | None, scratch: Path | None = None) -> ContainerSpec:
    """The container of a cell: only `scratch` is writable; the Bridge checkout and every cache are not."""
    mounts = [
        (str(opts.bridge), BRIDGE_MOUNT, True),
        (str(containers_dir()), DRIVER_MOUNT, True),
        (str(scratch or opts.out), RUN_MOUNT, False),
    ]
    for host_path, target in cache_mounts(opts.cache, opts.container_paths):
        mounts.append((host_path, target, True))  # PR code must not poison a later run's cache
    environment = {k: os.environ[k] for k in PASS_THROUGH if k in os.environ}
    environment |= {
        "HOME": "/tmp",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    if "hf_home" in opts.container_paths:
        environment["HF_HOME"] = opts.container_paths["hf_home"]
        environment["HF_DATASETS_CACHE"] = "/tmp/hf-datasets"  # HF_HOME is read-only; datasets writes a cache
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
    cmd = ["docker", "run", "--rm", "--init", f"--shm-size={spec.shm_size}", f"--network={opts.network}"]
    cmd += ["--cap-drop=ALL", "--security-opt=no-new-privileges", f"--pids-limit={opts.pids_limit}"]
    if isinstance(spec.gpus, int):
        cmd.append(f"--gpus={spec.gpus}")
    elif isinstance(spec.gpus, list):
        cmd.append(f'--gpus="device={",".join(spec.gpus)}"')
    cmd += [f"--ulimit={k}={v}" for k, v in spec.ulimits.items()]
    cmd += [f"--volume={src}:{dst}{':ro' if ro else ''}" for src, dst, ro in spec.mounts]
    cmd += [f"--env={k}" if k in PASS_THROUGH else f"--env={k}={v}" for k, v in sorted(spec.environment.items())]
    return [*cmd, f"--workdir={VERL_IN_IMAGE}", spec.image, *spec.command]


def run_docker(  # noqa: PLR0917 - the backends share one call shape
    cell: Cell, opts: RunOptions, stream: Streamer, cancel: Cancellation, client: Any, scratch: Path
) -> dict[str, Any]:
    import docker.errors  # noqa: PLC0415 - only a docker run pays for the SDK (plan and local runs do not)
    import docker.types  # noqa: PLC0415
    import requests  # noqa: PLC0415 - the SDK's timeouts are requests' exceptions

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
    devices = gpu_request(cell, opts.gpus, host_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))
    spec = container_spec(opts, devices, scratch)
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
        network_mode=opts.network,  # cells run offline: no metadata endpoint, no internal services
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        pids_limit=opts.pids_limit,
    )
    info: dict[str, Any] = {
        "backend": "docker",
        "container": name,
        "image": image,
        "image_id": client.images.get(image).id,
        "image_base": (client.images.get(image).labels or {}).get("org.opencontainers.image.base.name"),
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
        status = "finished"
        try:
            info["exit_code"] = container.wait(timeout=deadline(cell, opts)).get("StatusCode")
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            status = "timeout"
            stop()
            info["exit_code"] = container.wait(timeout=STOP_GRACE_S + 30).get("StatusCode")
        reader.join(timeout=10)
        info["status"] = "cancelled" if cancel.signum is not None else status
        info["deadline_s"] = deadline(cell, opts)
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


RUNNER_ONLY = ("GITHUB_", "ACTIONS_", "RUNNER_")


def local_command(cell: Cell, opts: RunOptions, scratch: Path) -> tuple[list[str], dict[str, str]]:
    """The driver command and environment of the local backend (the Slurm backend runs the same one)."""
    if opts.verl is None:
        raise UsageError(f"run-cell: --backend {opts.backend} needs --verl PATH (a verl checkout the job can read)")
    devices = gpu_request(cell, opts.gpus, host_gpus()) if opts.backend == "local" else None
    work = opts.out.parent / f".work-{opts.out.name}"  # per run dir: cells that share a node never share scratch
    maps = [f"{opts.container_paths[k]}={v}" for k, v in opts.cache.items() if k in opts.container_paths]
    cmd = [
        sys.executable,
        str(containers_dir() / "driver.py"),
        *_driver_args(
            opts,
            cell=str(scratch / "cell.json"),
            out=str(scratch),
            bridge=str(opts.bridge),
            verl=str(opts.verl),
            work=str(work),
        ),
    ]
    for m in maps:
        cmd += ["--map", m]
    # never the runner's tokens, nor GitHub's GITHUB_ENV/GITHUB_PATH files (they steer later steps)
    env = {k: v for k, v in os.environ.items() if not SECRET_LIKE.search(k) and not k.startswith(RUNNER_ONLY)}
    env |= dict(opts.env)
    env["PYTHONUNBUFFERED"] = "1"
    if isinstance(devices, list):  # named devices: the run (and every Ray worker) sees only these
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return cmd, env


def run_local(cell: Cell, opts: RunOptions, stream: Streamer, cancel: Cancellation, scratch: Path) -> dict[str, Any]:
    cmd, env = local_command(cell, opts, scratch)
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
    timer = threading.Timer(deadline(cell, opts), stop)
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


def docker_client() -> Any:
    import docker  # noqa: PLC0415 - only a docker run pays for the SDK

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
