"""What a cell run is given besides its flags: the plan's context, the Megatron-Core it runs, and the
rule that in GitHub Actions it runs only in a container. Used by `run-cell`, `run` and `base-run`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verl_e2e.config import compat
from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.run.image import verl_commit


def require_container_in_actions(
    command: str, backend: str, slurm_container: str | None, env: Mapping[str, str], dry_run: bool = False
) -> None:
    """In GitHub Actions a cell runs only in a container. As the runner's own user (the local backend,
    or Slurm without pyxis) PR code could write the runner's cache (a base-run entry that makes its own
    failure read "pre-existing"), rewrite its run dir after the host judged it, and reach the step's
    GITHUB_ENV / GITHUB_PATH files that steer every later step of the job."""
    if env.get("GITHUB_ACTIONS") != "true" or dry_run:
        return
    if backend == "local" or (backend == "slurm" and not slurm_container):
        how = "--backend local" if backend == "local" else "--backend slurm without --slurm-container"
        raise UsageError(
            f"{command}: {how} runs PR code as the runner's user, which GitHub Actions jobs never do; "
            "use --backend docker, or --backend slurm --slurm-container IMAGE (pyxis)"
        )


def _plan_context(path: Any) -> dict[str, Any]:
    if not isinstance(path, Path):
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    context = data.get("context") if isinstance(data, dict) else None
    return context if isinstance(context, dict) else {}


def megatron_choice(
    megatron_lm: str, plan_file: Path | None, verl: Path | None, bridge: Path | None, matrix: Matrix
) -> dict[str, Any]:
    """--megatron-lm auto resolved against matrix.yaml's compatibility record, and the notes it leaves."""
    pins = [str(p) for p in _plan_context(plan_file).get("pins_changed") or []]
    notes = [pin_note(pins)] if any(p != compat.SUBMODULE for p in pins) else []
    if megatron_lm != "auto":
        return {"megatron_lm": megatron_lm, "notes": tuple(notes)}
    verl_ref = compat.upstream(verl) or verl_commit(verl) if verl is not None else matrix.defaults.verl_ref
    choice = compat.choose(matrix.raw, verl_ref, compat.pinned(bridge) if bridge else None, pins)
    if choice.limitation:
        notes.append(choice.limitation)
    return {"megatron_lm": choice.megatron_lm, "notes": tuple(notes)}


def pin_note(pins: list[str]) -> str:
    named = ", ".join(p for p in pins if p != compat.SUBMODULE)
    return (
        f"this PR changes dependency pins ({named}); the cell ran the environment's installed versions, so the "
        "new pins were not exercised"
    )


def plan_changes(path: Path) -> dict[str, Any] | None:
    """The changed line ranges a plan.json carries (None for a bare cell record or an older plan)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    context = (data.get("context") or {}) if isinstance(data, dict) else {}
    changes, functions, names = context.get("changes"), context.get("changed_functions"), context.get("changed_names")
    defaults = context.get("changed_defaults")
    if not isinstance(changes, dict):
        return None
    return {
        "lines": changes,
        "functions": functions if isinstance(functions, dict) else {},
        "names": names if isinstance(names, dict) else {},
        "defaults": defaults if isinstance(defaults, list) else [],
    }
