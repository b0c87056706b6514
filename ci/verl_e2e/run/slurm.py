"""The Slurm backend: one cell is one `srun` job step, streamed, bounded and cancellable.

Sites whose GPUs sit behind Slurm (multi-node MoE cells, shared pools) run the cell through `srun`.
Two ways, as the site has them:
  - pyxis/enroot (`--slurm-container IMAGE`): the job runs the verl image; the Bridge checkout is
    mounted read-only at /workspace/Megatron-Bridge, verl at /workspace/verl, the caches read-only,
    and the job's scratch dir is the only writable mount (the skill's own `srun --container-image`
    recipe);
  - without a container: the local backend's driver runs inside the allocation (a shared filesystem
    and a Python with verl, as on the login node).
The job has a unique name, so cancellation and the deadline are one `scancel --name`; Slurm's own
`--time` limit is set to the same deadline as a backstop. Output is streamed from srun as it comes;
the run dir is the same as every backend's (runcell copies the scratch dir out and judges it).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError
from verl_e2e.plan.cells import Cell
from verl_e2e.resources import containers_dir
from verl_e2e.run.backends import Cancellation, Streamer, deadline, local_command
from verl_e2e.run.cachelayout import cache_mounts
from verl_e2e.run.runopts import PASS_THROUGH, SECRET_LIKE, STOP_GRACE_S, RunOptions

IN_CONTAINER = {"bridge": "/workspace/Megatron-Bridge", "verl": "/workspace/verl", "driver": "/opt/verl-e2e"}
SAFE_ARG = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:=/@+-]*)?")  # one srun option, no shell in it
# srun options a site may add, by name: scheduling only. Never one that runs a program (--prolog,
# --task-prolog, --epilog), moves output (--output, --error, --input), mounts (--container-*), changes
# who or where (--uid, --chdir) or the environment (--export, --get-user-env).
SITE_OPTIONS = frozenset(
    {
        "--qos", "--constraint", "--reservation", "--exclusive", "--gres", "--mem", "--mem-per-gpu",
        "--mem-per-cpu", "--cpus-per-task", "--cpus-per-gpu", "--gpus-per-task", "--nodelist", "--exclude",
        "--comment", "--wckey", "--gpu-bind", "--cpu-bind", "--hint", "--mpi", "--network", "--switches",
        "--distribution", "--overcommit", "--oversubscribe", "--priority", "--nice", "--clusters",
    }
)  # fmt: skip
# what the job step's environment may carry (srun --export=<names>: only these and SLURM_*), never
# the runner's tokens or GitHub's GITHUB_ENV / GITHUB_PATH files
EXPORT_NAMES = frozenset({"PATH", "HOME", "USER", "LANG", "TZ", "TMPDIR", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH"})
EXPORT_PREFIXES = ("CUDA_", "NCCL_", "HF_", "VERL_", "TRANSFORMERS_", "RAY_", "PYTHON", "LC_", "NVIDIA_")
TIME_LIMIT = re.compile(r"DUE TO TIME LIMIT|CANCELLED .* DUE TO TIME")
# srun's own refusals (bad partition, no such account, unsatisfiable request), not a task's exit status
SUBMIT_ERROR = re.compile(r"^srun: error: (?!.*\btask \d+: )(.*)$", re.MULTILINE)


def check_slurm_args(args: list[str]) -> list[str]:
    """Extra srun options from the site (e.g. --qos=high): each one option, no spaces, no shell."""
    for arg in args:
        if not SAFE_ARG.fullmatch(arg):
            raise UsageError(
                f"--slurm-arg {arg!r}: not one srun option; pass options such as --qos=high or "
                "--constraint=h100, one per --slurm-arg"
            )
        name = arg.split("=", 1)[0]
        if name not in SITE_OPTIONS:
            raise UsageError(
                f"--slurm-arg {name}: not an option a site may add (scheduling options only, e.g. --qos, "
                f"--constraint, --reservation, --gres); the cell's own srun line sets the rest"
            )
    return args


def exported(env: dict[str, str], cell_env: Iterable[str]) -> str:
    """srun's --export value: the allowed names present in `env`, plus the cell's own variables."""
    names = sorted(
        k
        for k in env
        if (k in EXPORT_NAMES or k.startswith(EXPORT_PREFIXES) or k in cell_env) and not SECRET_LIKE.search(k)
    )
    return ",".join(names) or "NONE"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise UsageError(f"run-cell --backend slurm: {name} not found on PATH; run on a Slurm login node")
    return found


def _mounts(opts: RunOptions, scratch: Path) -> str:
    pairs = [
        f"{scratch}:{scratch}",
        f"{opts.bridge}:{IN_CONTAINER['bridge']}:ro",
        f"{containers_dir()}:{IN_CONTAINER['driver']}:ro",
    ]
    if opts.verl is not None:
        pairs.append(f"{opts.verl}:{IN_CONTAINER['verl']}:ro")  # PR code must not rewrite the verl it runs
    pairs += [f"{host}:{target}:ro" for host, target in cache_mounts(opts.cache, opts.container_paths)]
    return ",".join(pairs)


def _containerise(cmd: list[str], scratch: Path) -> list[str]:
    """The driver command as the image sees it: its python, the mounted driver and trees, a work dir
    inside the scratch mount, and no cache maps (the caches are mounted where the cell expects them)."""
    out = ["python3", f"{IN_CONTAINER['driver']}/driver.py"]
    args = cmd[2:]
    inside = {"--bridge": IN_CONTAINER["bridge"], "--verl": IN_CONTAINER["verl"], "--work": f"{scratch}/work"}
    i = 0
    while i < len(args):
        flag = args[i]
        if flag == "--map":
            i += 2
            continue
        out.append(flag)
        if flag in inside:
            out.append(inside[flag])
            i += 2
            continue
        i += 1
    return out


def srun_command(cell: Cell, opts: RunOptions, scratch: Path, job_name: str) -> tuple[list[str], dict[str, str]]:
    """The `srun` line for one cell (also what --dry-run prints)."""
    cmd, env = local_command(cell, opts, scratch)
    minutes = math.ceil(deadline(cell, opts) / 60)
    srun = [
        "srun",
        f"--job-name={job_name}",
        "--nodes=1",
        "--ntasks=1",
        f"--time={minutes}",
        "--unbuffered",
        "--kill-on-bad-exit=1",
        f"--export={exported(env, {*opts.env, *PASS_THROUGH, 'PYTHONUNBUFFERED'})}",
    ]
    if opts.gpus != "none" and cell.gpus:
        srun.append(f"--gpus-per-node={cell.gpus}")
    if opts.slurm_partition:
        srun.append(f"--partition={opts.slurm_partition}")
    if opts.slurm_account:
        srun.append(f"--account={opts.slurm_account}")
    srun += list(opts.slurm_args)
    if opts.slurm_container:
        srun += [
            f"--container-image={opts.slurm_container}",
            f"--container-mounts={_mounts(opts, scratch)}",
            f"--container-workdir={IN_CONTAINER['verl']}",
        ]
        cmd = _containerise(cmd, scratch)
    return [*srun, "--", *cmd], env


def run_slurm(cell: Cell, opts: RunOptions, stream: Streamer, cancel: Cancellation, scratch: Path) -> dict[str, Any]:
    job_name = f"verl-e2e-{cell.id}-{secrets.token_hex(4)}"
    cmd, env = srun_command(cell, opts, scratch, job_name)
    cmd[0] = _tool("srun")
    scancel = _tool("scancel")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    stopped = threading.Event()

    def stop() -> None:
        """Cancel the job through Slurm (every node of it), then make sure srun itself is gone."""
        stopped.set()
        subprocess.run([scancel, f"--name={job_name}"], capture_output=True, check=False, timeout=60)
        try:
            proc.wait(timeout=STOP_GRACE_S + 30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)

    cancel.stop = stop
    timer = threading.Timer(deadline(cell, opts), stop)
    timer.start()
    tail = bytearray()
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            stream.feed(chunk)
            tail = (tail + chunk)[-16384:]
        code = proc.wait()
    finally:
        timer.cancel()
    text = tail.decode("utf-8", "replace")
    if cancel.signum is not None:
        status = "cancelled"
    elif (timer.finished.is_set() and stopped.is_set()) or TIME_LIMIT.search(text):
        status = "timeout"
    else:
        status = "finished"
    info: dict[str, Any] = {"backend": "slurm", "command": cmd, "exit_code": code, "status": status, "job": job_name}
    submit = SUBMIT_ERROR.search(text)
    if submit and code != 0:
        info["submit_error"] = submit.group(1).strip()
    return info


def add_arguments(p: Any) -> None:
    """run-cell/run options of the Slurm backend (a site sets them once, see README's site settings)."""
    g = p.add_argument_group("Slurm backend (--backend slurm)")
    g.add_argument("--slurm-partition", metavar="NAME", help="srun --partition")
    g.add_argument("--slurm-account", metavar="NAME", help="srun --account")
    g.add_argument(
        "--slurm-container",
        metavar="IMAGE",
        help="run the job in this image through pyxis (--container-image/--container-mounts); without it "
        "the driver runs on the allocated node with --verl from a shared filesystem",
    )
    g.add_argument(
        "--slurm-arg", action="append", default=[], metavar="OPTION", help="one more srun option, e.g. --qos=high"
    )


def options_from(args: Any) -> dict[str, Any]:
    return {
        "slurm_partition": getattr(args, "slurm_partition", None),
        "slurm_account": getattr(args, "slurm_account", None),
        "slurm_container": getattr(args, "slurm_container", None),
        "slurm_args": tuple(check_slurm_args(list(getattr(args, "slurm_arg", []) or []))),
    }
