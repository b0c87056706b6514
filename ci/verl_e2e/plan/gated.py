"""Bridge functions verl calls only under a setting no cell turns on.

verl imports a few Bridge functions that its Megatron engine registers only when a user asks for them
(verl 1dda039, `verl/utils/megatron_utils.py` `make_megatron_module`): Bridge's `freeze_moe_router`
as a post-creation hook when `moe_config.freeze_moe_router` is set in the model's override config, and
`load_peft_adapter_checkpoint` as a pre-wrap hook when the LoRA config names an `adapter_path`. Every
cell trains fresh adapters with the router left to PEFT, so a change only inside these functions runs
in no cell: the plan names the lines and the setting rather than running Level 0, which imports the
module and never calls them. Where a level's arguments turn the setting on, or a recorded cell ran the
function, the change is planned as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.runtime import Ran


@dataclass(frozen=True)
class Gate:
    path: str
    function: str
    setting: str  # the verl override that turns the call on, as a cell's Hydra argument would name it
    where: str  # where verl makes the call


GATES = (
    Gate(
        "src/megatron/bridge/training/utils/train_utils.py",
        "freeze_moe_router",
        "moe_config.freeze_moe_router",
        "verl/utils/megatron_utils.py make_megatron_module, when the model's override config sets "
        "moe_config.freeze_moe_router",
    ),
    Gate(
        "src/megatron/bridge/peft/utils.py",
        "load_peft_adapter_checkpoint",
        "lora.adapter_path",
        "verl/utils/megatron_utils.py make_megatron_module, when the LoRA config names an adapter_path",
    ),
)


def closed(matrix: Matrix, file: ChangedFile, ran: Sequence[Ran]) -> str | None:
    """Why no cell runs a change whose every changed function is one verl calls only under a setting no
    level sets; None otherwise (exact scopes only: a hunk header may name the def above the change)."""
    names = file.functions
    if not names or file.module_level:
        return None
    gates = {g.function: g for g in GATES if g.path == file.path}
    if not all(n in gates for n in names) or any(_set_by_a_level(matrix, gates[n].setting) for n in names):
        return None
    if any(n in r.functions.get(file.path, ()) for r in ran for n in names):
        return None  # a recorded cell ran it after all: what ran decides
    said = "; ".join(f"{n} is called only from {gates[n].where}" for n in sorted(set(names)))
    return f"{said}, which no level sets, so no cell runs the change"


def _set_by_a_level(matrix: Matrix, setting: str) -> bool:
    args = [
        a
        for level in matrix.levels.values()
        for a in (*level.args, *(x for v in level.variants for x in (*v.args, *(y for p in v.phases for y in p.args))))
    ]
    return any(setting in a for a in args)
