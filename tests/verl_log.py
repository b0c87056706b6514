"""Test double for verl's console output: builds logs in the formats verl really prints.

Stands in for the output of verl's `tests/special_e2e/run_ppo_trainer_megatron.sh` (which needs GPUs):
the wrapper's `set -x` trace, Ray actor prefixes with colours, `[repeated Nx across cluster]`,
`step:N - key:value` metric lines in both value styles (v0.4 rounded and v0.5+ raw reprs, numpy
`np.float64(...)`), tqdm progress with carriage returns, legacy and v1 checkpoint save/resume lines,
pprint-wrapped validation dicts, Python and Ray tracebacks. Formats follow
../shared/reference/verl-facts.md; every scenario the tests need is a small function here.
"""

from __future__ import annotations

import random

ESC = "\x1b"
TASK = f"{ESC}[36m(TaskRunner pid=4242){ESC}[0m "
WORKER = f"{ESC}[36m(WorkerDict pid=5151, ip=10.0.0.2){ESC}[0m "
CKPT = "/work/verl/checkpoints/verl-test/qwen2.5-0.5b-megatron-gsm8k-minimal"


def trace(env: dict[str, str] | None = None, command: str = "") -> str:
    """The wrapper's `set -x` trace of its variables and the trainer command."""
    values = {
        "ENGINE": "vllm",
        "USE_MBRIDGE": "True",
        "VANILLA_MBRIDGE": "False",
        "LORA_RANK": "4",
        "TOTAL_TRAIN_STEPS": "1",
    } | (env or {})
    lines = [f"+ {k}={v}" for k, v in values.items()]
    lines.append(
        "+ python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml "
        f"trainer.total_training_steps={values['TOTAL_TRAIN_STEPS']} {command}".rstrip()
    )
    return "\n".join(lines) + "\n"


def bridge_records(path: str = "/workspace/Megatron-Bridge/src/megatron/bridge/__init__.py") -> str:
    return f"verl-e2e: bridge import (driver): {path}\nverl-e2e: bridge import (ray-worker): {path}\n"


def metrics(
    step: int,
    *,
    rounded: bool = False,
    score: float = 0.5,
    grad_norm: float = 0.12,
    loss: float | str = 0.01,
    extra: dict[str, object] | None = None,
) -> str:
    values: dict[str, object] = {
        "actor/pg_loss": loss,
        "actor/grad_norm": grad_norm,
        "actor/entropy": 0.41,
        "actor/kl_loss": 0.001,
        "actor/lr": 2e-06,
        "critic/vf_loss": 0.05,
        "critic/score/mean": score,
        "critic/rewards/mean": score,
        "response_length/mean": 231.5,
        "perf/max_memory_allocated_gb": 39.7,
        "timing_s/gen": 12.5,
        "training/global_step": step,
        "training/epoch": 0,
    } | (extra or {})

    def fmt(v: object) -> str:
        if isinstance(v, str):
            return v
        return f"{float(v):.3f}" if rounded else repr(v)

    return f"{TASK}step:{step} - " + " - ".join(f"{k}:{fmt(v)}" for k, v in values.items()) + "\n"


def progress(step: int, total: int) -> str:
    pct = step * 100 // max(total, 1)
    return f"Training Progress: {pct:3d}%|####      | {step}/{total} [00:10<00:00, 1.5s/it]\r"


def chatter(rnd: random.Random, n: int) -> str:
    lines = []
    for _ in range(n):
        k = rnd.randrange(100)
        lines.append(
            f"{WORKER}kwargs: {{'n': 1, 'temperature': 1.0, 'max_tokens': {k}}}"
            f"{ESC}[32m [repeated {k % 7 + 2}x across cluster]{ESC}[0m"
        )
    return "\n".join(lines) + "\n"


def run(
    steps: int = 1,
    *,
    start: int = 0,
    total: int | None = None,
    save_freq: int = -1,
    resume: bool = False,
    v1: bool = False,
    env: dict[str, str] | None = None,
    scores: list[float] | None = None,
    grad_norms: list[float] | None = None,
    seed: int = 0,
) -> str:
    """A successful run (or its first part): trace, import records, steps, saves, final progress."""
    rnd = random.Random(seed)
    total = total or start + steps
    out = [trace({"TOTAL_TRAIN_STEPS": str(total)} | (env or {})), bridge_records()]
    if resume:
        if v1:
            out.append(
                f"INFO:2026-11-30 10:00:00,123:Resuming from {CKPT}/global_step_{start}, "
                f"setting global step to {start}\n"
            )
        else:
            out.append(f"{TASK}Found checkpoint: %s {CKPT}/global_step_{start}\n")
            out.append(f"{TASK}Load from checkpoint folder: {CKPT}/global_step_{start}\n")
            out.append(f"{TASK}Setting global step to {start}\n")
        out.append(f"{WORKER}[Rank 0] Loaded sharded model checkpoint from {CKPT}/global_step_{start}/actor/model\n")
    else:
        out.append(f"{TASK}Checkpoint tracker file does not exist: {CKPT}/latest_checkpointed_iteration.txt\n")
        out.append(f"{TASK}Training from scratch\n")
    out.append(progress(start, total) + "\n")
    for i in range(steps):
        step = start + i + 1
        out.append(chatter(rnd, 5))
        score = scores[i] if scores else 0.5
        grad = grad_norms[i] if grad_norms else 0.12
        out.append(metrics(step, score=score, grad_norm=grad))
        out.append(progress(step, total) + "\n")
        if save_freq > 0 and (step % save_freq == 0 or step == total):
            if v1:
                out.append(f"INFO:2026-11-30 10:00:01,000:Saving checkpoint to {CKPT}/global_step_{step}\n")
            else:
                out.append(f"{TASK}local_global_step_folder: {CKPT}/global_step_{step}\n")
            out.append(
                f"{WORKER}Saving HF model checkpoint to {CKPT}/global_step_{step}/actor/huggingface with bridge\n"
            )
            out.append(f"{WORKER}Checkpoint save completed for {CKPT}/global_step_{step}/actor\n")
    return "".join(out)


def dynamo_warning(prefix: str = WORKER) -> str:
    """torch.compile's warning about a cached function it traces through, which quotes the call site in
    traceback form with no traceback around it (seen on the H200 after a passing step, 2026-12-05)."""
    site = "/root/node/site/transformer_engine/pytorch/ops/_common.py"
    lines = [
        "/opt/torch/.venv/lib/python3.12/site-packages/torch/_dynamo/variables/functions.py:2202: UserWarning: "
        "Dynamo detected a call to a `functools.lru_cache`-wrapped function at '_common.py:101'.",
        "",
        "This call originates from:",
        f'  File "{site}", line 101, in maybe_autocast_dtype',
        "    if torch_version() >= (2, 4, 3):",
        "",
        "  torch._dynamo.utils.warn_once(msg)",
    ]
    return "".join(f"{prefix}{line}\n" for line in lines)


def worker_traceback(
    exc_type: str,
    message: str,
    frames: tuple[str, ...] = ("init_model", "_build_model_optimizer"),
    actor_method: str = "actor_rollout_init_model",
) -> str:
    """A Ray worker failure as the driver prints it: RayTaskError header, frames, the root exception."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 42, in main',
        "    run_ppo(config)",
        f"ray.exceptions.RayTaskError({exc_type}): {ESC}[36mray::WorkerDict.{actor_method}(){ESC}[39m "
        "(pid=5151, ip=10.0.0.2, actor_id=abc)",
    ]
    for name in frames:
        lines.append(f'  File "/workspace/verl/verl/workers/megatron_workers.py", line 300, in {name}')
        lines.append("    do_something()")
    lines.append(f"{exc_type}: {message}")
    return "\n".join(lines) + "\n"


def config_dump(ckpt: str = CKPT) -> str:
    """verl's start-up pprint of the resolved config (TaskRunner lines), as real runs print it: full of
    words that failure signatures look for (checkpoint, load, resume, oom)."""
    lines = [
        "{'actor_rollout_ref': {'actor': {'_target_': 'verl.workers.config.McoreActorConfig',",
        "                                 'checkpoint': {'_target_': 'verl.workers.config.McoreCheckpointConfig',",
        "                                                'async_save': False,",
        "                                                'load_contents': ['model', 'optimizer', 'extra'],",
        "                                                'save_contents': ['model', 'optimizer', 'extra']},",
        "                                 'megatron': {'dist_checkpointing_path': '/root/dist_ckpt/qwen',",
        "                                              'override_transformer_config': {'attention_backend': 'flash',",
        "                                                                              'gradient_accumulation_fusion': True},",
        "                                              'use_dist_checkpointing': False},",
        "                                 'oom_retry': 'Error: failed to load checkpoint (never)'},",
        " 'trainer': {'default_local_dir': '" + ckpt + "',",
        "             'resume_from_path': '" + ckpt + "/global_step_7',",
        "             'resume_mode': 'auto',",
        "             'nccl_timeout': 'NCCL error handling: DistBackendError on timeout'}}",
    ]
    return "".join(f"{TASK}{line}\n" for line in lines)


def hydra_failure(overrides: tuple[str, ...] = ("trainer.resume_mode=auto", "+load_checkpoint_error=1")) -> str:
    """Hydra's summary line when a job fails: every override, echoed."""
    return f"Error executing job with overrides: {list(overrides)!r}\n"


def python_traceback(exc_type: str, message: str, frames: tuple[tuple[str, str], ...], prefix: str = WORKER) -> str:
    """A plain Python traceback as a Ray worker prints it: (function, file) frames, outermost first."""
    lines = [f"{prefix}Traceback (most recent call last):"]
    for func, path in frames:
        lines.append(f'{prefix}  File "{path}", line 10, in {func}')
        lines.append(f"{prefix}    call()")
    lines.append(f"{prefix}{exc_type}: {message}")
    return "\n".join(lines) + "\n"
