"""The run directory: the one artifact a cell leaves, and all that judging and reporting read.

Layout (written by `run-cell`, read by `judge` and `report`):

    cell.json            the Cell record
    provenance.json      both repos' commits and dirty files, image, bridge import paths, commands
    phases.json          per phase: name, log file, exit code, status, duration, log tail
    <phase>.log          the phase's console log (stdout and stderr of verl's wrapper)
    bridge-tests.json    optional: focused Bridge tests {status, command, exit_code, summary}
    checkpoints.json     optional: per phase, the on-disk checkpoint layout after it ran
    evidence.json        written by judge: per phase Evidence
    verdict.json         written by judge
    junit.xml            written by judge

Reading is forgiving (a crashed run may have left only some files); what is missing becomes a
finding in the verdict, never an exception.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from verl_e2e import safefs
from verl_e2e.errors import UsageError
from verl_e2e.plan.cells import Cell, cell_from_json

LOG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,100}\.log")
PhaseStatus = Literal["ok", "failed", "timeout", "killed", "cancelled", "not_run", "error"]


@dataclass(frozen=True)
class PhaseRun:
    name: str
    log: str  # file name inside the run dir
    status: PhaseStatus
    exit_code: int | None = None
    duration_s: float | None = None
    command: str | None = None
    log_tail: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # the variables the cell set for this phase
    cwd: str | None = None  # where the wrapper ran (the verl checkout)
    milestones: dict[str, float] = field(default_factory=dict)  # driver's stamps: start-up stage -> s since start

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "log": self.log,
            "status": self.status,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "command": self.command,
            "log_tail": self.log_tail,
            "env": self.env,
            "cwd": self.cwd,
            "milestones": self.milestones,
        }


@dataclass(frozen=True)
class RunDir:
    path: Path
    cell: Cell
    provenance: dict[str, Any]
    phases: list[PhaseRun]
    bridge_tests: dict[str, Any] | None
    checkpoints: dict[str, Any] | None
    problems: list[str]  # files that were missing or unreadable

    def log_path(self, phase: PhaseRun) -> Path:
        return self.path / phase.log


def _read_json(path: Path, problems: list[str]) -> Any:
    """A record of the run dir, read as data: never through a link, never a special file."""
    try:
        return json.loads(safefs.read_text(path))
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
    except (OSError, ValueError, safefs.UnsafeFileError) as exc:
        problems.append(f"{path.name} is unreadable ({exc})")
    return None


def _log_name(value: Any, phase: str) -> str:
    """The log file of a phase: a plain name inside the run dir, whatever phases.json claims."""
    name = value if isinstance(value, str) else ""
    return name if LOG_NAME.fullmatch(name) else f"{phase}.log"


STATUSES = frozenset({"ok", "failed", "timeout", "killed", "cancelled", "not_run", "error", "running"})
# a phase still "running" in a finished run dir: the driver died under it


def _phase_records(items: list[Any], cell: Cell, problems: list[str]) -> list[PhaseRun]:
    """phases.json as data: only the cell's own phases, in the cell's order, with checked fields."""
    known = {p.name for p in cell.phases}
    by_name: dict[str, dict[str, Any]] = {}
    for item in items:
        name = item.get("name") if isinstance(item, dict) else None
        if name not in known:
            problems.append(f"phases.json names a phase the cell does not have ({str(name)[:40]!r}); ignored")
            continue
        by_name.setdefault(str(name), item)
    phases = []
    for phase in cell.phases:
        item = by_name.get(phase.name, {"status": "not_run"})
        raw = item.get("status")
        status: PhaseStatus = (
            raw if raw in STATUSES and raw != "running" else ("failed" if raw == "running" else "error")
        )
        code = item.get("exit_code")
        duration = item.get("duration_s")
        phases.append(
            PhaseRun(
                name=phase.name,
                log=_log_name(item.get("log"), phase.name),
                status=status,
                exit_code=code if isinstance(code, int) else None,
                duration_s=float(duration) if isinstance(duration, (int, float)) else None,
                command=str(item["command"]) if item.get("command") is not None else None,
                log_tail=[str(x) for x in item.get("log_tail", [])][-30:],
                env={str(k): str(v) for k, v in (item.get("env") or {}).items()},
                cwd=str(item["cwd"]) if item.get("cwd") else None,
                milestones=_stamps(item.get("milestones")),
            )
        )
    return phases


def _stamps(raw: Any) -> dict[str, float]:
    """The driver's start-up stamps; anything that is not a name and a number of seconds is left out."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def load_run_dir(path: str | Path) -> RunDir:
    """Read a run dir. Only a missing or broken cell.json is a usage error: nothing can be judged."""
    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"{path}: not a directory; pass a run dir written by `verl-e2e run-cell`")
    problems: list[str] = []
    cell_data = _read_json(root / "cell.json", problems)
    if not isinstance(cell_data, dict):
        raise UsageError(
            f"{path}: no readable cell.json; a run dir needs the cell it ran "
            "(to judge a bare log use `verl-e2e evidence LOG`)"
        )
    try:
        cell = cell_from_json(cell_data)
    except (TypeError, KeyError) as exc:
        raise UsageError(f"{root / 'cell.json'}: not a cell record ({exc}); rewrite it with `verl-e2e plan`") from None
    provenance = _read_json(root / "provenance.json", problems) or {}
    phases_data = _read_json(root / "phases.json", problems)
    phases: list[PhaseRun] = []
    if isinstance(phases_data, list):
        phases = _phase_records(phases_data, cell, problems)
    else:
        # No phase records (the runner died early): judge whatever logs exist, in the cell's order.
        for phase in cell.phases:
            log = root / f"{phase.name}.log"
            phases.append(PhaseRun(phase.name, log.name, "error" if log.exists() else "not_run"))
    bridge_tests = _read_json(root / "bridge-tests.json", []) if (root / "bridge-tests.json").exists() else None
    checkpoints = _read_json(root / "checkpoints.json", []) if (root / "checkpoints.json").exists() else None
    return RunDir(root, cell, provenance, phases, bridge_tests, checkpoints, problems)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file), never through a planted link."""
    safefs.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
