"""Bridge functions verl calls only under a setting no cell turns on.

verl imports a few Bridge functions that its Megatron engine registers only when a user asks for them
(verl 1dda039, `verl/utils/megatron_utils.py` `make_megatron_module`): Bridge's `freeze_moe_router`
as a post-creation hook when `moe_config.freeze_moe_router` is set in the model's override config, and
`load_peft_adapter_checkpoint` as a pre-wrap hook when the LoRA config names an `adapter_path`; and
its checkpoint manager saves and loads through `save_fsdp_dtensor_checkpoint` /
`load_fsdp_dtensor_checkpoint` (and their `preprocess_fsdp_dtensor_state_dict`) only when a checkpoint
is written or resumed with Megatron-FSDP on (`verl/utils/checkpoint/megatron_checkpoint_manager.py`).
Bridge builds a PEFT type other than LoRA (DoRA, canonical LoRA, VLM LoRA: a whole class) only when verl's
LoRA config names it.
Every cell trains fresh adapters with the router left to PEFT, and the one level that saves does so
under DDP, so a change only inside these functions runs in no cell: the plan names the lines and the
setting rather than running Level 0, which imports the module and never calls them. Where a level's
settings turn the call on, or a recorded cell ran the function, the change is planned as any other.
"""

from __future__ import annotations

import re
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
    # settings one cell must have together (patterns over its `KEY=VALUE` environment and arguments);
    # default: the setting alone
    needs: tuple[str, ...] = ()


_FSDP_CKPT = "src/megatron/bridge/training/checkpointing.py"
_FSDP_NEEDS = (r"\bUSE_MEGATRON_FSDP=True\b", r"\b(SAVE_FREQ=[1-9]|RESUME_MODE=)")
_FSDP_WHERE = (
    "verl/utils/checkpoint/megatron_checkpoint_manager.py _save/_load_megatron_fsdp_checkpoint, when a "
    "checkpoint is saved or resumed with Megatron-FSDP on"
)


_PEFT_WHERE = (
    "verl/workers/config/megatron_peft.py get_peft_cls -> Bridge's create_peft, when the model's LoRA config "
    "names that type"
)


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
    # PEFT types other than LoRA: Bridge builds the class `create_peft` names (`peft/utils.py`
    # `_import_peft_class`), and verl's LoRA config says `type: lora` unless a user picks another
    *(
        Gate(path, cls, f"lora.type={kind}", _PEFT_WHERE)
        for path, cls, kind in (
            ("src/megatron/bridge/peft/dora.py", "DoRA", "dora"),
            ("src/megatron/bridge/peft/canonical_lora.py", "CanonicalLoRA", "canonical_lora"),
            ("src/megatron/bridge/peft/lora.py", "VLMLoRA", "vlm_lora"),
        )
    ),
    *(
        Gate(_FSDP_CKPT, name, "USE_MEGATRON_FSDP with SAVE_FREQ or RESUME_MODE", _FSDP_WHERE, _FSDP_NEEDS)
        for name in (
            "save_fsdp_dtensor_checkpoint",
            "load_fsdp_dtensor_checkpoint",
            "preprocess_fsdp_dtensor_state_dict",
        )
    ),
)


def closed(matrix: Matrix, file: ChangedFile, ran: Sequence[Ran]) -> str | None:
    """Why no cell runs a change whose every changed function is one verl calls only under a setting no
    level sets; None otherwise (exact scopes only: a hunk header may name the def above the change)."""
    names = file.functions
    if not names or file.module_level:
        return None
    gates = {g.function: g for g in GATES if g.path == file.path}
    # a gated function, or a method of a gated class (`DoRA.transform`)
    found = {n: gates.get(n) or gates.get(n.split(".", 1)[0]) for n in names}
    if any(g is None for g in found.values()) or any(_set_by_a_level(matrix, g) for g in found.values() if g):
        return None
    if any(n in r.functions.get(file.path, ()) for r in ran for n in names):
        return None  # a recorded cell ran it after all: what ran decides
    said = "; ".join(f"{n} is called only from {g.where} ({g.setting})" for n, g in sorted(found.items()) if g)
    return f"{said}, which no level sets, so no cell runs the change"


def _settings(matrix: Matrix) -> list[str]:
    """Each cell's settings as one text: its level's, variant's and phase's `KEY=VALUE` and arguments."""
    out = []
    for level in matrix.levels.values():
        for v in level.variants:
            for p in v.phases or (None,):
                envs = [level.env, v.env, *([p.env] if p else [])]
                args = [*level.args, *v.args, *(p.args if p else ())]
                out.append("\n".join([*(f"{k}={val}" for e in envs for k, val in e.items()), *args]))
    return out


def _set_by_a_level(matrix: Matrix, gate: Gate) -> bool:
    if not gate.needs:
        return any(gate.setting in text for text in _settings(matrix))
    return any(all(re.search(n, text) for n in gate.needs) for text in _settings(matrix))


_UNGATED = {
    "untaken": "lines the recorded cells ran around, never took",
    "unreached": "code no recorded cell ran, called from nothing a cell reaches",
    "gated": "a gated function",
}


def uncalled(matrix: Matrix, file: ChangedFile) -> str | None:
    """Why no cell runs a change whose definition Bridge calls only where no cell goes (callsites.py):
    on lines recorded cells ran around and never took, or inside a gated function no level opens."""
    if file.callers is None or any(how == "layout" for *_, how in file.callers):
        return None  # (a call under a layout condition runs where it holds: the layout rules, select.py)
    gates = {(g.path, g.function): g for g in GATES}
    lines: dict[tuple[str, str, str], list[str]] = {}
    for path, line, function, how in file.callers:
        gate = gates.get((path, function.split(".", 1)[0]))
        if how == "gated" and (gate is None or _set_by_a_level(matrix, gate)):
            return None
        why = f"only under {gate.setting}" if gate is not None else _UNGATED[how]
        lines.setdefault((function, path.rsplit("/", 1)[-1], why), []).append(str(line))
    shown = [f"{fn} ({name}:{', '.join(at)}: {why})" for (fn, name, why), at in lines.items()]
    named = sorted(set(file.functions or ()))
    # one method of a class the cells built (callsites.py) is named whole; a top-level helper by its name
    methods = bool(named) and all(n.count(".") == 1 for n in named) and len({n.split(".")[0] for n in named}) == 1
    top = " or ".join(named) if methods else (named or ["it"])[0].split(".", 1)[0]
    if methods and all(n.split(".")[1] in ("__init__", "__post_init__") for n in named):
        top, verb, built = named[0].split(".")[0], "builds", "built"  # a class's set-up runs where it is built
    else:
        verb, built = "calls", "called"
    if not shown:
        return f"nothing in Bridge's sources {verb} {top}, and verl does not name it, so no cell runs the change"
    return f"{top} is {built} only from {'; '.join(shown)}, so no cell runs the change"
