"""The skill's vocabulary exactly, and reports that never hide a cell (each defect found, by behaviour)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verl_e2e.cli.main import main
from verl_e2e.config.matrix import Matrix
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import render_text, verdict_from_json
from verl_e2e.report.collect import collect

from . import verl_log as V
from .rundirs import cell_for, write_run_dir

OK = {"status": "pass", "command": "pytest -q tests/unit_tests/models", "summary": "3 passed"}


def _run(tmp_path: Path, matrix: Matrix, level: int, logs: dict[str, str], **kw: object) -> Path:
    return write_run_dir(tmp_path / "run", cell_for(matrix, level), logs, bridge_tests=OK, **kw)  # type: ignore[arg-type]


def test_a_nan_run_never_says_learning_signal_passed(tmp_path: Path, matrix: Matrix) -> None:
    rising = [0.2 + 0.02 * i for i in range(20)]
    log = V.run(20, scores=rising).replace("actor/pg_loss:0.01", "actor/pg_loss:nan", 1)
    v = judge_run_dir(_run(tmp_path, matrix, 5, {"run": log}))
    signal = next(c for c in v.checks if c.name == "learning_signal")
    assert v.result == "Fail" and signal.result == "Fail"
    assert "learning-signal passed" not in render_text(v) and "NaN/Inf" in signal.detail


def test_exit_137_is_killed_not_oom_without_an_oom_line(tmp_path: Path, matrix: Matrix) -> None:
    log = V.run(1, total=3)[:-100]
    run = _run(tmp_path, matrix, 0, {"run": log}, statuses={"run": "killed"}, exit_codes={"run": 137})
    v = judge_run_dir(run)
    assert v.failure_class == "killed" and "killed (137)" in v.headline and "OOM" not in v.headline
    oom = log + "\n[raylet] Out of memory: Killed process 4242 (ray::WorkerDict)\n"
    run = write_run_dir(
        tmp_path / "oom",
        cell_for(matrix, 0),
        {"run": oom},
        statuses={"run": "killed"},
        exit_codes={"run": 137},
        bridge_tests=OK,
    )
    v = judge_run_dir(run)
    assert v.failure_class == "oom" and "out of memory" in v.headline


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_log_capture_checks_the_logs_exist_and_are_not_empty(tmp_path: Path, matrix: Matrix, damage: str) -> None:
    run = _run(tmp_path, matrix, 0, {"run": V.run(1)})
    log = run / "run.log"
    if damage == "deleted":
        log.unlink()
    else:
        log.write_text("")
    v = judge_run_dir(run)
    capture = next(d for d in v.deliverables if d.name == "Log capture")
    assert capture.result == "Fail" and ("missing" if damage == "deleted" else "empty") in capture.detail
    assert v.result != "Pass"


def test_a_corrupt_phases_json_is_not_a_provider_failure(tmp_path: Path, matrix: Matrix) -> None:
    run = _run(tmp_path, matrix, 0, {"run": V.run(1)})
    (run / "phases.json").write_text("{not json")
    v = judge_run_dir(run)
    assert v.result == "Blocked" and v.failure_class == "harness" and "phases.json" in v.headline


def test_the_command_line_reproduces_the_run(tmp_path: Path, matrix: Matrix) -> None:
    run = _run(tmp_path, matrix, 0, {"run": V.run(1)})
    phases = json.loads((run / "phases.json").read_text())
    phases[0] |= {"env": {"NUM_GPUS": "1", "MODEL_PATH": "/cache/models/a b"}, "cwd": "/workspace/verl"}
    (run / "phases.json").write_text(json.dumps(phases))
    v = judge_run_dir(run)
    assert v.command == (
        "cd /workspace/verl && env MODEL_PATH='/cache/models/a b' NUM_GPUS=1 "
        "bash tests/special_e2e/run_ppo_trainer_megatron.sh"
    )
    assert "- Image: verl-e2e:test (digest not recorded)" in render_text(v)


def test_a_driver_crash_is_a_fail_not_a_skip(tmp_path: Path, matrix: Matrix) -> None:
    run = _run(tmp_path, matrix, 0, {})
    provenance = json.loads((run / "provenance.json").read_text())
    provenance["setup_failure"] = {"step": "driver", "class": "harness", "reason": "the cell driver crashed: X"}
    (run / "provenance.json").write_text(json.dumps(provenance))
    v = judge_run_dir(run)
    assert v.result == "Fail" and "driver crashed" in v.headline


def test_unknown_result_values_are_refused() -> None:
    with pytest.raises(ValueError, match="not one of"):
        verdict_from_json({"result": "Passed"})
    good = {"result": "Pass", "deliverables": [{"name": "Log capture", "result": "Blocked", "detail": ""}]}
    with pytest.raises(ValueError, match="deliverable"):
        verdict_from_json(good)


def _plan(tmp_path: Path, matrix: Matrix, levels: tuple[int, ...]) -> tuple[Path, list[dict[str, object]]]:
    cells = [cell_for(matrix, level).to_json() for level in levels]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"cells": cells, "skipped": {}, "reasons": {}}))
    return plan, cells


def test_a_plan_of_two_cells_with_one_missing_run_dir_reports_two_rows_and_fails(
    tmp_path: Path, matrix: Matrix
) -> None:
    plan, cells = _plan(tmp_path, matrix, (0, 1))
    runs = tmp_path / "artifacts"
    write_run_dir(runs / "L0", cell_for(matrix, 0), {"run": V.run(1)}, bridge_tests=OK)
    said: list[str] = []
    verdicts = collect([runs], said.append, planned=cells, job_result="failure", run_url="https://example/run/1")
    assert [v.cell_id for v in verdicts] == sorted(str(c["id"]) for c in cells)
    missing = next(v for v in verdicts if v.level == 1)
    assert missing.result == "Fail" and "did not report" in missing.headline and "failure" in missing.headline
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    code = main(
        [
            "report",
            str(runs),
            "--plan",
            str(plan),
            "--no-comment",
            "--no-check",
            "--summary",
            str(summary),
            "--junit",
            str(junit),
            "--job-result",
            "cell=failure",
        ],
        env={},
    )
    assert code == 1
    text = summary.read_text()
    assert "2 cells: 1 pass, 1 fail" in text and "did not report" in text
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == 2 and any(int(s.get("failures", 0)) for s in suites)


def test_a_stale_run_dir_of_another_cell_is_ignored_and_a_stale_verdict_re_judged(
    tmp_path: Path, matrix: Matrix
) -> None:
    _plan_file, cells = _plan(tmp_path, matrix, (0,))
    runs = tmp_path / "artifacts"
    failing = V.run(1)[:-300] + V.worker_traceback("AttributeError", "provider broke")
    l0 = write_run_dir(runs / "L0", cell_for(matrix, 0), {"run": failing}, statuses={"run": "failed"}, bridge_tests=OK)
    stale = json.loads(json.dumps(judge_run_dir(l0).to_json()).replace('"Fail"', '"Pass"'))
    (l0 / "verdict.json").write_text(json.dumps(stale))  # a planted Pass must not be believed
    write_run_dir(runs / "L1-other", cell_for(matrix, 1), {"save": V.run(1)}, bridge_tests=OK)
    said: list[str] = []
    verdicts = collect([runs], said.append, planned=cells)
    assert [(v.level, v.result) for v in verdicts] == [(0, "Fail")]
    assert any("not in this run's plan" in line for line in said)


def test_a_run_dir_of_another_commit_is_not_evidence_for_this_head(tmp_path: Path, matrix: Matrix) -> None:
    _plan_file, cells = _plan(tmp_path, matrix, (0,))
    run = write_run_dir(tmp_path / "a" / "L0", cell_for(matrix, 0), {"run": V.run(1)}, bridge_tests=OK)
    provenance = json.loads((run / "provenance.json").read_text())
    provenance["bridge"]["full_commit"] = "c" * 40
    (run / "provenance.json").write_text(json.dumps(provenance))
    (v,) = collect([tmp_path / "a"], [].append, planned=cells, head_sha="d" * 40)
    assert v.result == "Fail" and "not the head under test" in v.headline
    (ok,) = collect([tmp_path / "a"], [].append, planned=cells, head_sha="c" * 40)
    assert ok.result == "Pass", ok.headline
