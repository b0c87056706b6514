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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from verl_e2e.cells import Cell, cell_from_json
from verl_e2e.errors import UsageError

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
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name} is unreadable ({exc})")
    return None


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
        for item in phases_data:
            phases.append(
                PhaseRun(
                    name=item["name"],
                    log=item.get("log", f"{item['name']}.log"),
                    status=item.get("status", "error"),
                    exit_code=item.get("exit_code"),
                    duration_s=item.get("duration_s"),
                    command=item.get("command"),
                    log_tail=list(item.get("log_tail", [])),
                    env={str(k): str(v) for k, v in (item.get("env") or {}).items()},
                    cwd=item.get("cwd"),
                )
            )
    else:
        # No phase records (the runner died early): judge whatever logs exist, in the cell's order.
        for phase in cell.phases:
            log = root / f"{phase.name}.log"
            phases.append(PhaseRun(phase.name, log.name, "error" if log.exists() else "not_run"))
    bridge_tests = _read_json(root / "bridge-tests.json", []) if (root / "bridge-tests.json").exists() else None
    checkpoints = _read_json(root / "checkpoints.json", []) if (root / "checkpoints.json").exists() else None
    return RunDir(root, cell, provenance, phases, bridge_tests, checkpoints, problems)


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (a reader never sees half a file, even if the writer is killed)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
