"""Run one cell: the host side of `verl-e2e run-cell`, and the run dir it always leaves.

The cell (in a container, or the driver locally) writes only into a scratch dir; the host copies out
the files a run dir has, as data (`safefs`), into a fresh run dir of its own, adds driver.log,
host.json and its provenance, then judges it. A killed, timed-out or cancelled run still leaves
its logs and a verdict. Nothing here interprets verl's output; `judging` does that afterwards.
"""

from __future__ import annotations

import errno
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from verl_e2e import safefs
from verl_e2e.config.signatures import default_signatures
from verl_e2e.errors import UsageError
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict
from verl_e2e.plan.cells import Cell
from verl_e2e.run.backends import Cancellation, Streamer, docker_client, docker_command, run_docker, run_local
from verl_e2e.run.runopts import (
    DEFAULT_ULIMITS,
    CancelledError,
    RunError,
    RunOptions,
    check_bridge,
    check_env,
    gpu_request,
    host_gpus,
    load_cell,
    parse_env_pairs,
)
from verl_e2e.run.slurm import run_slurm

__all__ = [
    "DEFAULT_ULIMITS",
    "RunOptions",
    "docker_client",
    "docker_command",
    "gpu_request",
    "host_gpus",
    "parse_env_pairs",
    "run_cell",
]


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
    safefs.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(safefs.read_text(path))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None


def _patch_phases(out: Path, status: str, reason: str) -> None:
    """After a host-side stop: phases still running (or cancelled by it) get the host's status."""
    phases = _read_json(out / "phases.json")
    if not isinstance(phases, list):
        return
    for phase in phases:
        if isinstance(phase, dict) and phase.get("status") in ("running", "cancelled"):
            try:
                text = safefs.read_text(out / f"{phase['name']}.log", safefs.LOG_LIMIT)
            except (OSError, safefs.UnsafeFileError):
                text = ""
            phase.update(status=status, log_tail=[*text.splitlines()[-10:], f"verl-e2e: {reason}"])
            phase.setdefault("exit_code", None)
    _write(out / "phases.json", phases)


def fresh_run_dir(out: Path) -> None:
    """An empty run dir the host owns: a previous run dir there is removed (links are not followed)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"--out {out}: not a directory; pass a directory for the run dir")
    if out.exists() and any(out.iterdir()):
        if not (out / "cell.json").exists() and not (out / "driver.log").exists():
            raise UsageError(f"--out {out}: not empty and not a run dir; pass an empty or new directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def run_dir_names(cell: Cell) -> list[str]:
    """The files the cell may hand back: the driver's records and one log per phase, nothing else."""
    fixed = [
        "provenance.json",
        "phases.json",
        "checkpoints.json",
        "bridge-tests.json",
        "bridge-tests.log",
        "bridge-functions.json",  # the Bridge functions the cell's processes ran (untrusted data, read as such)
        "updates.json",  # what each optimizer step did to the trained weights (untrusted data, read as such)
    ]
    return [*fixed, *(f"{p.name}.log" for p in cell.phases)]


def run_cell(opts: RunOptions, console: TextIO = sys.stdout, client: Any = None) -> Verdict:
    """Run the cell; a Blocked run with a transient cause runs again (both attempts kept)."""
    cell = load_cell(opts.cell_file)
    bridge = check_bridge(opts.bridge)
    opts = replace(opts, bridge=bridge, env=check_env(opts.env), out=opts.out.resolve())
    if opts.backend == "docker" and opts.megatron_lm not in ("submodule", "installed"):
        raise UsageError(
            f"--megatron-lm {opts.megatron_lm}: a path works with --backend local only; in a container use "
            "submodule or installed (the image's megatron-core)"
        )
    if opts.backend == "docker" and client is None:
        client = docker_client()
    out = opts.out
    with run_dir_writes(out):
        fresh_run_dir(out)
        verdict, cancel = _attempt(cell, opts, console, client)
        for number in range(1, opts.retries + 1):
            cause = _transient(out) if verdict.result == "Blocked" and cancel.signum is None else None
            if cause is None:
                break
            console.write(f"verl-e2e: {cell.id}: Blocked by {cause} (transient); running it again\n")
            kept = out.with_name(f".{out.name}.attempt-{number}")
            shutil.rmtree(kept, ignore_errors=True)
            out.rename(kept)
            out.mkdir()
            verdict, cancel = _attempt(cell, opts, console, client)
            kept.rename(out / f"attempt-{number}")
            provenance = _read_json(out / "provenance.json") or {}
            note = f"retried: attempt {number} was Blocked by {cause} (transient); it is kept in attempt-{number}/"
            provenance.setdefault("limitations", []).append(note)
            _write(out / "provenance.json", provenance)
            verdict = judge_run_dir(out)
    if cancel.signum is not None:
        raise CancelledError(cancel.signum)
    return verdict


def _transient(out: Path) -> str | None:
    """The transient signature that blocked the run (from its own evidence.json), if any."""
    evidence = _read_json(out / "evidence.json")
    names = {s.name for s in default_signatures() if s.transient}
    for ev in (evidence or {}).values() if isinstance(evidence, dict) else []:
        if isinstance(ev, dict) and ev.get("failure_signature") in names:
            return str(ev["failure_signature"])
    return None


def _attempt(cell: Cell, opts: RunOptions, console: TextIO, client: Any) -> tuple[Verdict, Cancellation]:
    """One run into the (empty) run dir: scratch, copy-out, the host's records, the verdict."""
    out = opts.out
    _write(out / "cell.json", cell.to_json())
    not_run = [{"name": p.name, "log": f"{p.name}.log", "status": "not_run"} for p in cell.phases]
    _write(out / "phases.json", not_run)
    scratch = Path(tempfile.mkdtemp(prefix=f".scratch-{cell.id}-", dir=out.parent))
    try:
        cancel, info = _run_in(scratch, cell, opts, console, client)
        problems = safefs.copy_out(scratch, out, run_dir_names(cell))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if info.get("status") in ("timeout", "cancelled"):
        reason = "cell deadline reached; stopped" if info["status"] == "timeout" else "cancelled by a signal"
        _patch_phases(out, info["status"], reason)
    _write(out / "host.json", info)
    if opts.changes is not None:  # the host's own copy of the plan's changed lines, for the judge
        _write(out / "changes.json", dict(opts.changes))
    _merge_provenance(out, info, problems, opts.notes)
    return judge_run_dir(out), cancel


def _run_in(
    scratch: Path, cell: Cell, opts: RunOptions, console: TextIO, client: Any
) -> tuple[Cancellation, dict[str, Any]]:
    """Run the cell with `scratch` as the only place it can write; driver.log is the host's own."""
    _write(scratch / "cell.json", cell.to_json())
    started = time.time()
    stream = Streamer(cell.id, opts.out / "driver.log", console)
    info: dict[str, Any] = {"started": started, "runner": list(cell.runs_on)}
    with Cancellation() as cancel:
        try:
            if opts.backend == "docker":
                info |= run_docker(cell, opts, stream, cancel, client, scratch)
            elif opts.backend == "slurm":
                info |= run_slurm(cell, opts, stream, cancel, scratch)
            else:
                info |= run_local(cell, opts, stream, cancel, scratch)
        finally:
            stream.close()
    info["duration_s"] = round(time.time() - started, 3)
    return cancel, info


def _merge_provenance(out: Path, info: Mapping[str, Any], problems: list[str], notes: Sequence[str] = ()) -> None:
    provenance = _read_json(out / "provenance.json")
    if not isinstance(provenance, dict):
        provenance = {
            "steps": [],
            "setup_failure": {
                "step": "driver",
                "class": "setup",
                "reason": f"Slurm did not run the job: {info['submit_error']}"
                if info.get("submit_error")
                else f"the driver wrote no records (exit {info.get('exit_code')}); see driver.log",
            },
        }
    if "image" in info:
        provenance["image"] = {"tag": info["image"], "id": info.get("image_id"), "base": info.get("image_base")}
    provenance["host_exit_code"] = info.get("exit_code")
    if notes:  # the host's own reading of what ran (which Megatron, which pins), kept whatever the cell wrote
        recorded = [x for x in provenance.get("limitations") or [] if isinstance(x, str)]
        provenance["limitations"] = list(dict.fromkeys([*recorded, *notes]))
    provenance["runner"] = info.get("runner", [])
    if problems:  # the cell handed back something that is not a plain file: never evidence of a pass
        provenance["setup_failure"] = {
            "step": "run dir",
            "class": "harness",
            "reason": "the cell left unsafe files, not copied: " + "; ".join(problems[:5]),
        }
    _write(out / "provenance.json", provenance)
