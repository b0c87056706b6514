"""Log formats that name their own cause, judged as general rules wherever they surface: a config key
verl's schema does not know (setup, the key named), an interrupt (Blocked, the interrupt named), a
compiled extension built against other libraries (setup), Bridge's HF weight import at model build
(model_build, never a checkpoint load), and an import that failed while building the model (no
provider advice). Exceptions from omegaconf and Hydra are raised by the real libraries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_e2e.config.matrix import Matrix
from verl_e2e.judge.evidence import Evidence, parse_bytes
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict

from . import bridge_traces as T
from . import verl_log as V
from .conftest import SHARED
from .rundirs import cell_for, write_run_dir

INIT = ((f"{T.VERL}/workers/engine_workers.py", "init_model", 538, "model_config = omega_conf_to_dataclass(x)"),)
TO_DATACLASS = (
    *INIT,
    (
        f"{T.VERL}/utils/config.py",
        "omega_conf_to_dataclass",
        64,
        "cfg_merged = OmegaConf.merge(cfg_from_dataclass, cfg)",
    ),
)
INSTANTIATE = (
    *INIT,
    (f"{T.VERL}/utils/config.py", "omega_conf_to_dataclass", 49, 'return instantiate(config, _convert_="partial")'),
)
PROVIDER_ADVICE = ("finalized", "mpu parallel sizes", "rerun Level 1")


@dataclass
class McoreActorConfig:  # a verl config dataclass, as omegaconf and Hydra see one
    ppo_mini_batch_size: int = 4


def _ev(text: str) -> Evidence:
    return parse_bytes((V.trace() + text).encode())


def _verdict(matrix: Matrix, tmp_path: Path, log: str, level: int = 0) -> Verdict:
    cell = cell_for(matrix, level)
    phase = cell.phases[0].name
    return judge_run_dir(write_run_dir(tmp_path / "run", cell, {phase: log}, statuses={phase: "failed"}))


def _read_missing_key() -> object:
    cfg = OmegaConf.create({"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 4}}})
    OmegaConf.set_struct(cfg, True)
    return cfg.actor_rollout_ref.actor.use_fancy


def _merge_unknown_key() -> object:
    return OmegaConf.merge(OmegaConf.structured(McoreActorConfig), {"use_fancy": True})


def _instantiate_unknown_keyword() -> object:
    from hydra.utils import instantiate

    return instantiate({"_target_": f"{__name__}.McoreActorConfig", "use_fancy": 1})


HYDRA_OVERRIDE = (
    "Could not override 'actor_rollout_ref.actor.use_fancy'.\n"
    "To append to your config use +actor_rollout_ref.actor.use_fancy=True\n"
    "Key 'use_fancy' is not in struct\n"
    "    full_key: actor_rollout_ref.actor.use_fancy\n"
    "    object_type=dict\n\n"
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
)
HYDRA_INSTANTIATE = (
    "Error executing job with overrides: ['+actor_rollout_ref.actor.use_fancy=1']\n"
    "Error in call to target 'verl.workers.config.actor.McoreActorConfig':\n"
    "TypeError(\"McoreActorConfig.__init__() got an unexpected keyword argument 'use_fancy'\")\n\n"
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
)


@pytest.mark.parametrize(
    ("log", "key"),
    [
        (lambda: T.real_traceback(_read_missing_key, INIT), "actor_rollout_ref.actor.use_fancy"),
        (lambda: T.real_traceback(_merge_unknown_key, TO_DATACLASS), "use_fancy"),
        (lambda: T.real_traceback(_instantiate_unknown_keyword, INSTANTIATE), "McoreActorConfig.use_fancy"),
        (lambda: HYDRA_OVERRIDE, "actor_rollout_ref.actor.use_fancy"),
        (lambda: HYDRA_INSTANTIATE, "McoreActorConfig.use_fancy"),
        (  # Hydra's summary of a worker's error: only verl's own frames are left
            lambda: V.python_traceback(
                "omegaconf.errors.ConfigAttributeError",
                "Key 'use_fancy' is not in struct",
                (("init_model", f"{T.VERL}/workers/megatron_workers.py"), ("_build_model_optimizer", f"{T.VERL}/x.py")),
            ),
            "use_fancy",
        ),
        (  # read during a training step: still the configuration, not the step
            lambda: (
                V.run(1, total=3)
                + T.real_traceback(
                    _read_missing_key, ((f"{T.VERL}/workers/actor/dp_actor.py", "update_policy", 400, "x"),)
                )
            ),
            "actor_rollout_ref.actor.use_fancy",
        ),
    ],
    ids=[
        "not-in-struct",
        "not-in-dataclass",
        "instantiate-keyword",
        "hydra-override",
        "hydra-instantiate",
        "stripped-frames",
        "in-training",
    ],
)
def test_a_config_key_the_schema_does_not_know_is_setup_with_the_key_named(log, key: str) -> None:  # type: ignore[no-untyped-def]
    ev = _ev(log())
    assert ev.failure_class == "setup", (ev.exception, ev.failed_in, ev.failure_signature)
    assert f"`{key}`" in (ev.hint or ""), ev.hint


def test_a_config_error_run_is_blocked_and_says_which_key(matrix: Matrix, tmp_path: Path) -> None:
    v = _verdict(matrix, tmp_path, V.trace() + HYDRA_OVERRIDE)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "`actor_rollout_ref.actor.use_fancy`" in v.follow_ups[0]
    assert not any(word in " ".join(v.follow_ups) for word in PROVIDER_ADVICE)


@pytest.mark.parametrize(
    "summary",
    [
        "Cannot find primary config 'ppo_megatron_trainerr'. Check that it's in your config search path.\n",
        "In 'ppo_megatron_trainer': Could not find 'actor/dp_actorr'\n\nAvailable options in 'actor':\n\tdp_actor\n",
        "no viable alternative at input '[1'\nSee https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details\n",
    ],
    ids=["primary-config", "group-option", "override-syntax"],
)
def test_hydra_failing_to_compose_the_config_is_setup(summary: str) -> None:
    ev = _ev(summary + "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    assert ev.failure_class == "setup", ev.failure_signature


def test_a_keyword_bridge_code_refuses_is_still_the_providers_failure() -> None:
    """The same TypeError text raised in Bridge's LoRA code (not while Hydra builds a config) is model build."""
    frames = (("init_model", f"{T.VERL}/workers/megatron_workers.py"), ("transform", f"{T.BRIDGE}/peft/lora.py"))
    ev = _ev(
        V.python_traceback(
            "TypeError", "ParallelLinearAdapter.__init__() got an unexpected keyword argument 'x'", frames
        )
    )
    assert ev.failure_class == "model_build"


# ------------------------------------------------------------------------------------------- interrupts

CANCELLED = "Task: TaskID(16310a0f0a45af5cffffffffffffffffffffffff01000000) was cancelled. "
CTRL_C = (
    "Traceback (most recent call last):\n"
    f'  File "{T.VERL}/trainer/main_ppo.py", line 93, in run_ppo\n'
    "    ray.get(runner.run.remote(config))\n"
    f'  File "{T.SITE}/ray/_private/worker.py", line 903, in get_objects\n'
    "KeyboardInterrupt\n"
)


@pytest.mark.parametrize(
    ("tail", "by"),
    [
        (CTRL_C, "Ctrl-C: KeyboardInterrupt"),
        (
            CTRL_C
            + V.worker_traceback("TaskCancelledError", CANCELLED, ("generate_sequences",), "actor_rollout_generate"),
            "a cancelled Ray task: TaskCancelledError, after a Ctrl-C",
        ),
        (
            V.python_traceback(
                "torch.distributed.elastic.multiprocessing.api.SignalException",
                "Process 4242 got signal: 2",
                (("fit", f"{T.VERL}/trainer/ppo/ray_trainer.py"), ("_terminate_process_handler", "/t/torch/api.py")),
            ),
            "SIGINT",
        ),
        (
            "slurmstepd: error: *** STEP 4242.0 ON gpu-node-07 CANCELLED AT 2026-12-01T10:00:00 ***\n"
            + V.worker_traceback(
                "ActorDiedError", "The actor died unexpectedly before finishing this task.", ("fit",), "run"
            ),
            "`slurmstepd: error: *** STEP 4242.0 ON gpu-node-07 CANCELLED AT",
        ),
        (
            CTRL_C
            + V.python_traceback(
                "asyncio.exceptions.CancelledError",
                "",
                (("generate", f"{T.VERL}/workers/rollout/vllm_rollout/vllm_async_server.py"),),
            ),
            "Ctrl-C: KeyboardInterrupt, its asyncio tasks cancelled",
        ),
        (
            "tests/special_e2e/run_ppo_trainer_megatron.sh: line 95: 40213 Terminated              "
            "python3 -m verl.trainer.main_ppo --config-path=config\n",
            "SIGTERM",
        ),
    ],
    ids=["ctrl-c", "task-cancelled", "torch-elastic-sigint", "slurm-cancel", "asyncio-cancelled", "bash-terminated"],
)
def test_an_interrupted_run_names_the_interrupt_and_is_blocked_not_failed(
    matrix: Matrix, tmp_path: Path, tail: str, by: str
) -> None:
    log = V.run(2, total=10) + tail  # trained two steps of ten: past model build, so not "cluster setup"
    ev = _ev(log)
    assert ev.failure_class == "interrupted", (ev.exception, ev.failure_signature)
    v = _verdict(matrix, tmp_path, log)
    assert (v.result, v.failure_class) == ("Blocked", "interrupted"), v.headline
    assert v.follow_ups[0].startswith(f"rerun; the run was interrupted (by {by}"), v.follow_ups


def test_the_real_ctrl_c_excerpt_is_blocked_after_training_began(matrix: Matrix, tmp_path: Path) -> None:
    log = (SHARED / "reference/verl-logs/15_megatron-grpo-run-killed-keyboardinterrupt.log").read_text(errors="replace")
    v = _verdict(matrix, tmp_path, log)
    assert (v.result, v.failure_class) == ("Blocked", "interrupted"), v.headline
    assert "not stopped by the PR's code" in v.headline
    assert v.follow_ups[0].startswith("rerun; the run was interrupted (by Ctrl-C: KeyboardInterrupt)")


def test_an_interrupt_after_the_last_step_stopped_nothing(matrix: Matrix, tmp_path: Path) -> None:
    """Ctrl-C while Ray shuts down after a finished run (Python reports it from an atexit callback)."""
    log = V.run(2) + "Exception ignored in atexit callback: <function shutdown at 0x7fe1>\n" + CTRL_C
    ev = _ev(log)
    assert (ev.stage, ev.failure_class) == ("done", "none"), ev.failure_class
    cell = cell_for(matrix, 0)
    v = judge_run_dir(write_run_dir(tmp_path / "run", cell, {cell.phases[0].name: log}))
    assert v.result == "Pass", v.headline


def test_a_signal_that_is_not_an_interrupt_is_not_read_as_one() -> None:
    frames = (("fit", f"{T.VERL}/trainer/ppo/ray_trainer.py"),)
    ev = _ev(
        V.python_traceback(
            "torch.distributed.elastic.multiprocessing.api.SignalException", "Process 1 got signal: 9", frames
        )
    )
    assert ev.failure_class != "interrupted"


# ------------------------------------------------------------------------------ compiled extensions

TE_SO = "/usr/local/lib/python3.12/dist-packages/transformer_engine_torch.cpython-312-x86_64-linux-gnu.so"
SYMBOL = "_ZN3c104cuda9SetDeviceEi"


@pytest.mark.parametrize(
    "log",
    [
        V.python_traceback(
            "ImportError",
            f"{TE_SO}: undefined symbol: {SYMBOL}",
            (
                ("init_model", f"{T.VERL}/workers/megatron_workers.py"),
                ("<module>", "/d/transformer_engine/pytorch/__init__.py"),
            ),
        ),
        V.python_traceback(
            "OSError",
            f"{TE_SO}: undefined symbol: {SYMBOL}",
            (
                ("_build_model_optimizer", f"{T.VERL}/workers/megatron_workers.py"),
                ("_load_library", "/d/transformer_engine/common/__init__.py"),
            ),
        ),
        f"{V.WORKER}ImportError: {TE_SO}: undefined symbol: {SYMBOL}\n"
        + V.worker_traceback("ActorDiedError", "The actor died unexpectedly before finishing this task."),
        # transformers' lazy import re-raises with the cause on the next line, from a frame with a role
        V.python_traceback(
            "RuntimeError",
            "Failed to import transformers.models.qwen2.modeling_qwen2 because of the following error "
            "(look up to see its traceback):",
            (
                ("init_model", f"{T.VERL}/workers/megatron_workers.py"),
                ("_get_module", "/d/transformers/utils/import_utils.py"),
            ),
        )
        + f"{V.WORKER}{TE_SO}: undefined symbol: {SYMBOL}\n",
    ],
    ids=["import-error", "os-error", "before-an-actor-died", "transformers-lazy-import"],
)
def test_an_undefined_symbol_in_a_compiled_extension_is_setup_naming_the_library(
    matrix: Matrix, tmp_path: Path, log: str
) -> None:
    v = _verdict(matrix, tmp_path, V.trace() + log)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    follow = v.follow_ups[0]
    assert "transformer_engine_torch.cpython-312-x86_64-linux-gnu.so" in follow and SYMBOL in follow
    assert not any(word in follow for word in PROVIDER_ADVICE)


# ------------------------------------------------------------------------- weights at model build


@pytest.mark.parametrize(
    ("inner", "exception"),
    [((T.SHAPE_CHECK,), T.SHAPE_MISMATCH), (T.QKV_MERGE, T.VIEW_MISMATCH)],
    ids=["shape-check", "qkv-view"],
)
def test_a_shape_mismatch_in_bridges_weight_import_at_build_is_model_build(
    matrix: Matrix, tmp_path: Path, inner: tuple[T.Frame, ...], exception: str
) -> None:
    log = T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, *inner), exception)
    ev = _ev(log)
    assert (ev.failure_class, ev.failed_in, ev.stage) == ("model_build", "model_build", "model_build"), ev.frames
    v = _verdict(matrix, tmp_path, log)
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    assert v.follow_ups[0].startswith("Bridge's HF->Megatron weight import failed while building the model")
    assert not any(word in " ".join(v.follow_ups) for word in PROVIDER_ADVICE)


def test_the_same_weight_import_under_verls_checkpoint_manager_is_a_checkpoint_load() -> None:
    ev = _ev(T.build_log((*T.CHECKPOINT_LOAD, *T.LOAD_HF, T.SHAPE_CHECK), T.SHAPE_MISMATCH))
    assert (ev.failure_class, ev.failed_in) == ("checkpoint_load", "load"), ev.frames


def test_vanilla_mbridge_loading_weights_at_build_is_model_build() -> None:
    frames = (
        ("init_model", f"{T.VERL}/workers/megatron_workers.py"),
        ("_build_model_optimizer", f"{T.VERL}/workers/megatron_workers.py"),
        ("load_weights", "/usr/local/lib/python3.12/dist-packages/mbridge/core/bridge.py"),
        ("_weight_to_mcore_format", "/usr/local/lib/python3.12/dist-packages/mbridge/models/qwen2.py"),
    )
    ev = _ev(
        V.python_traceback("RuntimeError", "The size of tensor a (1152) must match the size of tensor b (1280)", frames)
    )
    assert (ev.failure_class, ev.failed_in) == ("model_build", "model_build")


def test_an_import_that_fails_while_building_gets_import_advice_not_provider_advice(
    matrix: Matrix, tmp_path: Path
) -> None:
    frames = (
        *T.ENGINE_BUILD[:2],
        (f"{T.BRIDGE}/models/model_provider.py", "provide_distributed_model", 210, "model = self.provide()"),
        (f"{T.BRIDGE}/models/gpt_provider.py", "provide", 150, "from megatron.core.models.gpt import fused_layer"),
    )
    message = "ImportError: cannot import name 'fused_layer' from 'megatron.core.models.gpt' (/site/megatron/core/models/gpt/__init__.py)"
    v = _verdict(matrix, tmp_path, T.build_log(frames, message))
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    assert "the installed `megatron.core.models.gpt` has no `fused_layer`" in v.follow_ups[0]
    assert not any(word in " ".join(v.follow_ups) for word in PROVIDER_ADVICE)


def test_a_weight_sync_into_the_rollout_engine_is_a_training_step_not_an_engine_start() -> None:
    """Bridge's HF export feeds vLLM's load_weights each step; a shape vLLM refuses there is the run's
    failure (the export the PR may have changed), not a rollout engine that did not start."""
    frames = (
        ("fit", f"{T.VERL}/trainer/ppo/ray_trainer.py"),
        ("update_weights", f"{T.VERL}/workers/engine_workers.py"),
        ("update_weights_from_ipc", f"{T.VERL}/workers/rollout/vllm_rollout/utils.py"),
        ("load_weights", "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/qwen2.py"),
        ("weight_loader", "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/linear.py"),
    )
    ev = _ev(V.python_traceback("AssertionError", "param_data.shape == loaded_weight.shape", frames))
    assert (ev.failure_class, ev.failed_in) == ("runtime", "training")


@pytest.mark.parametrize("at_end", [True, False])
def test_a_warning_that_quotes_its_call_site_is_no_traceback(at_end: bool) -> None:
    """A qwen35_vl cell that trained, synced and exited 0 was judged Fail (runtime): Dynamo's warning
    prints `File "...", line 101, in maybe_autocast_dtype` with no traceback header, and an open block at
    the end of the log read as a cut-off traceback."""
    log = V.run(1) + V.dynamo_warning() if at_end else V.dynamo_warning() + V.run(1)
    ev = parse_bytes(log.encode())
    assert ev.exception is None and ev.failure_class == "none", (ev.exception, ev.failure_class, ev.frames)


def test_a_traceback_cut_off_after_its_header_still_fails() -> None:
    cut = V.run(1) + f"{V.WORKER}Traceback (most recent call last):\n" + f'{V.WORKER}  File "/x/y.py", line 3, in f\n'
    assert parse_bytes(cut.encode()).failure_class == "runtime"
