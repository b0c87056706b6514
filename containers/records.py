"""The cell driver's records: provenance.json, phases.json, both repos' state, checkpoint layout.

Standard library only (runs with the image's Python, next to driver.py). Every change is written
at once, atomically, so a killed run still leaves readable records.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path


def log(msg: str) -> None:
    print(f"verl-e2e: {msg}", flush=True)


def write_json(path: Path, data: object) -> None:
    """Atomic write; a failure (a full disk) is reported and the cell goes on (the host reports it too)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log(f"cannot write {path.name}: {exc.strerror or exc}")


class Recorder:
    """provenance.json and phases.json, rewritten after every change so a killed run still has them."""

    def __init__(self, out: Path, cell: dict) -> None:
        self.out = out
        self.provenance: dict = {"steps": [], "limitations": [], "commands": []}
        self.overrides: dict = {}  # env values the driver decided (dummy model paths)
        self.token = uuid.uuid4().hex  # marks the processes this cell starts (driver.stop_own_processes)
        self.arg_paths: list[tuple[str, str]] = []  # cache dirs the driver replaced with a made copy
        self.phases = [{"name": p["name"], "log": f"{p['name']}.log", "status": "not_run"} for p in cell["phases"]]
        self.save()

    @classmethod
    def reopen(cls, out: Path) -> Recorder:
        """The records a crashed run left, to add its setup failure to (a fresh one if unreadable)."""
        rec = cls.__new__(cls)
        rec.out, rec.overrides, rec.token, rec.arg_paths = out, {}, uuid.uuid4().hex, []
        try:
            rec.provenance = json.loads((out / "provenance.json").read_text())
            rec.phases = json.loads((out / "phases.json").read_text())
        except (OSError, ValueError):
            rec.provenance, rec.phases = {"steps": [], "limitations": [], "commands": []}, []
        return rec

    def save(self) -> None:
        write_json(self.out / "provenance.json", self.provenance)
        write_json(self.out / "phases.json", self.phases)

    def step(self, name: str, status: str, detail: str, started: float) -> None:
        self.provenance["steps"].append(
            {"name": name, "status": status, "detail": detail, "duration_s": round(time.time() - started, 3)}
        )
        log(f"{name}: {status} - {detail}")
        self.save()

    def fail(self, step: str, klass: str, reason: str) -> int:
        self.provenance["setup_failure"] = {"step": step, "class": klass, "reason": reason}
        self.save()
        log(f"stopping: {reason}")
        return 3


def git_state(path: Path) -> dict:
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-c", "safe.directory=*", "--no-optional-locks", "-C", str(path), *args],
            capture_output=True,
            text=True,
            check=False,
        )

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        baked = (
            os.environ.get("VERL_E2E_VERL_COMMIT")
            if path == Path(os.environ.get("VERL_REPO", "/nonexistent"))
            else None
        )
        if baked:  # verl baked into the image from `git archive`: the commit is in the image's env
            return {
                "path": str(path),
                "commit": baked[:12],
                "full_commit": baked,
                "dirty": [],
                "source": "image",
            }
        return {"path": str(path), "commit": "not a git checkout", "dirty": []}
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    return {
        "path": str(path),
        "commit": head.stdout.strip()[:12],
        "full_commit": head.stdout.strip(),
        "dirty": dirty,
    }


def checkpoint_listing(root: Path) -> dict:
    steps, tracker, roles = [], None, set()
    if root.is_dir():
        for tracker_file in root.rglob("latest_checkpointed_iteration.txt"):
            try:
                tracker = int(tracker_file.read_text().strip())
            except ValueError:
                tracker = None
        for step_dir in root.rglob("global_step_*"):
            if step_dir.is_dir() and step_dir.name.split("_")[-1].isdigit():
                steps.append(int(step_dir.name.split("_")[-1]))
                roles.update(p.name for p in step_dir.iterdir() if p.is_dir())
    return {"steps": sorted(set(steps)), "tracker": tracker, "roles": sorted(roles)}
