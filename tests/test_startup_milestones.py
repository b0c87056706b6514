"""The start-up split: the driver stamps the lines that end each start-up stage as they arrive, and the
judge turns the stamps into launch / trainer / models / rollout seconds. The lines come from a real
verl run (the tiny Qwen2's Level 0 on the H200, `family-runs/qwen.tar.xz`)."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from verl_e2e.judge import timing
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import render_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
import driver  # noqa: E402 - the cell driver (standard library only)
from milestones import MARKS, Milestones  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "family-runs" / "qwen.tar.xz"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("qwen")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    (run,) = [p for p in root.iterdir() if p.is_dir()]
    return run


def test_every_stage_line_is_found_in_a_real_verl_log_in_order(real_run: Path) -> None:
    lines = (real_run / "run.log").read_bytes().decode(errors="replace").split("\n")  # as the driver splits
    marks = Milestones(start=0.0)
    for number, line in enumerate(lines, 1):
        marks.feed(line, now=float(number))  # the line number stands in for its arrival time
    assert list(marks.seen) == [name for name, _ in MARKS]
    assert list(marks.seen.values()) == sorted(marks.seen.values())
    # Ray's banner is line 126 of that log; the trainer's "all initialize finished" line is 1282
    assert (marks.seen["ray_started"], marks.seen["rollout_ready"]) == (126.0, 1282.0)


def test_a_stamp_is_the_first_arrival_only() -> None:
    marks = Milestones(start=10.0)
    marks.feed("x Started a local Ray instance.", now=12.5)
    marks.feed("x Started a local Ray instance.", now=40.0)
    marks.feed("unrelated", now=50.0)
    assert marks.seen == {"ray_started": 2.5}


def test_the_driver_stamps_lines_of_a_real_process_as_they_arrive(tmp_path: Path) -> None:
    script = "import time; print('Started a local Ray instance.', flush=True); time.sleep(0.6); print('all initialize finished, ready to fit')"
    marks = Milestones()
    code, status, _ = driver.run_logged(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={},
        log_path=tmp_path / "run.log",
        prefix="",
        timeout=30,
        marks=marks,
    )
    assert (code, status) == (0, "ok")
    assert set(marks.seen) == {"ray_started", "rollout_ready"}
    assert marks.seen["rollout_ready"] - marks.seen["ray_started"] >= 0.5


def test_the_split_folds_a_missing_stamp_into_the_next_stage() -> None:
    split = timing.startup_split({"ray_started": 20.0, "models_ready": 110.0, "rollout_ready": 170.5})
    assert split == {"launch": 20.0, "models": 90.0, "rollout": 60.5}
    assert timing.startup_split({}) == {}


def test_the_verdict_says_where_the_start_up_went(real_run: Path, tmp_path: Path) -> None:
    """The kept run's own stamps (the driver wrote them on the H200, tenth batch): 27.2 s to Ray, 61.7 s to
    the trainer's data, 85.0 s to the models, 135.8 s to the rollout, in a phase of 187.6 s."""
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    verdict = judge_run_dir(run)
    assert verdict.result == "Pass"
    assert verdict.timings is not None
    (row,) = verdict.timings["phases"]
    assert row["startup_split"] == {"launch": 27.2, "trainer": 34.5, "models": 23.3, "rollout": 50.8}
    assert "(launch 27, trainer 34, models 23, rollout 51) + 1 step(s) 41 s" in render_text(verdict)


def test_a_run_without_stamps_has_no_split(real_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    phases = json.loads((run / "phases.json").read_text())
    del phases[0]["milestones"]
    (run / "phases.json").write_text(json.dumps(phases))
    verdict = judge_run_dir(run)
    assert verdict.timings is not None
    assert "startup_split" not in verdict.timings["phases"][0]
    assert "start-up and shutdown" in render_text(verdict) and "(launch" not in render_text(verdict)
