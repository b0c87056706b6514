"""The driver stops a phase verl can no longer finish: vLLM logs a failed call from the trainer and
carries on, and verl waits on the weight sync for ever (five MoE cells on the H200, 2026-12-04, sat
10 minutes after such a KeyError until the node was lost). The line is the one those cells printed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
from phaselog import Stuck, run_logged  # noqa: E402 - the cell driver's phase runner (standard library only)

# as the glm45 cell's console showed it (Ray's actor prefix, vLLM's EngineCore logger)
FAILED_RPC = (
    "(vLLMHttpServer pid=19386) (EngineCore pid=22105) ERROR 12-04 07:04:54 [core.py:1449] "
    "Invocation of collective_rpc method failed"
)


def test_a_failed_call_is_due_only_after_the_grace() -> None:
    stuck = Stuck(grace=180)
    stuck.feed("(WorkerDict pid=1) Streaming adapter weights 100%", now=10.0)
    assert stuck.due(now=500.0) is None  # nothing fatal seen
    stuck.feed(FAILED_RPC, now=100.0)
    stuck.feed(FAILED_RPC, now=200.0)  # the first one counts
    assert stuck.due(now=279.0) is None
    why = stuck.due(now=281.0)
    assert why is not None and "weight sync" in why and "181 s ago" in why


def test_a_step_after_the_line_means_verl_survived_it() -> None:
    stuck = Stuck(grace=180)
    stuck.feed(FAILED_RPC, now=100.0)
    stuck.feed("(TaskRunnerV1 pid=3) Training Progress: 100%|##########| 1/1 [01:05<00:00, 65.66s/it]", now=150.0)
    assert stuck.due(now=1000.0) is None


def _script(tmp_path: Path, after: str) -> list[str]:
    body = f"import sys, time; print({FAILED_RPC!r}, flush=True); {after}"
    return [sys.executable, "-c", body]


def test_a_phase_that_hangs_after_the_line_is_stopped_with_a_reason(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    started = time.monotonic()
    code, status, tail = run_logged(
        _script(tmp_path, "time.sleep(120)"),
        cwd=tmp_path,
        env={},
        log_path=log,
        prefix="",
        timeout=300,
        stuck=Stuck(grace=0.5),
    )
    assert status == "failed" and code != 0
    assert time.monotonic() - started < 60  # stopped, not waited out
    text = log.read_text()
    assert FAILED_RPC in text and "verl-e2e: vLLM failed a call from the trainer" in text
    assert tail[-1] == FAILED_RPC  # the tail keeps verl's own last line for the verdict's quote


def test_a_phase_that_ends_by_itself_is_left_alone(tmp_path: Path) -> None:
    code, status, _ = run_logged(
        _script(tmp_path, "time.sleep(0.2); print('done')"),
        cwd=tmp_path,
        env={},
        log_path=tmp_path / "run.log",
        prefix="",
        timeout=60,
        stuck=Stuck(grace=30),
    )
    assert (code, status) == (0, "ok")
    assert "verl-e2e:" not in (tmp_path / "run.log").read_text()
