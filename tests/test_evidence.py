"""The log parser on real verl excerpts (read in place from ../shared) and on synthetic logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_e2e.judge import evidence as E
from verl_e2e.judge.evidence import LogParser, parse_bytes
from verl_e2e.judge.parallel import parse_file

from . import verl_log as V
from .conftest import SHARED

LOGS = SHARED / "reference" / "verl-logs"
EXPECTED = json.loads((LOGS / "expected.json").read_text()) if (LOGS / "expected.json").exists() else {}
FIELDS = (
    "max_step",
    "step_lines",
    "progress_final",
    "saves",
    "resumed_from",
    "from_scratch",
    "failure_class",
    "nan_or_inf_in_metrics",
    "zero_grad_norm",
)


def test_real_excerpts_are_present() -> None:
    assert len(EXPECTED) >= 10, f"expected the verl log excerpts under {LOGS}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("use_re2", [True, False], ids=["re2", "find"])
def test_real_excerpts(name: str, use_re2: bool) -> None:
    want = EXPECTED[name]
    parser = LogParser(use_re2=use_re2)
    parser.feed((LOGS / name).read_bytes())
    got = parser.finish().to_json()
    for key in FIELDS:
        assert got[key] == want[key], f"{key}: {want.get('why')}"
    if want["exception"] is None:
        assert got["exception"] is None
    else:
        assert got["exception"]["type"] == want["exception"]["type"]
        assert got["exception"]["message"].startswith(want["exception"]["message_start"])


def _ev(text: str | bytes) -> E.Evidence:
    return parse_bytes(text.encode() if isinstance(text, str) else text)


def test_successful_level0_run() -> None:
    ev = _ev(V.run(1))
    assert (ev.max_step, ev.step_lines, ev.progress_final, ev.failure_class) == (1, 1, "1/1", "none")
    assert ev.traced_env["VANILLA_MBRIDGE"] == "False" and "verl.trainer.main_ppo" in (ev.command or "")
    assert ev.bridge_imports["driver"].endswith("/src/megatron/bridge/__init__.py")
    assert ev.stage == "done" and ev.from_scratch and ev.exception is None
    assert ev.series["actor/grad_norm"] == [[1.0, 0.12]]


@pytest.mark.parametrize("v1", [False, True], ids=["legacy", "v1-trainer"])
def test_save_then_resume(v1: bool) -> None:
    first = _ev(V.run(1, save_freq=1, v1=v1))
    assert first.saves == [1] and first.resumed_from is None
    second = _ev(V.run(1, start=1, total=2, save_freq=1, resume=True, v1=v1))
    assert second.resumed_from == 1 and second.saves == [2] and second.max_step == 2
    assert second.progress_final == "2/2" and not second.from_scratch


def test_value_forms_rounded_raw_numpy_nan_inf() -> None:
    line = V.metrics(3, extra={"actor/kl_loss": "np.float64(0.25)", "critic/score/mean": "np.float64(0.5)"})
    ev = _ev(line)
    assert ev.series["critic/score/mean"] == [[3.0, 0.5]]
    ev = _ev(V.metrics(4, rounded=True, grad_norm=0.0))
    assert ev.series["actor/grad_norm"] == [[4.0, 0.0]] and not ev.zero_grad_norm  # one rounded 0.000
    ev = _ev(V.metrics(5, loss="nan") + V.metrics(6, extra={"actor/entropy": "inf"}))
    assert ev.nan_or_inf_in_metrics and ev.failure_class == "nan"
    assert ev.nan_metrics == ["step 5: actor/pg_loss=nan", "step 6: actor/entropy=inf"]
    ev = _ev(V.metrics(7, extra={"actor/ppo_kl": "nan", "perf/throughput": "inf", "actor/pg_clipfrac": "nan"}))
    assert ev.nan_metrics == ["step 7: actor/ppo_kl=nan"]  # perf and clip fractions are not judged


def test_zero_grad_norm_over_steps() -> None:
    ev = _ev(V.run(3, grad_norms=[0.0, 0.0, 0.0]))
    assert ev.zero_grad_norm
    assert not _ev(V.run(3, grad_norms=[0.0, 0.1, 0.0])).zero_grad_norm


SYNTHETIC_FAILURES = [
    (
        "cuda-oom",
        V.worker_traceback("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"),
        "oom",
        "OutOfMemoryError",
    ),
    (
        "nccl",
        V.worker_traceback("DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"),
        "nccl",
        "DistBackendError",
    ),
    (
        "nccl-watchdog",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n",
        "nccl",
        None,
    ),
    (
        "rocr",
        V.worker_traceback(
            "ValueError",
            "Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set.",
            frames=("__init__",),
            actor_method="__init__",
        ),
        "setup",
        "ValueError",
    ),
    (
        "disk",
        V.worker_traceback(
            "OSError",
            "[Errno 28] No space left on device",
            frames=("save_checkpoint",),
            actor_method="actor_rollout_save_checkpoint",
        ),
        "setup",
        "OSError",
    ),
    (
        "model-build",
        V.worker_traceback("AttributeError", "'Qwen3Provider' object has no attribute 'finalize_parallel'"),
        "model_build",
        "AttributeError",
    ),
    (
        "ckpt-save",
        V.worker_traceback(
            "RuntimeError",
            "could not write shard",
            frames=("save_checkpoint", "_save_checkpoint"),
            actor_method="actor_rollout_save_checkpoint",
        ),
        "checkpoint_save",
        "RuntimeError",
    ),
    (
        "ckpt-load",
        V.worker_traceback(
            "KeyError",
            "'decoder.layers.0.self_attention.linear_qkv.adapter.linear_in.weight'",
            frames=("load_checkpoint",),
            actor_method="actor_rollout_load_checkpoint",
        ),
        "checkpoint_load",
        "KeyError",
    ),
    (
        "killed",
        "+ python3 -m verl.trainer.main_ppo\nbash: line 1:  4242 Killed  python3 -m verl.trainer.main_ppo\nprocess exited with code 137\n",
        "runtime",  # killed with SIGKILL, cause unknown: no out-of-memory line, so no OOM claim
        None,
    ),
    (
        "killed-oom",
        "+ python3 -m verl.trainer.main_ppo\n[raylet] Out of memory: Killed process 4242 (python3)\n"
        "process exited with code 137\n",
        "oom",
        None,
    ),
    (
        "actor-died",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n",
        "runtime",
        "ActorDiedError",
    ),
    (
        "import",
        "Traceback (most recent call last):\n  File \"/x/main_ppo.py\", line 1, in <module>\nModuleNotFoundError: No module named 'modelopt'\n",
        "setup",
        "ModuleNotFoundError",
    ),
    (
        "missing-data",
        V.worker_traceback(
            "FileNotFoundError",
            "Unable to find '/root/data/gsm8k/train.parquet'",
            frames=("run",),
            actor_method="run",
        ),
        "setup",
        "FileNotFoundError",
    ),
]


@pytest.mark.parametrize(("name", "text", "klass", "etype"), SYNTHETIC_FAILURES, ids=[f[0] for f in SYNTHETIC_FAILURES])
def test_failure_classes(name: str, text: str, klass: str, etype: str | None) -> None:
    ev = _ev(V.trace() + text)
    assert ev.failure_class == klass, (ev.failure_signature, ev.exception, ev.frames)
    assert (ev.exception or {}).get("type") == etype


def test_rank_prefixed_exception_and_message_from_later_line() -> None:
    ev = _ev("[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert ev.exception == {
        "type": "RuntimeError",
        "message": "CUDA error: an illegal memory access was encountered",
    }
    ev = _ev(V.worker_traceback("KeyError", "'missing'"))
    assert ev.exception == {"type": "KeyError", "message": "'missing'"}


def test_traceback_backed_exception_beats_an_earlier_logged_one() -> None:
    text = f"{V.WORKER}ImportError: flash_attn is not installed, falling back\n" + V.worker_traceback("KeyError", "'x'")
    assert _ev(text).exception == {"type": "KeyError", "message": "'x'"}


def test_interrupt_is_not_an_exception() -> None:
    ev = _ev(
        V.run(2, total=10) + 'Traceback (most recent call last):\n  File "/x.py", line 3, in fit\nKeyboardInterrupt\n'
    )
    assert ev.failure_class == "interrupted" and ev.exception is None and ev.interrupted


def test_residual_noise_after_the_last_step_is_not_a_failure() -> None:
    tail = (
        "/usr/lib/python3.10/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: "
        "There appear to be 1 leaked semaphore objects to clean up at shutdown\n"
        "Exception ignored in: <function _after_fork at 0x7f>\n"
    )
    ev = _ev(V.run(1) + tail)
    assert ev.failure_class == "none" and ev.exception is None and len(ev.residual_noise) == 2


def test_validation_dicts_quoted_and_split() -> None:
    text = (
        V.TASK
        + "\"Initial validation metrics: {'val-core/openai/gsm8k/acc/mean@1': 0.25}\"\n"
        + V.TASK
        + "(\"Final validation metrics: {'val-core/openai/gsm8k/acc/mean@1': \"\n"
        + V.TASK
        + " '0.5, 'val-aux/openai/gsm8k/reward/mean@1': np.float64(0.75)}')\n"
    )
    ev = _ev(text)
    assert ev.initial_validation == {"val-core/openai/gsm8k/acc/mean@1": 0.25}
    assert ev.final_validation == {
        "val-core/openai/gsm8k/acc/mean@1": 0.5,
        "val-aux/openai/gsm8k/reward/mean@1": 0.75,
    }
    assert _ev("'Final validation metrics: None'\n").final_validation is None


def test_crlf_ansi_and_invalid_utf8() -> None:
    text = V.run(2).replace("\n", "\r\n").encode() + b"\xff\xfe broken \x80 bytes\r\n"
    ev = _ev(text)
    assert (ev.max_step, ev.progress_final, ev.failure_class) == (2, "2/2", "none")


def test_chunk_boundaries_do_not_change_the_result() -> None:
    text = (
        V.run(4, save_freq=2, seed=1)
        + V.TASK
        + "(\"Final validation metrics: {'val-core/a': \"\n"
        + V.TASK
        + " '0.5}')\n"
        + V.worker_traceback("KeyError", "'x'")
    ).encode()
    whole = parse_bytes(text).to_json()
    for size in (1, 7, 64, 333, 4096):
        parser = LogParser()
        for i in range(0, len(text), size):
            parser.feed(text[i : i + size])
        got = parser.finish().to_json()
        got["bytes_read"] = whole["bytes_read"]
        assert got == whole, size


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=4000))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    ev = parse_bytes(data)
    assert ev.failure_class in (
        "none",
        "setup",
        "model_build",
        "runtime",
        "checkpoint_save",
        "checkpoint_load",
        "oom",
        "nccl",
        "hang",
        "nan",
        "interrupted",
    )


FRAGMENTS = [
    "step:1 - actor/pg_loss:0.1 - actor/grad_norm:nan",
    "Training Progress:  50%|##| 1/2 [00:01<?, ?it/s]",
    "KeyError: 'x'",
    "ray.exceptions.RayTaskError(ValueError): ray::WorkerDict.init_model()",
    '  File "/a.py", line 3, in init_model',
    "local_global_step_folder: /c/global_step_3",
    "\x1b[36m(TaskRunner pid=1)\x1b[0m ",
    "(\"Final validation metrics: {'val-core/x': \"",
    " '0.5}')",
    "+ VANILLA_MBRIDGE=False",
    "\r",
    "\n",
    "\xff",
    "Training from scratch",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40), st.integers(min_value=1, max_value=200))
def test_verl_shaped_noise_is_chunking_invariant(parts: list[str], size: int) -> None:
    data = "".join(parts).encode()
    whole = parse_bytes(data).to_json()
    parser = LogParser()
    for i in range(0, len(data), size):
        parser.feed(data[i : i + size])
    got = parser.finish().to_json()
    assert got == whole


def test_parallel_ranges_match_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl_e2e.judge import parallel

    text = "".join(V.run(30, save_freq=7, seed=s) for s in range(5))
    text += V.TASK + "(\"Final validation metrics: {'val-core/a': \"\n" + V.TASK + " '0.5}')\n"
    text += V.worker_traceback("KeyError", "'late'")
    log = tmp_path / "run.log"
    log.write_text(text)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    sequential = parse_file(log, workers=1).to_json()
    for workers in (2, 3, 7):
        assert parse_file(log, workers=workers).to_json() == sequential, workers


def test_signatures_from_the_matrix_come_first(tmp_path: Path) -> None:
    from verl_e2e.config.signatures import build_signatures, default_signatures

    extra = build_signatures(
        [
            {
                "name": "segv",
                "class": "runtime",
                "needle": "Segmentation fault",
                "regex": "Segmentation fault",
                "hint": "a native crash",
            }
        ],
        "test",
    )
    shutdown = (V.run(1) + "Fatal Python error: Segmentation fault\n").encode()
    ev = parse_bytes(shutdown, extra + default_signatures())
    assert ev.failure_class == "none"  # a runtime-class signature after a finished run is shutdown noise
    ev = parse_bytes(
        b"+ python3 -m verl.trainer.main_ppo\nFatal Python error: Segmentation fault\n",
        extra + default_signatures(),
    )
    assert (ev.failure_class, ev.failure_signature, ev.hint) == ("runtime", "segv", "a native crash")


def test_an_actor_that_died_in_its_creation_task_reports_the_remote_exception() -> None:
    """Ray's ActorDiedError line is followed by the remote traceback of the actor's __init__ (no new
    `Traceback` header): the exception that ends it is the failure, not Ray's wrapper."""
    log = (
        "(TaskRunner pid=1) Traceback (most recent call last):\n"
        '  File "/workspace/verl/verl/trainer/main_ppo.py", line 40, in main\n'
        '  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 2800, in get\n'
        "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
        "ray::WorkerDict.__init__() (pid=55, ip=10.0.0.2, actor_id=1, repr=<WorkerDict object at 0x7f>)\n"
        '  File "/workspace/verl/verl/workers/megatron_workers.py", line 120, in __init__\n'
        '  File "/usr/local/lib/python3.12/dist-packages/megatron/core/parallel_state.py", line 600, in '
        "initialize_model_parallel\n"
        "RuntimeError: world_size (2) is not divisible by 4\n"
    )
    ev = parse_bytes(log.encode())
    assert ev.exception == {"type": "RuntimeError", "message": "world_size (2) is not divisible by 4"}
    assert ev.culprit is not None and ev.culprit["raised_in"]["function"] == "initialize_model_parallel"
    cut = parse_bytes(log.rsplit("  File", 2)[0].encode())  # the log ends before the remote exception
    assert cut.exception is not None and cut.exception["type"] == "ActorDiedError"
    assert "creation task" in cut.exception["message"]


@pytest.mark.parametrize(
    ("line", "etype"),
    [
        ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144", "OutOfResources"),
        ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:", "BackendCompilerFailed"),
    ],
)
def test_exceptions_named_otherwise_end_a_traceback_with_their_module_path(line: str, etype: str) -> None:
    log = (
        "(WorkerDict pid=7) Traceback (most recent call last):\n"
        '(WorkerDict pid=7)   File "/workspace/verl/verl/workers/actor/megatron_actor.py", line 500, in update_policy\n'
        f"(WorkerDict pid=7) {line}\n"
    )
    ev = parse_bytes(log.encode())
    assert ev.exception is not None and ev.exception["type"] == etype
    assert parse_bytes(b"Unsupported: a sentence in a log, not an exception\n").exception is None


def test_an_exception_group_reports_its_sub_exception() -> None:
    """An asyncio TaskGroup in the rollout loop prints an ExceptionGroup and, behind a `|` gutter, the
    sub-exception's own traceback: that one (vLLM's dead engine here) is the failure."""
    lines = [
        "  + Exception Group Traceback (most recent call last):",
        '  |   File "/workspace/verl/verl/experimental/agent_loop/agent_loop.py", line 300, in generate_sequences',
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)",
        "  +-+---------------- 1 ----------------",
        "    | Traceback (most recent call last):",
        '    |   File "/workspace/verl/verl/experimental/agent_loop/agent_loop.py", line 320, in _run',
        '    |   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 400, in generate',
        "    | vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        "    +------------------------------------",
    ]
    ev = parse_bytes("".join(f"(AgentLoopWorker pid=9) {line}\n" for line in lines).encode())
    assert ev.exception == {"type": "EngineDeadError", "message": "EngineCore encountered an issue."}
    assert ev.culprit is not None and ev.culprit["raised_in"]["owner"] == "vLLM"
