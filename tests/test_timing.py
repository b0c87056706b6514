"""Where a cell's time went, read from a real run dir (fixture 09: Level 0 on the tiny Qwen2, one H200)."""

from __future__ import annotations

import shutil
from pathlib import Path

from verl_e2e.judge import timing
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import render_text

RUN = Path(__file__).parent / "fixtures" / "real-runs" / "09-pass-level0-defaults-megatron-fallback"


def test_a_real_level0_spends_most_of_its_time_before_the_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    verdict = judge_run_dir(run)
    assert verdict.timings is not None
    (phase,) = verdict.timings["phases"]
    # phases.json: 379.6 s of wall time; verl's timing_s/step: 80.9 s, of which generation 32.6 s
    assert (phase["wall_s"], phase["steps"], phase["steps_s"], phase["gen_s"]) == (379.6, 1, 80.9, 32.6)
    assert phase["startup_s"] == 298.7
    # the step less its eight top-level timers (gen 32.59, old_log_prob 7.22, ref 0.81, values 1.91, adv 0.15,
    # update_critic 2.65, update_actor 2.57, update_weights 4.32): verl's workers starting inside the step
    assert phase["untimed_s"] == 28.7
    text = render_text(verdict)
    assert (
        "- Time: set-up 0 s; run 380 s = start-up and shutdown 299 s + 1 step(s) 81 s "
        "(generation 33 s; 29 s outside verl's step timers)"
    ) in text


def test_no_records_no_timings() -> None:
    assert timing.breakdown({}, [], {}) is None
    assert timing.line(None) is None


def test_the_comment_row_shows_how_much_of_the_cell_was_its_steps(tmp_path: Path) -> None:
    from verl_e2e.report.rows import table

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    row = table([judge_run_dir(run)])[2]
    assert "| 6m 20s (steps 1m 21s) |" in row, row


def test_a_run_that_validates_first_has_no_untimed_first_step(tmp_path: Path) -> None:
    """Level 5 validates before training, so verl's agent-loop and reward workers start during that
    validation: its 24 steps hold almost nothing outside verl's timers, where the Level 0 step above (no
    validation first) holds 28.7 s. The untimed share is start-up inside the first step, not compute."""
    run = tmp_path / "run"
    shutil.copytree(RUN.parent / "33-pass-level5-smollm2-learning-signal", run)
    (phase,) = judge_run_dir(run).timings["phases"]  # type: ignore[index]
    assert phase["steps"] == 24 and phase["untimed_s"] < 5, phase
