"""Provider values verl replaces: a change that only sets one of them reaches no cell's model.

verl's Megatron engine builds every model the same way: the bridge's `provider_bridge` fills a
provider, then verl hands `apply_overrides_and_finalize` its own values for the parallel sizes,
sequence parallel, the token dispatcher, the router's load balancing, the attention backend and the
recompute settings (verl 1dda039, `workers/engine/megatron/transformer_impl.py` `provider_overrides`,
with the engine config's default `override_transformer_config`). A bridge that now sets
`provider.moe_router_load_balancing_type = "seq_aux_loss"` changes a value that verl overwrites
before the model is built: every cell would run it and none would see it. Finalisation runs after
the overrides, so an assignment in `finalize` or `__post_init__` is never one of these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from verl_e2e.plan.layout import CONFIGURING, VERL_SETS

# VERL_SETS plus what verl takes from its own engine config for every provider
VERL_OVERRIDES = frozenset(
    {
        *VERL_SETS,
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "expert_tensor_parallel_size",
        "sequence_parallel",
        "overlap_p2p_comm",
        "attention_backend",
        "recompute_modules",
        "recompute_num_layers",
        # apply_overrides_and_finalize(dtype=verl's param_dtype) sets these three on every provider, and
        # get_model, handed fp16/bf16 by verl, sets the pipeline and autocast dtypes from them
        "params_dtype",
        "fp16",
        "bf16",
        "pipeline_dtype",
        "autocast_dtype",
        # check_mtp_config (utils/megatron_utils.py): with MTP off it drops the MTP block (the factor then
        # scales nothing); with MTP on it always passes verl's own mtp.mtp_loss_scaling_factor
        "mtp_loss_scaling_factor",
        # not set by verl but inert under what it sets: Megatron-Core's router reads an aux-loss
        # coefficient only for an aux-loss balancing type (router.py get_aux_loss_coeff), and verl sets
        # moe_router_load_balancing_type to "none" on every provider
        "moe_aux_loss_coeff",
    }
)
# the LoRA fields verl's create_peft call always passes (hf_model.yaml `lora`: rank as dim, alpha, dropout,
# target and excluded modules, dropout position; the dtype as lora_dtype): a dataclass default of one of
# them never reaches an adapter
PEFT_OVERRIDES = frozenset(
    {"dim", "alpha", "dropout", "target_modules", "exclude_modules", "dropout_position", "lora_dtype"}
)
# what a bridge or a provider class sets before verl's overrides: `provider.x = v` (in a bridge's
# provider_bridge), a dataclass field `x: T = v`, or a keyword line `x=v,` of a provider's construction.
# `provider_kwargs["x"] = v` is the same value on its way to the provider's construction (the HF config's
# translation). Not `self.x = v` or `config.x = v`: a provider's own methods and finalisation helpers may
# run after them.
_ASSIGNS = (r"provider\.(\w+)\s*=(?!=)", r"(\w+)\s*:[^=\n]*=(?!=)", r"provider_kwargs\[[\"'](\w+)[\"']\]\s*=(?!=)")
_KWARG = r"(\w+)=(?!=)[^\n]*[,(]\s*$"
_SETS = re.compile(r"^\s*(?:" + "|".join((*_ASSIGNS, _KWARG)) + ")")
# without the keyword-argument form: in a function that builds no provider or config (a value-head hook's
# `sequence_parallel=...` is the hook's own argument, which verl's override never reaches)
_SETS_NO_KWARGS = re.compile(r"^\s*(?:" + "|".join(_ASSIGNS) + ")")
_BUILDS_CONFIG = re.compile(r"(?i)provider|config|bridge")
_MODELS = "src/megatron/bridge/models/"
_PEFT = "src/megatron/bridge/peft/"
# a dataclass field's default (`dropout_position: str = "pre"`), not a parameter's (`dropout: float = 0.0,`:
# a function's callers may leave it out)
_FIELD = re.compile(r"^\s*(\w+)\s*:[^=\n]*=(?!=)(?!.*,\s*$)")


def overridden(path: str, lines: Sequence[str] | None, scopes: Sequence[str]) -> tuple[str, ...]:
    """The verl-overridden fields a model file's change sets (or a PEFT file's dataclass defaults verl
    passes anyway), when setting them is all its code lines do."""
    if not lines or any(s in CONFIGURING for s in scopes):
        return ()
    if path.startswith(_PEFT):
        return _only(lines, _FIELD, PEFT_OVERRIDES)
    if not path.startswith(_MODELS):
        return ()
    builds = not scopes or any(_BUILDS_CONFIG.search(s) for s in scopes)
    return _only(lines, _SETS if builds else _SETS_NO_KWARGS, VERL_OVERRIDES)


def _only(lines: Sequence[str], form: re.Pattern[str], names: frozenset[str]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for text in lines:
        if not text.split("#", 1)[0].strip():
            continue  # a comment, docstring prose (kept as a comment) or a blank line
        m = form.match(text)
        name = next((g for g in m.groups() if g), "") if m else ""
        if name not in names:
            return ()
        found[name] = None
    return tuple(found)


def unseen(path: str, names: Sequence[str]) -> str:
    """What the plan says instead of running a cell."""
    shown = ", ".join(f"`{n}`" for n in names)
    if path.startswith(_PEFT):
        return (
            f"changed values no cell's model keeps: {path} changes only the defaults of {shown}, which verl "
            "passes to every LoRA it creates (its `lora` config), so no level runs for it"
        )
    return (
        f"changed values no cell's model keeps: {path} sets only {shown}, which verl's Megatron engine "
        "sets on every provider it builds, or leaves unused by what it sets (its provider overrides), so no "
        "level runs for it"
    )
