"""Write run dirs the way `run-cell` does, for judging tests (logs come from the verl_log double), and
unpack the real ones kept as archives under tests/fixtures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.cells import Cell, expand
from verl_e2e.plan.select import select

BRIDGE_SRC = "/workspace/Megatron-Bridge/src"


def cell_for(matrix: Matrix, level: int, family: str = "qwen", variant: str | None = None) -> Cell:
    cells = expand(matrix, select(matrix, [], requested=[level], family_override=[family]))
    return next(c for c in cells if c.level == level and (variant is None or c.variant == variant))


def write_run_dir(
    root: Path,
    cell: Cell,
    logs: dict[str, str],
    *,
    statuses: dict[str, str] | None = None,
    exit_codes: dict[str, int] | None = None,
    bridge_import: dict[str, str] | None = None,
    bridge_tests: dict[str, Any] | None = None,
    checkpoints: dict[str, Any] | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cell.json").write_text(json.dumps(cell.to_json()))
    imports = (
        bridge_import
        if bridge_import is not None
        else {
            "driver": f"{BRIDGE_SRC}/megatron/bridge/__init__.py",
            "ray_worker": f"{BRIDGE_SRC}/megatron/bridge/__init__.py",
        }
    )
    provenance = {
        "bridge": {"path": "/workspace/Megatron-Bridge", "src": BRIDGE_SRC, "commit": "abc1234", "dirty": []},
        "verl": {"path": "/workspace/verl", "commit": "1dda039", "dirty": ["tests/x.py"]},
        "image": {"tag": "verl-e2e:test"},
        "bridge_import": imports,
    }
    (root / "provenance.json").write_text(json.dumps(provenance))
    phases = []
    for phase in cell.phases:
        if phase.name not in logs:
            phases.append({"name": phase.name, "log": f"{phase.name}.log", "status": "not_run"})
            continue
        (root / f"{phase.name}.log").write_text(logs[phase.name])
        status = (statuses or {}).get(phase.name, "ok")
        code = (exit_codes or {}).get(phase.name, 0 if status == "ok" else 1)
        phases.append(
            {
                "name": phase.name,
                "log": f"{phase.name}.log",
                "status": status,
                "exit_code": code,
                "duration_s": 60.0,
                "command": "bash tests/special_e2e/run_ppo_trainer_megatron.sh",
                "log_tail": logs[phase.name].splitlines()[-3:],
            }
        )
    (root / "phases.json").write_text(json.dumps(phases))
    if bridge_tests is not None:
        (root / "bridge-tests.json").write_text(json.dumps(bridge_tests))
    if checkpoints is not None:
        (root / "checkpoints.json").write_text(json.dumps(checkpoints))
    return root


def unpack_kept(folder: str, name: str, into: Path) -> Path:
    """A scratch copy of the real run kept as tests/fixtures/FOLDER/NAME.tar.xz (one run dir inside), by
    tools/family_table.py's own reader, which refuses links out of the tree."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("family_table", root / "tools/family_table.py")
    assert spec and spec.loader
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    run: Path = tool.unpack(root / f"tests/fixtures/{folder}/{name}.tar.xz", into)
    return run
