"""Failure classes by where the run stopped, then why: root traceback, frames, environment signatures."""

from __future__ import annotations

import pytest

from verl_e2e.config.signatures import default_signatures
from verl_e2e.judge.evidence import Evidence, parse_bytes

from . import verl_log as V

VERL = "/workspace/verl/verl"
BRIDGE = "/workspace/Megatron-Bridge/src/megatron/bridge"
INIT = (("main", f"{VERL}/trainer/main_ppo.py"), ("init_model", f"{VERL}/workers/megatron_workers.py"))


def _ev(text: str) -> Evidence:
    return parse_bytes((V.trace() + text).encode())


@pytest.mark.parametrize("sig", default_signatures(), ids=lambda s: s.name)
def test_every_signature_matches_its_example(sig: object) -> None:
    from verl_e2e.config.signatures import Signature

    assert isinstance(sig, Signature)
    assert sig.example, f"{sig.name}: every shipped signature carries an example line"
    assert sig.needle in sig.example and sig.regex.search(sig.example), sig.name
    if sig.failure_class == "runtime":
        return  # weak signatures name the class only when nothing else does
    # as the root exception of a worker traceback, the example decides the class
    etype, _, message = sig.example.partition(": ")
    if etype.replace(".", "").replace("_", "").isalnum() and etype[0].isalpha():
        ev = _ev(V.python_traceback(etype.rsplit(".", 1)[-1], message, INIT))
    else:
        ev = _ev(V.TASK + sig.example + "\n")
    assert (ev.failure_class, ev.failure_signature) == (sig.failure_class, sig.name), (ev.exception, ev.frames)


def test_a_config_dump_and_the_override_list_are_not_evidence() -> None:
    ev = _ev(V.config_dump() + V.run(1))
    assert ev.failure_class == "none" and ev.failure_signature is None
    assert ev.resumed_from is None and ev.saves == []  # `'resume_from_path': '.../global_step_7'` is config
    failed = _ev(V.config_dump() + V.hydra_failure())
    assert (failed.failure_class, failed.failure_signature) == ("runtime", None)  # failed, but not a checkpoint load


def test_the_resolved_config_does_not_make_a_missing_module_a_checkpoint_failure() -> None:
    worker = V.python_traceback(
        "ModuleNotFoundError",
        "No module named 'nvtx'",
        (("__init__", f"{VERL}/workers/engine_workers.py"), ("<module>", f"{VERL}/utils/profiler/nvtx_profile.py")),
    )
    ev = _ev(V.config_dump() + worker + V.hydra_failure() + V.worker_traceback("ActorDiedError", "The actor died"))
    assert (ev.failure_class, ev.exception) == (
        "setup",
        {"type": "ModuleNotFoundError", "message": "No module named 'nvtx'"},
    )


@pytest.mark.parametrize(
    ("frames", "etype", "message", "klass", "role"),
    [
        (
            ((("provide", f"{BRIDGE}/models/gpt_provider.py"),)),
            "AttributeError",
            "no attribute 'x'",
            "model_build",
            "model_build",
        ),
        (
            (("__init__", f"{BRIDGE}/peft/lora.py"),),
            "ValueError",
            "target module not found",
            "model_build",
            "model_build",
        ),
        ((("update_actor", f"{VERL}/workers/actor.py"),), "RuntimeError", "shape mismatch", "runtime", "training"),
        (
            (("save_checkpoint", f"{VERL}/utils/checkpoint/m.py"),),
            "RuntimeError",
            "could not write",
            "checkpoint_save",
            "save",
        ),
        (
            (("load_checkpoint", f"{VERL}/utils/checkpoint/m.py"), ("load_state_dict", "/torch/nn/module.py")),
            "RuntimeError",
            "Missing key(s)",
            "checkpoint_load",
            "load",
        ),
        (
            (("__post_init__", f"{VERL}/workers/config/actor.py"),),
            "AssertionError",
            "ppo_mini_batch_size must be divisible",
            "setup",
            "config",
        ),
        (
            (("_validate_config", f"{VERL}/trainer/ppo/ray_trainer.py"),),
            "AssertionError",
            "train_batch_size",
            "setup",
            "config",
        ),
        ((("__init__", f"{VERL}/utils/dataset/rl_dataset.py"),), "KeyError", "'prompt'", "setup", "data"),
        ((("hf_tokenizer", f"{VERL}/utils/tokenizer.py"),), "OSError", "bad tokenizer files", "setup", "tokenizer"),
        (
            (
                ("launch_server", f"{VERL}/workers/rollout/vllm_rollout/server.py"),
                ("__init__", "/usr/lib/python3/dist-packages/vllm/v1/engine/core.py"),
            ),
            "RuntimeError",
            "CUDA graph capture failed",
            "setup",
            "rollout",
        ),
        (
            (
                ("generate_sequences", f"{VERL}/workers/rollout/r.py"),
                ("step", "/site-packages/vllm/v1/engine/llm_engine.py"),
            ),
            "RuntimeError",
            "sampler broke",
            "runtime",
            "training",
        ),
        (
            (
                ("init_model", f"{VERL}/workers/fsdp_workers.py"),
                ("apply_monkey_patch", f"{VERL}/models/transformers/monkey_patch.py"),
            ),
            "ImportError",
            "cannot import name 'LlamaFroCausalLM'",
            "model_build",
            "model_build",
        ),
        (
            (("<module>", "/site-packages/mbridge/models/qwen3_vl.py"),),
            "ImportError",
            "cannot import name 'get_x' from 'megatron.core.utils'",
            "setup",
            None,
        ),
        (
            (("init_model", f"{VERL}/workers/w.py"),),
            "ModuleNotFoundError",
            "No module named 'flash_attn'",
            "setup",
            "model_build",
        ),
        (
            (("init_model", f"{VERL}/workers/w.py"),),
            "OSError",
            "libcudart.so.13: cannot open shared object file",
            "setup",
            "model_build",
        ),
    ],
    ids=[
        "provider",
        "lora",
        "update-actor",
        "save",
        "load",
        "config-post-init",
        "config-validate",
        "data",
        "tokenizer",
        "vllm-start",
        "vllm-in-step",
        "import-in-build",
        "import-at-entry",
        "missing-module",
        "missing-library",
    ],
)
def test_class_comes_from_the_innermost_known_frame(
    frames: tuple[tuple[str, str], ...], etype: str, message: str, klass: str, role: str | None
) -> None:
    ev = _ev(V.python_traceback(etype, message, (("main", f"{VERL}/trainer/main_ppo.py"), *frames)))
    assert (ev.failure_class, ev.failed_in) == (klass, role), (ev.exception, ev.frames)
    assert ev.exception == {"type": etype, "message": message}


def test_the_first_traceback_is_the_root_and_a_later_interrupt_is_not_the_exception() -> None:
    root = V.python_traceback("KeyError", "'old_log_probs'", (("compute_log_prob", f"{VERL}/workers/w.py"),))
    later = V.worker_traceback("RuntimeError", "wrapped: KeyError", frames=("fit",), actor_method="run")
    ev = _ev(root + later + 'Traceback (most recent call last):\n  File "x.py", line 1, in wait\nKeyboardInterrupt\n')
    assert ev.exception == {"type": "KeyError", "message": "'old_log_probs'"} and ev.failure_class == "runtime"


def test_a_traceback_logged_before_training_went_on_is_not_the_failure() -> None:
    logged = V.python_traceback("ImportError", "optional kernel not built", (("<module>", "/site/apex/x.py"),))
    ev = _ev(logged + V.run(2))
    assert (ev.failure_class, ev.exception) == ("none", None)


def test_a_ray_task_error_cut_off_before_its_message_keeps_the_type_and_frames() -> None:
    text = (
        "Unhandled error (suppress with 'RAY_IGNORE_UNHANDLED_ERRORS=1'): ray::WorkerDict.actor_rollout_load_checkpoint()"
        "\nray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.actor_rollout_load_checkpoint() (pid=1)\n"
        f'  File "{VERL}/utils/checkpoint/megatron_checkpoint_manager.py", line 1, in load_checkpoint\n'
    )
    ev = _ev(text)
    assert ev.failure_class == "checkpoint_load" and (ev.exception or {}).get("type") == "RuntimeError"


def test_an_empty_log_reached_nothing() -> None:
    ev = parse_bytes(b"")
    assert (ev.stage, ev.failure_class) == ("empty", "none")


def test_an_exception_python_ignored_at_shutdown_is_noise() -> None:
    noise = (
        "Exception ignored in: <function Worker.__del__ at 0x7f>\n"
        "Traceback (most recent call last):\n"
        '  File "/site/ray/worker.py", line 9, in __del__\n'
        "AttributeError: 'NoneType' object has no attribute 'close'\n"
    )
    ev = _ev(V.run(1) + noise)
    assert (ev.failure_class, ev.exception) == ("none", None)
    assert ev.residual_noise  # mentioned as accepted residual noise


def test_a_traceback_logged_through_a_logging_prefix_keeps_its_root() -> None:
    """vLLM's engine core logs its traceback line by line (`ERROR <date> [core.py:N] ...`), then verl raises
    a wrapper that points back at it: the logged root is the exception, and the engine start is setup."""
    core = "(EngineCore_DP0 pid=4321) ERROR 12-01 10:00:00 [core.py:700] "
    text = (
        f"{core}EngineCore failed to start.\n{core}Traceback (most recent call last):\n"
        f'{core}  File "/site/vllm/v1/engine/core.py", line 690, in run_engine_core\n'
        f'{core}  File "/site/vllm/v1/worker/gpu_worker.py", line 200, in determine_available_memory\n'
        f"{core}ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`.\n"
        + V.worker_traceback(
            "RuntimeError",
            "Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            frames=("init_model",),
            actor_method="actor_rollout_init_model",
        )
    )
    ev = _ev(text)
    assert (ev.exception or {}).get("type") == "ValueError", ev.exception
    assert ev.failure_class == "setup", (ev.failed_in, ev.failure_signature)


def test_a_version_guard_in_a_training_step_is_the_environment_and_a_warning_is_not() -> None:
    fla = "/site/fla/ops/common/chunk_o.py"
    step = (("forward_backward_batch", f"{VERL}/workers/engine/megatron/transformer_impl.py"), ("chunk_bwd", fla))
    guard = "Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces wrong results. Please upgrade Triton to >= 3.7.1"
    ev = _ev(V.python_traceback("RuntimeError", guard, step))
    assert (ev.failure_class, ev.failure_signature) == ("setup", "dependency-version")
    warned = "UserWarning: Please install apex for the fused kernels\n" + V.python_traceback(
        "TypeError",
        "provide() got an unexpected keyword argument 'x'",
        (("provide", f"{BRIDGE}/models/gpt_provider.py"),),
    )
    assert _ev(warned).failure_class == "model_build"
