"""Test double for the tracebacks verl 1dda039 prints when Megatron-Bridge 067f987 fails inside it.

Shapes follow the real run dirs in fixtures/real-runs/ (the driver's `RayTaskError` chain through
`TaskRunnerV1.run` and `WorkerDict.critic_reset`, the worker's frames through verl's Megatron engine)
and the sources of both trees (functions and line numbers as they are at those commits): the weight
import at model build (`_build_megatron_module` -> `AutoBridge.load_hf_weights` ->
`load_weights_hf_to_megatron` -> a param mapping's `hf_to_megatron`) and the same import under verl's
checkpoint manager. `real_traceback` formats an exception the real library raised (omegaconf, Hydra)
as a Ray worker prints it, behind verl's frames.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable

from . import verl_log as V

VERL = "/tmp/node/verl/verl"
BRIDGE = "/tmp/node/Megatron-Bridge/src/megatron/bridge"
SITE = "/tmp/node/site"
Frame = tuple[str, str, int, str]  # (path, function, line, source)

DRIVER = (
    "Error executing job with overrides: ['algorithm.adv_estimator=gae', 'trainer.total_training_steps=1']\n"
    "Traceback (most recent call last):\n"
    f'  File "{VERL}/trainer/main_ppo.py", line 184, in main\n'
    "    run_ppo(config, task_runner_class=TaskRunnerV1)\n"
    f'  File "{VERL}/trainer/main_ppo.py", line 93, in run_ppo\n'
    "    ray.get(runner.run.remote(config))\n"
    f'  File "{SITE}/ray/_private/worker.py", line 1023, in get_objects\n'
    "    raise value.as_instanceof_cause()\n"
    "ray.exceptions.RayTaskError({etype}): \x1b[36mray::TaskRunnerV1.run()\x1b[39m (pid=2407, ip=192.0.2.2, "
    "actor_id=275dd95248d248376cba28fb01000000, repr=<main_ppo.TaskRunnerV1 object at 0x7f2347951cd0>)\n"
    f'  File "{VERL}/trainer/main_ppo.py", line 153, in run\n'
    "    self.trainer.init()\n"
    f'  File "{VERL}/trainer/ppo/v1/trainer_base.py", line 306, in _setup\n'
    "    self.critic_wg.reset()\n"
    f'  File "{VERL}/single_controller/ray/base.py", line 56, in __call__\n'
    "    output = ray.get(output)\n"
    "ray.exceptions.RayTaskError({etype}): \x1b[36mray::WorkerDict.critic_reset()\x1b[39m (pid=3167, "
    "ip=192.0.2.2, actor_id=32904ba05f3575d1a5561d9901000000)\n"
    f'  File "{VERL}/single_controller/ray/base.py", line 935, in func\n'
    "    return getattr(self.worker_dict[key], name)(*args, **kwargs)\n"
)
ENGINE_BUILD: tuple[Frame, ...] = (
    (f"{VERL}/workers/engine_workers.py", "reset", 178, "self.engine.initialize()"),
    (
        f"{VERL}/workers/engine/megatron/transformer_impl.py",
        "initialize",
        582,
        "self.module = self._build_megatron_module()",
    ),
    (
        f"{VERL}/workers/engine/megatron/transformer_impl.py",
        "_build_megatron_module",
        511,
        "self.bridge.load_hf_weights(",
    ),
)
LOAD_HF: tuple[Frame, ...] = (
    (
        f"{BRIDGE}/models/conversion/auto_bridge.py",
        "load_hf_weights",
        699,
        "bridge.load_weights_hf_to_megatron(pre_trained, model, allowed_mismatched_params=allowed_mismatched_params)",
    ),
)
SHAPE_CHECK: Frame = (
    f"{BRIDGE}/models/conversion/model_bridge.py",
    "load_weights_hf_to_megatron",
    1345,
    "raise ValueError(",
)
QKV_MERGE: tuple[Frame, ...] = (
    (
        f"{BRIDGE}/models/conversion/model_bridge.py",
        "load_weights_hf_to_megatron",
        1316,
        "converted_weights = task.mapping.hf_to_megatron(hf_weights, task.megatron_module)",
    ),
    (
        f"{BRIDGE}/models/conversion/param_mapping.py",
        "hf_to_megatron",
        1733,
        'merged = merge_qkv_weights(config, hf_weights["q"], hf_weights["k"], hf_weights["v"])',
    ),
    (
        f"{BRIDGE}/models/conversion/param_mapping.py",
        "merge_qkv_weights",
        3172,
        "q_reshaped = q.view(head_num, q_head_size, hidden_size)",
    ),
)
CHECKPOINT_LOAD: tuple[Frame, ...] = (
    (
        f"{VERL}/workers/engine_workers.py",
        "load_checkpoint",
        448,
        "return self.engine.load_checkpoint(local_path, hdfs_path, del_local_after_load)",
    ),
    (
        f"{VERL}/workers/engine/megatron/transformer_impl.py",
        "load_checkpoint",
        815,
        "self.checkpoint_mananager.load_checkpoint(",
    ),
    (
        f"{VERL}/utils/checkpoint/megatron_checkpoint_manager.py",
        "load_checkpoint",
        940,
        "self._load_model_as_hf_via_bridge(hf_model_path)",
    ),
    (
        f"{VERL}/utils/checkpoint/megatron_checkpoint_manager.py",
        "_load_model_as_hf_via_bridge",
        644,
        "self.bridge.load_hf_weights(self.model, hf_model_path)",
    ),
)
SHAPE_MISMATCH = (
    "ValueError: Shape mismatch for megatron param decoder.layers.0.self_attention.linear_qkv.weight:\n"
    "  Expected shape: torch.Size([1152, 896])\n"
    "  Got shape: torch.Size([1280, 896])\n"
    "  Bridge type: QKVMapping\n"
    "  HF mapping: {'q': 'model.layers.0.self_attn.q_proj.weight', 'k': 'model.layers.0.self_attn.k_proj.weight', "
    "'v': 'model.layers.0.self_attn.v_proj.weight'}\n"
)
VIEW_MISMATCH = "RuntimeError: shape '[14, 128, 896]' is invalid for input of size 802816\n"


def frames_text(frames: tuple[Frame, ...]) -> str:
    return "".join(f'  File "{path}", line {line}, in {func}\n    {source}\n' for path, func, line, source in frames)


def driver_failure(frames: tuple[Frame, ...], exception: str) -> str:
    """The driver's RayTaskError chain for a worker failure, as run 14 printed it, then Hydra's hint."""
    etype = exception.split(":", 1)[0].rsplit(".", 1)[-1]
    return (
        DRIVER.format(etype=etype)
        + frames_text(frames)
        + exception
        + "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )


def build_log(frames: tuple[Frame, ...], exception: str) -> str:
    """A whole phase log: the wrapper's trace, the import records, model-build chatter, the failure."""
    chatter = f"{V.WORKER}[transformers] `torch_dtype` is deprecated! Use `dtype` instead!\n"
    return V.trace() + V.bridge_records() + chatter + driver_failure(frames, exception)


def real_traceback(raise_it: Callable[[], object], verl_frames: tuple[Frame, ...], prefix: str = V.WORKER) -> str:
    """What a Ray worker prints when the real library raises: every traceback of the chain behind
    verl's frames, this test module's own frames left out."""
    try:
        raise_it()
    except Exception as exc:  # any exception the library raises is the point
        lines = traceback.format_exception(exc)
    else:
        raise AssertionError("expected the library to raise")
    out: list[str] = []
    skip = False
    for line in "".join(lines).splitlines():
        if skip and line.startswith("    "):
            continue
        skip = line.startswith('  File "') and "/tests/" in line
        if not skip:
            out.append(line)
    # verl's frames are the callers of the last traceback of the chain (a cause's traceback ends where
    # it was caught, inside the library)
    last = max(i for i, line in enumerate(out) if line.startswith("Traceback (most recent call last)"))
    out[last + 1 : last + 1] = frames_text(verl_frames).splitlines()
    return "".join(f"{prefix}{line}\n" for line in out)
