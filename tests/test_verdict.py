"""Judging run dirs: each verdict the skill defines, from logs in verl's formats."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import render_text

from . import verl_log as V
from .rundirs import cell_for, write_run_dir

TESTS_OK = {
    "status": "pass",
    "command": "uv run python -m pytest -q tests/unit_tests/models",
    "summary": "42 passed",
}


def _judge(tmp_path: Path, matrix: Matrix, level: int, logs: dict[str, str], **kw: object):
    cell = cell_for(matrix, level, **{k: kw.pop(k) for k in ("family", "variant") if k in kw})  # type: ignore[arg-type]
    run = write_run_dir(tmp_path / "run", cell, logs, **kw)  # type: ignore[arg-type]
    return judge_run_dir(run), run


def test_level0_pass(tmp_path: Path, matrix: Matrix) -> None:
    v, run = _judge(tmp_path, matrix, 0, {"run": V.run(1)}, bridge_tests=TESTS_OK)
    assert v.result == "Pass", v.headline
    assert [d.result for d in v.deliverables] == ["Pass", "Pass", "Pass", "Not requested", "Pass"]
    assert "VANILLA_MBRIDGE=False" in v.key_lines and "training/global_step:1" in v.key_lines
    assert any("enforce_eager" in x for x in v.limitations)
    text = render_text(v)
    assert text.startswith("Result: Pass - Level 0 (lora-ddp) of Qwen/Qwen2.5-0.5B")
    for heading in (
        "Requested coverage:",
        "Deliverables:",
        "Evidence:",
        "- Bridge repo: abc1234 (clean)",
        "- verl repo: 1dda039 plus dirty files: tests/x.py",
        "Limitations:",
        "Follow-ups:\n- none",
    ):
        assert heading in text
    for name in ("evidence.json", "verdict.json", "junit.xml"):
        assert (run / name).is_file()


def test_level1_save_and_resume(tmp_path: Path, matrix: Matrix) -> None:
    logs = {"save": V.run(1, save_freq=1), "resume": V.run(1, start=1, total=2, save_freq=1, resume=True)}
    listing = {"save": {"steps": [1], "tracker": 1}, "resume": {"steps": [1, 2], "tracker": 2}}
    v, _ = _judge(tmp_path, matrix, 1, logs, bridge_tests=TESTS_OK, checkpoints=listing)
    assert v.result == "Pass", v.headline
    assert v.deliverables[3].result == "Pass" and "resumed from 1" in v.deliverables[3].detail


def test_level1_resume_from_scratch_fails(tmp_path: Path, matrix: Matrix) -> None:
    logs = {"save": V.run(1, save_freq=1), "resume": V.run(2, total=2, save_freq=1)}
    v, _ = _judge(tmp_path, matrix, 1, logs, bridge_tests=TESTS_OK)
    assert v.result == "Fail"
    assert next(c for c in v.checks if c.name == "resume").result == "Fail"
    assert "resume" in v.headline


def test_wrong_bridge_is_blocked(tmp_path: Path, matrix: Matrix) -> None:
    wrong = {
        "driver": "/usr/local/lib/python3.12/dist-packages/megatron/bridge/__init__.py",
        "ray_worker": "/usr/local/lib/python3.12/dist-packages/megatron/bridge/__init__.py",
    }
    v, _ = _judge(tmp_path, matrix, 0, {"run": V.run(1)}, bridge_import=wrong, bridge_tests=TESTS_OK)
    assert v.result == "Blocked" and "wrong Bridge" in v.headline
    assert v.deliverables[1].result == "Fail"  # Blocked is the overall result, never a deliverable's
    assert {d.result for d in v.deliverables} <= {"Pass", "Fail", "Skipped", "Not requested"}


def test_ray_worker_record_is_required(tmp_path: Path, matrix: Matrix) -> None:
    only_driver = {"driver": "/workspace/Megatron-Bridge/src/megatron/bridge/__init__.py"}
    log = V.run(1).replace("verl-e2e: bridge import (ray-worker)", "unrelated")
    v, _ = _judge(tmp_path, matrix, 0, {"run": log}, bridge_import=only_driver, bridge_tests=TESTS_OK)
    assert v.result == "Fail" and "no ray_worker record" in v.deliverables[1].detail


@pytest.mark.parametrize(
    ("tail", "result", "klass"),
    [
        (
            V.worker_traceback(
                "ValueError",
                "Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set.",
                frames=("__init__",),
                actor_method="__init__",
            ),
            "Blocked",
            "setup",
        ),
        (
            V.worker_traceback(
                "FileNotFoundError",
                "Unable to find '/root/data/gsm8k/train.parquet'",
                frames=("run",),
                actor_method="run",
            ),
            "Blocked",
            "setup",
        ),
        (
            V.worker_traceback("AttributeError", "'GPTModelProvider' object has no attribute 'mtp'"),
            "Fail",
            "model_build",
        ),
        (
            V.worker_traceback(
                "DistBackendError",
                "NCCL error: unhandled system error",
                frames=("__init__",),
                actor_method="__init__",
            ),
            "Blocked",
            "nccl",
        ),
    ],
    ids=["rocr", "missing-data", "provider-bug", "nccl-at-setup"],
)
def test_failures_before_and_after_model_build(
    tmp_path: Path, matrix: Matrix, tail: str, result: str, klass: str
) -> None:
    log = V.trace() + V.bridge_records() + tail
    v, run = _judge(tmp_path, matrix, 0, {"run": log}, statuses={"run": "failed"}, bridge_tests=TESTS_OK)
    assert (v.result, v.failure_class) == (result, klass), v.headline
    assert v.follow_ups != ["none"]
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    if result == "Blocked":
        assert int(suite.get("errors", 0)) >= 1 and int(suite.get("failures", 0)) == 0
    else:
        assert int(suite.get("failures", 0)) >= 1


def test_timeout_is_a_hang_with_the_log_tail(tmp_path: Path, matrix: Matrix) -> None:
    log = V.run(1, total=3)[:-200]
    v, _ = _judge(
        tmp_path,
        matrix,
        0,
        {"run": log},
        statuses={"run": "timeout"},
        exit_codes={"run": 137},
        bridge_tests=TESTS_OK,
    )
    assert (v.result, v.failure_class, v.failed_phase) == ("Fail", "hang", "run")
    assert any("timeout; last line" in k for k in v.key_lines)


def test_exit_code_alone_fails_a_clean_looking_log(tmp_path: Path, matrix: Matrix) -> None:
    v, _ = _judge(
        tmp_path,
        matrix,
        0,
        {"run": V.run(1)},
        statuses={"run": "failed"},
        exit_codes={"run": 1},
        bridge_tests=TESTS_OK,
    )
    assert v.result == "Fail" and next(c for c in v.checks if c.name == "exit_zero").result == "Fail"


def test_bridge_tests_failing_fail_the_cell(tmp_path: Path, matrix: Matrix) -> None:
    failing = {"status": "fail", "command": "pytest tests/unit_tests/models", "summary": "2 failed"}
    v, _ = _judge(tmp_path, matrix, 0, {"run": V.run(1)}, bridge_tests=failing)
    assert v.result == "Fail" and v.deliverables[0].result == "Fail"
    assert "fix the failing Bridge unit tests first" in v.follow_ups


def test_vanilla_bridge_fails(tmp_path: Path, matrix: Matrix) -> None:
    log = V.run(1, env={"VANILLA_MBRIDGE": "True"})
    v, _ = _judge(tmp_path, matrix, 0, {"run": log}, bridge_tests=TESTS_OK)
    assert v.result == "Fail" and "VANILLA_MBRIDGE=True" in next(
        c.detail for c in v.checks if c.name == "vanilla_mbridge_false"
    )


def test_a_cell_that_did_not_run_fails(tmp_path: Path, matrix: Matrix) -> None:
    v, run = _judge(tmp_path, matrix, 0, {})
    assert (v.result, v.failure_class) == ("Fail", "did_not_run"), v.headline
    assert next(d for d in v.deliverables if d.name == "Log capture").result == "Fail"
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", 0)) >= 1


def test_level5_learning_signal(tmp_path: Path, matrix: Matrix) -> None:
    noise = [0.03, -0.02, 0.01, -0.04, 0.02, 0.0, -0.01, 0.03]
    rising = [0.2 + 0.01 * i + noise[i % 8] for i in range(24)]
    v, _ = _judge(tmp_path, matrix, 5, {"run": V.run(24, scores=rising)}, bridge_tests=TESTS_OK)
    assert v.result == "Pass", v.headline
    detail = next(c.detail for c in v.checks if c.name == "learning_signal")
    assert detail.startswith("learning-signal passed") and "converged" not in detail


@pytest.mark.parametrize(
    ("kw", "failing"),
    [
        ({"scores": [0.6 - 0.01 * i for i in range(24)]}, "learning_signal"),
        ({"grad_norms": [0.0] * 24, "scores": [0.2 + 0.02 * i for i in range(24)]}, "grad_norm_nonzero"),
    ],
    ids=["flat-or-falling-reward", "zero-grad"],
)
def test_level5_failures(tmp_path: Path, matrix: Matrix, kw: dict[str, list[float]], failing: str) -> None:
    v, _ = _judge(tmp_path, matrix, 5, {"run": V.run(24, **kw)}, bridge_tests=TESTS_OK)  # type: ignore[arg-type]
    assert v.result == "Fail" and next(c for c in v.checks if c.name == failing).result == "Fail"


def test_level5_nan_fails(tmp_path: Path, matrix: Matrix) -> None:
    log = V.run(3) + V.metrics(4, loss="nan")
    v, _ = _judge(tmp_path, matrix, 5, {"run": log}, bridge_tests=TESTS_OK)
    assert v.result == "Fail" and next(c for c in v.checks if c.name == "no_nan").result == "Fail"


def test_never_pass_when_the_log_shows_a_failure(tmp_path: Path, matrix: Matrix) -> None:
    """Even with exit code 0, an exception in the log means the cell did not pass."""
    log = V.run(1) + V.worker_traceback(
        "RuntimeError",
        "CUDA error: device-side assert triggered",
        frames=("update_actor",),
        actor_method="actor_rollout_update_actor",
    )
    v, _ = _judge(tmp_path, matrix, 0, {"run": log}, bridge_tests=TESTS_OK)
    assert v.result == "Fail"
