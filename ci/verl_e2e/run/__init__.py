"""Run: one cell request -> a complete run dir, in a container, locally or under Slurm.

`launch` is the entry: the CLI hands it one `CellRequest` and it derives the rest top-down (the
cell from the plan, `adapt`ed to GPUs and Hydra overrides; the `image` ensured from its inputs;
the `cachelayout`; the Megatron-Core and plan context from `runinputs`). `runopts` is the runner's
options contract, `runcell` runs the in-container driver through a backend (`backends`: docker,
local; `slurm`) with retries and always leaves logs and a verdict, judged by the stage below.
`prefetch` warms a runner's cache. Nothing from the container is trusted by the host.

The names below load on first use (PEP 562): `verl-e2e plan` reads a run option or two from this
package, and should not pay for docker, the judge and the backends it never starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl_e2e.run.launch import CellRequest, run_many, run_one
    from verl_e2e.run.runopts import RunOptions

__all__ = ["CellRequest", "RunOptions", "run_many", "run_one"]
_HOMES = {"CellRequest": "launch", "run_many": "launch", "run_one": "launch", "RunOptions": "runopts"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
