"""One phase's process: run it with its output teed to the log and the console, stamp the start-up lines
(milestones.py), and stop it where verl can no longer finish (`Stuck`).

Why a watchdog of its own: vLLM answers a failed call from the trainer by logging it and carrying on
("Invocation of collective_rpc method failed", vLLM 0.24's EngineCore), and verl 1dda039 waits on the
weight sync for ever. On the H200 five MoE cells sat 10 minutes past such a KeyError until the node was
lost (2026-12-04); on a CI runner each would hold its GPU until the cell's 45-minute timeout. A phase
still running GRACE_S after such a line is stopped, with a line in its log that says why, and judged like
any failed phase from the error above it. Standard library only (runs in the image).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from milestones import Milestones

TAIL = 30
GRACE_S = 180.0  # what a cell waits after the line: the rollout's own retries and Ray's error reporting
STATE: dict = {"proc": None, "cancelled": False}  # the running phase, for the driver's SIGTERM handler

# (what happened, a substring of the line that says so), for lines after which verl waits for ever
FATAL: tuple[tuple[str, str], ...] = (
    (
        "vLLM failed a call from the trainer (a weight sync into the rollout)",
        "Invocation of collective_rpc method failed",
    ),
    ("vLLM's engine died", "EngineDeadError"),
)


# lines that show training went on: a step finished after the FATAL line, so it was not fatal after all
PROGRESS = ("timing_s/step", "Training Progress:")


class Stuck:
    """Notes the first FATAL line and says, GRACE_S later, that the phase should be stopped, unless a step
    finished in between (a failed call verl survived). `checks` are asked too: each returns why the phase
    must stop now (the driver's import check running next to the phase), or None."""

    def __init__(self, grace: float = GRACE_S, checks: tuple[Callable[[], str | None], ...] = ()) -> None:
        self.grace = grace
        self.checks = checks
        self.seen: tuple[float, str] | None = None

    def feed(self, line: str, now: float | None = None) -> None:
        if self.seen is not None:
            if any(p in line for p in PROGRESS):
                self.seen = None
            return
        for what, text in FATAL:
            if text in line:
                self.seen = (time.monotonic() if now is None else now, what)
                return

    def due(self, now: float | None = None) -> str | None:
        """Why the phase must stop now, or None."""
        for check in self.checks:
            why = check()
            if why is not None:
                return why
        if self.seen is None:
            return None
        at, what = self.seen
        waited = (time.monotonic() if now is None else now) - at
        if waited < self.grace:
            return None
        return f"{what} {waited:.0f} s ago and the phase has not ended since: verl waits on it; stopping the phase"


def kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _stop(proc: subprocess.Popen, fh: BinaryIO, line: str) -> None:
    """Say in the log why the phase stops, then stop its process group (the tail keeps verl's last lines)."""
    fh.write(f"\n{line}\n".encode())
    sys.stdout.write(f"{line}\n")
    kill_group(proc)


def _seen(lines: list[bytes], prefix: str, tail: list[str], marks: Milestones | None, stuck: Stuck | None) -> list[str]:
    """Complete output lines: stamped, watched, echoed with the phase's prefix; the new tail."""
    for raw in lines:
        text = raw.decode("utf-8", errors="replace")
        if marks is not None:
            marks.feed(text)
        if stuck is not None:
            stuck.feed(text)
        sys.stdout.write(f"{prefix}{text}\n")
        tail = [*tail, text][-TAIL:]
    sys.stdout.flush()
    return tail


def run_logged(
    cmd: list[str],
    *,
    cwd: Path,
    env: dict,
    log_path: Path,
    prefix: str,
    timeout: float,
    marks: Milestones | None = None,
    stuck: Stuck | None = None,
) -> tuple[int | None, str, list[str]]:
    """Run cmd with output teed to log_path and stdout (stamping `marks`, watching for `stuck`).
    Returns (exit code, status, log tail)."""
    tail: list[str] = []
    deadline = time.monotonic() + timeout
    with log_path.open("ab", buffering=0) as fh:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        STATE["proc"] = proc
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        pending = b""
        status = None
        while True:
            if STATE["cancelled"]:
                status = "cancelled"
                kill_group(proc)
                break
            if time.monotonic() > deadline:
                status = "timeout"
                _stop(proc, fh, f"verl-e2e: phase timed out after {timeout:.0f}s; stopping it")
                break
            why = stuck.due() if stuck is not None else None
            if why is not None:
                status = "failed"
                _stop(proc, fh, f"verl-e2e: {why}")
                break
            chunk = proc.stdout.read(65536)
            if chunk:
                fh.write(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                tail = _seen(lines, prefix, tail, marks, stuck)
                continue
            if proc.poll() is not None:
                rest = proc.stdout.read() or b""
                fh.write(rest)
                pending += rest
                break
            time.sleep(0.05)
        if pending:
            text = pending.decode("utf-8", errors="replace")
            sys.stdout.write(f"{prefix}{text}\n")
            tail = (tail + text.splitlines())[-TAIL:]
        code = proc.wait()
        STATE["proc"] = None
    if status is None:
        status = "ok" if code == 0 else ("killed" if code in (137, -9) else "failed")
    return code, status, tail
