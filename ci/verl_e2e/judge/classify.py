"""Where a verl run stopped, then why: the failure class from the root traceback, not from keywords.

The skill's rule decides what a failure means: a run that stopped because of data, the reward
model, Ray, vLLM, dependencies, disk or the cluster is Blocked (setup), not evidence against the
provider; nor is a run someone interrupted. So the class is read in this order:
  1. a signature that matches the root exception itself (APEX, attention backend, OOM, NCCL, a config
     key not in the schema, ...);
  2. a root exception whose type or text is its cause wherever it surfaced (`causes`): a missing module
     or an undefined symbol in a compiled extension (setup), an omegaconf/Hydra schema error or a verl
     config dataclass refusing a keyword while Hydra builds it (setup, the key named), a cancelled task
     or an interrupting signal (interrupted);
  3. any other environment or resource signature seen in the log (Ray GCS, disk, OOM killer), unless
     the root exception is a real one raised in a frame with a known role (a line from a cleanup
     elsewhere in the log must not turn a provider's TypeError into Blocked); a messenger exception
     (an actor that died, a child process that failed) names no cause of its own, so the log's
     signature still does;
  4. the innermost verl/Bridge frame of the root traceback with a known role: checkpoint save,
     checkpoint load, model/provider construction (incl. LoRA wrapping), configuration, data,
     tokenizer, rollout engine start, or a training step. Bridge code known only by its path, and
     Bridge's HF weight import, take their caller's role: the import at model build is model build,
     the same import under verl's checkpoint manager is a checkpoint load;
  5. then the exception type (missing files, failed imports) and finally `runtime`.
Pure: takes the collected facts, returns (class, signature, line, hint).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from verl_e2e.config.signatures import Signature
from verl_e2e.judge import causes
from verl_e2e.judge.tracebacks import Block

SAVE = frozenset(
    {"save_checkpoint", "_save_checkpoint", "save_hf_weights", "save_hf_pretrained", "save_hf_model", "_save_hf"}
)
# Bridge's `load_hf_weights` is not here: verl calls it both to build the model and from its checkpoint
# manager; which of the two it was is read from the frames around it (`_outer_role`)
LOAD = frozenset({"load_checkpoint", "_load_checkpoint", "_load_from_checkpoint"})
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
        # the weight sync into the rollout engine each step (Bridge's export, then vLLM/SGLang's load)
        "update_weights",
        "_update_weights",
        "update_weights_from_ipc",
        "update_weights_from_tensor",
        "sync_rollout_weights",
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
        "InstantiationException",  # Hydra's wrapper when a verl config's constructor refuses its YAML
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
# a message that points at another line for its cause (transformers' lazy import, vLLM's engine start)
DEFERS = re.compile(r"look up to see its traceback|because of the following error|See root cause above")
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
}

Hit = tuple[str, str]  # (signature name, line)


def frame_role(func: str, path: str) -> str | None:
    """What a frame is doing, where verl's and Bridge's names say so."""
    if func in SAVE or (func.startswith("save") and "checkpoint" in path):
        return "save"
    if func in LOAD or (func.startswith("load") and "checkpoint" in func):
        return "load"
    if func in MODEL_BUILD or (func in causes.WEIGHT_IMPORT and "/mbridge/" in path):
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
    for at in range(len(block.frames) - 1, -1, -1):
        func, path = block.frames[at]
        role = frame_role(func, path)
        if role == "rollout":
            rollout = True
            continue
        if role is not None:
            if _borrowed(func, path):
                role = _outer_role(block.frames[:at]) or role
            return "rollout" if rollout and role not in ("training", "save", "load") else role
    return "rollout" if rollout else None


def _borrowed(func: str, path: str) -> bool:
    """A frame whose role is its caller's: Bridge model/PEFT code known only by its path (the adapter
    filter a save calls, an adapter's forward in a training step), or an HF weight import (at model
    build, or from the checkpoint manager's load)."""
    bridge = any(part in path for part, role in PATH_ROLES if role == "model_build")
    return (bridge or "/mbridge/" in path) and (func not in MODEL_BUILD or func in causes.WEIGHT_IMPORT)


def _outer_role(frames: list[tuple[str, str]]) -> str | None:
    """The role of the nearest caller that names its own (save, load, model build, training step)."""
    for func, path in reversed(frames):
        role = frame_role(func, path)
        if role in ("save", "load", "model_build", "training") and not _borrowed(func, path):
            return role
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
    texts = [text, *hits.values()]
    for sig in signatures:  # 1. the root exception names its own cause
        if text and sig.failure_class != "runtime" and sig.needle in text and sig.regex.search(text):
            return sig.failure_class, sig.name, text[:500], _hint(sig, text, texts)
    named = _named(root, exception, hits, texts, interrupted)  # 2. formats that name their cause
    if named is not None:
        return named
    role = root_role(root)
    messenger = exception is None or exception["type"] in MESSENGERS or role is None or DEFERS.search(text) is not None
    for sig in signatures if messenger else ():  # 3. (an interrupt after the last step stopped nothing)
        if sig.failure_class not in ("runtime", "interrupted" if finished else "") and sig.name in hits:
            return sig.failure_class, sig.name, hits[sig.name], _hint(sig, hits[sig.name], texts)
    if interrupted and not finished and (exception is None or exception["type"] in MESSENGERS):
        return "interrupted", None, None, causes.interrupt_hint(causes.INTERRUPTS["KeyboardInterrupt"])
    if exception is not None or root is not None or failed:
        return _by_role(role, exception, root)
    weak = [s for s in signatures if s.failure_class == "runtime" and s.name in hits]
    if weak and not finished:
        return "runtime", weak[0].name, hits[weak[0].name], weak[0].hint
    if nan:
        return "nan", None, None, "NaN/Inf in training metrics; check loss scaling, LR and the provider's init"
    return "none", None, None, None


def _hint(sig: Signature, line: str, texts: list[str]) -> str:
    """A signature's hint; an interrupt names its signal, a config error its key."""
    if sig.failure_class == "interrupted":
        return causes.interrupt_hint(causes.interrupted_by(line))
    return causes.fill(sig.hint, texts)


def _named(
    root: Block | None,
    exception: Mapping[str, str] | None,
    hits: Mapping[str, str],
    texts: list[str],
    interrupted: bool,
) -> tuple[str, None, None, str] | None:
    """Root exceptions whose type or text is the cause wherever they surface: a missing module or
    symbol, a key verl's config schema rejects, an interrupt."""
    if exception is None:
        return None
    if exception["type"] == "ModuleNotFoundError" or MISSING_MODULE.search(exception["message"]):
        return "setup", None, None, causes.missing_hint(exception["message"])
    if exception["type"] in CONFIG_TYPES or causes.is_config_schema(exception, root):
        return "setup", None, None, causes.config_hint(causes.config_key(texts))
    if exception["type"] in (*causes.INTERRUPTS, "SignalException", "CancelledError"):
        cause = causes.interrupt(exception, hits, interrupted)
        return ("interrupted", None, None, causes.interrupt_hint(cause)) if cause else None
    return None


def _by_role(
    role: str | None, exception: Mapping[str, str] | None, root: Block | None
) -> tuple[str, None, None, str | None]:
    etype = exception["type"] if exception else ""
    if role in CLASS_OF_ROLE and not (etype == "FileNotFoundError" and role in ("model_build", "training")):
        if etype == "ImportError" and role != "model_build" and exception is not None:
            return "setup", None, None, causes.missing_hint(exception["message"])
        klass = CLASS_OF_ROLE[role]
        if klass == "model_build" and etype == "ImportError" and exception is not None:
            return klass, None, None, causes.import_hint(exception["message"])
        if klass == "model_build" and causes.weight_import(root):
            return klass, None, None, causes.WEIGHTS_HINT
        return klass, None, None, HINTS.get(klass)
    if role in SETUP_ROLES:
        return "setup", None, None, f"{SETUP_ROLES[role]}; fix the runner environment or the cell's settings"
    if etype == "FileNotFoundError":
        return "setup", None, None, "a data or model file is missing; run the cache warm-up"
    if etype == "ImportError" and exception is not None:
        return "setup", None, None, causes.missing_hint(exception["message"])
    return "runtime", None, None, None
