"""What `run-cell` is asked to do, checked before anything starts: options, cell, Bridge, env, GPUs.

Every refusal here is a UsageError with one line saying what was wrong and what to pass instead.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError, VerlE2EError
from verl_e2e.plan.cells import Cell, cell_from_json

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
    backend: str = "docker"  # docker | local | slurm
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
    network: str = "none"  # the container's network; cells read only the mounted caches
    retries: int = 1  # a Blocked cell with a transient cause (signatures.yaml `transient`) runs again
    pids_limit: int = 32768
    ulimits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_ULIMITS))
    slurm_partition: str | None = None
    slurm_account: str | None = None
    slurm_container: str | None = None  # pyxis: the image the job runs in
    slurm_args: tuple[str, ...] = ()  # extra srun options from the site, validated one by one
    changes: Mapping[str, Any] | None = None  # the plan's changed line ranges, written as changes.json
    notes: tuple[str, ...] = ()  # limitations the host adds (a known-incompatible Megatron-LM, unexercised pins)


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


def gpu_request(
    cell: Cell, gpus: str | None, available: int, runner_devices: str | None = None
) -> list[str] | int | None:
    """None: no GPUs; an int: that many; a list: these device ids.

    `runner_devices`: the GPUs this runner owns (its CUDA_VISIBLE_DEVICES), where a host has several
    runners; the cell then gets the first of those by id instead of "any N", so runners never collide.
    """
    if gpus == "none":
        return None
    owned = [d.strip() for d in (runner_devices or "").split(",") if d.strip().isdigit()]
    if gpus is None and owned:
        if len(owned) < cell.gpus:
            raise UsageError(
                f"run-cell: the cell {cell.id} needs {cell.gpus} GPU(s) but this runner owns {len(owned)} "
                f"(CUDA_VISIBLE_DEVICES={runner_devices}); run it on a runner labelled {', '.join(cell.runs_on)}"
            )
        return owned[: cell.gpus]
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


def parse_env_pairs(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item}: expected NAME=VALUE")
        out[name] = value
    return out
