"""Where a verl run stopped, then why: the failure class from the root traceback, not from keywords.

The skill's rule decides what a failure means: a run that stopped because of data, the reward
model, Ray, vLLM, dependencies, disk or the cluster is Blocked (setup), not evidence against the
provider. So the class is read in this order:
  1. a signature that matches the root exception itself (APEX, attention backend, OOM, NCCL, ...);
  2. a missing module anywhere on the root path is the environment (setup);
  3. any other environment or resource signature seen in the log (Ray GCS, disk, OOM killer), unless
     the root exception is a real one raised in a frame with a known role (a line from a cleanup
     elsewhere in the log must not turn a provider's TypeError into Blocked); a messenger exception
     (an actor that died, a child process that failed) names no cause of its own, so the log's
     signature still does;
  4. the innermost verl/Bridge frame of the root traceback with a known role: checkpoint save,
     checkpoint load, model/provider construction (incl. LoRA wrapping), configuration, data,
     tokenizer, rollout engine start, or a training step;
  5. then the exception type (config errors, missing files) and finally `runtime`.
Pure: takes the collected facts, returns (class, signature, line, hint).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from verl_e2e.config.signatures import Signature
from verl_e2e.judge.tracebacks import Block

SAVE = frozenset(
    {"save_checkpoint", "_save_checkpoint", "save_hf_weights", "save_hf_pretrained", "save_hf_model", "_save_hf"}
)
LOAD = frozenset({"load_checkpoint", "_load_checkpoint", "load_hf_weights", "_load_from_checkpoint"})
MODEL_BUILD = frozenset(
    {
        "init_model",
        "_build_model_optimizer",
        "_build_megatron_module",
        "make_megatron_module",
        "get_model",
        "_create_model",
        "provide",
        "provide_distributed_model",
        "finalize",
        "_build_model",
        "build_model",
        "from_hf_pretrained",
        "to_megatron_provider",
        "provider_bridge",
        "get_peft_model",
        "create_peft",
        "apply_peft",
        "_build_critic_model_optimizer",
        "_build_rollout",
    }
)
TRAINING = frozenset(
    {
        "fit",
        "step",
        "_step_once",
        "update_actor",
        "update_critic",
        "update_policy",
        "compute_log_prob",
        "compute_ref_log_prob",
        "_compute_old_log_prob",
        "compute_values",
        "generate_sequences",
        "forward_backward_batch",
        "train_batch",
        "infer_batch",
        "train_mini_batch",
        "compute_advantage",
    }
)
# file-path roles for frames whose function name says little (`__init__`, `__post_init__`, `<module>`)
PATH_ROLES = (
    ("/megatron/bridge/models/", "model_build"),
    ("/megatron/bridge/peft/", "model_build"),
    ("/verl/workers/config/", "config"),
    ("/verl/trainer/config/", "config"),
    ("/verl/utils/config.py", "config"),
    ("/verl/utils/dataset/", "data"),
    ("/verl/utils/tokenizer.py", "tokenizer"),
    ("/transformers/tokenization_", "tokenizer"),
    ("/omegaconf/", "config"),
    ("/hydra/", "config"),
)
CONFIG_FUNCS = frozenset({"_validate_config", "validate_config", "check_mutually_exclusive"})
CONFIG_TYPES = frozenset(
    {
        "ConfigAttributeError",
        "ConfigKeyError",
        "ConfigCompositionException",
        "MissingMandatoryValue",
        "InterpolationResolutionError",
        "ConfigTypeError",
        "OverrideParseException",
    }
)
# exceptions that only report another process's end: the cause is elsewhere in the log
MESSENGERS = frozenset(
    {
        "ActorDiedError",
        "RayActorError",
        "ActorUnavailableError",
        "WorkerCrashedError",
        "RaySystemError",
        "ChildFailedError",
        "SystemExit",
        "KeyboardInterrupt",
        "OutOfMemoryError",
    }
)
MISSING_MODULE = re.compile(r"No module named|cannot open shared object file|undefined symbol")
SETUP_ROLES = {
    "config": "the configuration was rejected",
    "data": "the data could not be read",
    "tokenizer": "the tokenizer could not be loaded",
    "rollout": "the rollout engine did not start",
}
CLASS_OF_ROLE = {
    "save": "checkpoint_save",
    "load": "checkpoint_load",
    "model_build": "model_build",
    "training": "runtime",
}
HINTS = {
    "checkpoint_save": "rerun with SAVE_FREQ=-1 to separate construction from checkpointing",
    "checkpoint_load": "rerun Level 1 to separate saving from loading; compare the saved layout",
    "model_build": "check the provider is finalized with verl's mpu parallel sizes (and the LoRA target modules)",
    "missing": "a module is missing or mismatched in the image; install it, then rerun",
}

Hit = tuple[str, str]  # (signature name, line)


def frame_role(func: str, path: str) -> str | None:
    """What a frame is doing, where verl's and Bridge's names say so."""
    if func in SAVE or (func.startswith("save") and "checkpoint" in path):
        return "save"
    if func in LOAD or (func.startswith("load") and "checkpoint" in func):
        return "load"
    if func in MODEL_BUILD:
        return "model_build"
    if func in CONFIG_FUNCS:
        return "config"
    if func in TRAINING:
        return "training"
    if "/vllm/" in path or "/sglang/" in path:
        return "rollout"
    return next((role for part, role in PATH_ROLES if part in path), None)


def root_role(block: Block | None) -> str | None:
    """The innermost frame with a role; a rollout-engine frame counts only outside a training step."""
    if block is None:
        return None
    rollout = False
    for func, path in reversed(block.frames):
        role = frame_role(func, path)
        if role == "rollout":
            rollout = True
            continue
        if role is not None:
            if role == "model_build" and _bridge_code(func, path):
                # Bridge model/PEFT code a checkpoint save or load called (the adapter filter at save)
                # belongs to that save or load, not to model construction
                outer = _outer_checkpoint_role(block, func, path)
                if outer is not None:
                    return outer
            return "rollout" if rollout and role not in ("training", "save", "load") else role
    return "rollout" if rollout else None


def _bridge_code(func: str, path: str) -> bool:
    """A frame whose role comes only from its Bridge path (models/ or peft/), not its name."""
    return func not in MODEL_BUILD and any(part in path for part, role in PATH_ROLES if role == "model_build")


def _outer_checkpoint_role(block: Block, func: str, path: str) -> str | None:
    frames = block.frames[: block.frames.index((func, path))]
    for f, p in reversed(frames):
        role = frame_role(f, p)
        if role in ("save", "load"):
            return role
        if role in ("model_build", "training"):
            return None
    return None


def classify(
    root: Block | None,
    exception: Mapping[str, str] | None,
    hits: Mapping[str, str],
    signatures: Sequence[Signature],
    *,
    interrupted: bool,
    failed: bool,
    finished: bool,
    nan: bool,
) -> tuple[str, str | None, str | None, str | None]:
    """(failure class, signature name, signature line, hint) of a log's collected facts."""
    text = f"{exception['type']}: {exception['message']}" if exception else ""
    for sig in signatures:  # 1. the root exception names its own cause
        if text and sig.failure_class != "runtime" and sig.needle in text and sig.regex.search(text):
            return sig.failure_class, sig.name, text[:500], sig.hint
    if exception and (exception["type"] == "ModuleNotFoundError" or MISSING_MODULE.search(exception["message"])):
        return "setup", None, None, HINTS["missing"]  # 2.
    role = root_role(root)
    messenger = exception is None or exception["type"] in MESSENGERS or role is None
    for sig in signatures if messenger else ():  # 3.
        if sig.failure_class != "runtime" and sig.name in hits:
            return sig.failure_class, sig.name, hits[sig.name], sig.hint
    if interrupted and exception is None:
        return "interrupted", None, None, "the run was interrupted (Ctrl-C or a cancelled job); rerun it"
    if exception is not None or root is not None or failed:
        return _by_role(role, exception)
    weak = [s for s in signatures if s.failure_class == "runtime" and s.name in hits]
    if weak and not finished:
        return "runtime", weak[0].name, hits[weak[0].name], weak[0].hint
    if nan:
        return "nan", None, None, "NaN/Inf in training metrics; check loss scaling, LR and the provider's init"
    return "none", None, None, None


def _by_role(role: str | None, exception: Mapping[str, str] | None) -> tuple[str, None, None, str | None]:
    etype = exception["type"] if exception else ""
    if role in CLASS_OF_ROLE and not (etype == "FileNotFoundError" and role in ("model_build", "training")):
        if etype == "ImportError" and role != "model_build":
            return "setup", None, None, HINTS["missing"]
        klass = CLASS_OF_ROLE[role]
        return klass, None, None, HINTS.get(klass)
    if role in SETUP_ROLES:
        return "setup", None, None, f"{SETUP_ROLES[role]}; fix the runner environment or the cell's settings"
    if etype in CONFIG_TYPES:
        return "setup", None, None, "the configuration was rejected; check the cell's Hydra overrides"
    if etype in ("ImportError", "FileNotFoundError"):
        what = "a data or model file is missing; run the cache warm-up" if etype == "FileNotFoundError" else None
        return "setup", None, None, what or HINTS["missing"]
    return "runtime", None, None, None
