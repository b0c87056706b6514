"""A planned cell adapted to the machine that runs it: GPU count and extra Hydra overrides.

A workstation or an offline node rarely looks like the runner the plan was made for (one GPU
instead of two, no APEX, small host RAM). Instead of editing cell.json by hand, `run-cell` takes
`--num-gpus` and `--hydra` and rewrites the cell here, before it is written to the run dir, so the
run dir's cell.json is exactly what ran and the difference is stated as a limitation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from verl_e2e.errors import UsageError
from verl_e2e.plan.cells import Cell, CellPhase

# a Hydra override: optional +, ++ or ~, a dotted key, =, a value (no shell: it is one argv item)
HYDRA_ARG = re.compile(r"(?:\+\+|\+|~)?[A-Za-z_][\w.\-/@]*(?:=.*)?", re.DOTALL)
PARALLEL_KEYS = ("COMMON_TP", "COMMON_PP", "COMMON_CP")


def _model_parallel(phase: CellPhase) -> int:
    """TP x PP x CP of a phase: the world size must be a multiple of it."""
    size = 1
    for key in PARALLEL_KEYS:
        value = phase.env.get(key, "1")
        size *= int(value) if value.isdigit() else 1
    return size


def check_hydra_args(items: Sequence[str]) -> list[str]:
    for item in items:
        if not HYDRA_ARG.fullmatch(item) or "\n" in item:
            raise UsageError(
                f"--hydra {item!r}: not a Hydra override; expected key=value, +key=value, ++key=value or ~key "
                "(e.g. --hydra data.dataloader_num_workers=0)"
            )
    return list(items)


def adapt_cell(cell: Cell, *, num_gpus: int | None = None, hydra: Sequence[str] = ()) -> Cell:
    """The cell with its GPU count and extra overrides changed; the plan's cell when neither is given."""
    hydra = check_hydra_args(hydra)
    limitations = list(cell.limitations)
    phases = list(cell.phases)
    gpus = cell.gpus
    if num_gpus is not None and num_gpus != cell.gpus:
        if num_gpus < 1:
            raise UsageError(f"--num-gpus {num_gpus}: expected 1 or more")
        need = max(_model_parallel(p) for p in phases)
        if num_gpus % need:
            raise UsageError(
                f"--num-gpus {num_gpus}: cell {cell.id} runs TP x PP x CP = {need}, so it needs a multiple of "
                f"{need} GPUs; pick another cell or a larger machine"
            )
        phases = [replace(p, env=dict(p.env, NUM_GPUS=str(num_gpus))) for p in phases]
        limitations.append(f"ran on {num_gpus} GPU(s) instead of the plan's {cell.gpus}")
        gpus = num_gpus
    if hydra:
        phases = [replace(p, args=[*p.args, *hydra]) for p in phases]
    return replace(cell, gpus=gpus, phases=phases, limitations=limitations)
