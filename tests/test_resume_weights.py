"""Level 1's resume is judged on the weights it resumed with, not only on the step counter.

The records here are in the probe's format (containers/probe/sitecustomize.py, merged by
containers/functions.py into updates.json): one line per optimizer step with, after every step and
before a process's first, the count of all-zero tensors and the float64 sum of every element. The
run-dir tests take the real Level 1 run on a tiny Gemma 3 (tests/fixtures/level-runs, recorded before
the probe wrote fingerprints) and add them as the probe now would: its 48 adapter tensors, 24 of them
LoRA's zero-initialised second matrices, which the save phase's two optimizer steps moved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verl_e2e.config.matrix import load_matrix
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.restore import phases_to_compare, restored

from .rundirs import unpack_kept


def _step(
    phase: str, pid: int, step: int, before: tuple[int, float] | None, after: tuple[int, float]
) -> dict[str, Any]:
    rec: dict[str, Any] = {"phase": phase, "pid": pid, "optimizer": 1, "class": "FusedAdam", "step": step}
    rec |= {"params": 48, "elements": 79872, "zero_after": after[0], "sum_after": after[1]}
    if before is not None:
        rec |= {"zero_before": before[0], "sum_before": before[1]}
    return rec


def _records(resumed_at: tuple[int, float]) -> dict[str, Any]:
    """A save phase of two steps from fresh adapters (24 tensors at zero) and a resume from `resumed_at`."""
    return {
        "steps": [
            _step("save", 11, 1, (24, 0.25), (0, 0.2507)),
            _step("save", 11, 2, None, (0, 0.2511)),
            _step("resume", 12, 1, resumed_at, (0, 0.2515)),
            _step("resume", 12, 2, None, (0, 0.2519)),
        ]
    }


def test_a_resume_from_the_saved_weights_is_said_and_exact() -> None:
    ok, why = restored(_records((0, 0.2511)), "save", "resume")
    assert ok is True and "24 tensors training had moved from zero were restored, exactly" in why


def test_a_resume_from_fresh_adapters_fails_whatever_the_counters_say() -> None:
    ok, why = restored(_records((24, 0.25)), "save", "resume")
    assert ok is False and "24 tensors were all zero at its first step, as 24 were before any training" in why


def test_a_partial_restore_fails_and_a_rounded_one_passes() -> None:
    assert restored(_records((5, 0.2511)), "save", "resume")[0] is False  # some adapters came back, not all
    ok, why = restored(_records((0, 0.25112)), "save", "resume")  # a bf16 round trip moves the sum, not the zeros
    assert ok is True and "weight sum 0.25112 against 0.2511 saved" in why


def test_weights_with_nothing_at_zero_cannot_tell_and_say_so() -> None:
    recs = _records((0, 0.2511))
    for rec in recs["steps"]:
        rec["zero_after"] = 0
        if "zero_before" in rec:
            rec["zero_before"] = 0  # full-parameter training: no tensor starts at zero
    ok, why = restored(recs, "save", "resume")
    assert ok is None and "no tensor left zero by training" in why and "exactly" in why


def test_shards_in_several_processes_are_compared_by_their_totals() -> None:
    """Two data-parallel ranks: each shard's zeros differ, their totals are what the checkpoint holds."""
    steps = [
        _step("save", 21, 1, (10, 0.1), (0, 0.11)),
        _step("save", 22, 1, (14, 0.2), (3, 0.21)),  # three shards this rank's step left at zero
        _step("resume", 31, 1, (2, 0.12), (0, 0.13)),
        _step("resume", 32, 1, (1, 0.2), (0, 0.22)),
    ]
    ok, why = restored({"steps": steps}, "save", "resume")
    assert ok is True and "21 tensors" in why
    steps[3]["zero_before"] = 14  # the second rank's shards came back fresh
    assert restored({"steps": steps}, "save", "resume")[0] is False


def test_records_without_fingerprints_decide_nothing() -> None:
    old = {"steps": [{"phase": "save", "pid": 1, "optimizer": 1, "step": 1, "weight_norm": 13.8}]}
    assert restored(old, "save", "resume")[0] is None
    assert restored(None, "save", "resume")[0] is None


def test_level_1_names_its_save_and_resume_phases() -> None:
    levels = load_matrix().levels
    assert [phases_to_compare(v.phases) for v in levels[1].variants] == [("save", "resume")] * len(levels[1].variants)
    assert all(phases_to_compare(v.phases) is None for v in levels[0].variants)


def _fingerprinted(run: Path, resumed_zero: int) -> Path:
    """The real run's updates.json with the fingerprints the probe now writes (sums from its weight norms)."""
    data = json.loads((run / "updates.json").read_text())
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for rec in data["steps"]:
        by_phase.setdefault(rec["phase"], []).append(rec)
    for phase, recs in by_phase.items():
        recs.sort(key=lambda r: r["step"])
        for rec in recs:
            rec["zero_after"], rec["sum_after"] = 0, rec["weight_norm"]
        first = recs[0]
        first["zero_before"] = 24 if phase == "save" else resumed_zero
        first["sum_before"] = by_phase["save"][-1]["weight_norm"] if phase == "resume" else 13.8301
    (run / "updates.json").write_text(json.dumps(data))
    return run


@pytest.mark.parametrize(("resumed_zero", "result"), [(0, "Pass"), (24, "Fail")])
def test_the_real_level_1_run_is_judged_on_the_weights_it_resumed_with(
    resumed_zero: int, result: str, tmp_path: Path
) -> None:
    run = _fingerprinted(unpack_kept("level-runs", "l1-gemma3", tmp_path), resumed_zero)
    v = judge_run_dir(run)
    resume = next(c for c in v.checks if c.name == "resume")
    assert (v.result, resume.result) == (result, result), resume.detail
    assert "resumed from 1" in resume.detail
    if result == "Fail":
        assert v.failure_class == "checkpoint_load"
        assert "did not start from the saved weights" in v.headline + resume.detail
    else:
        assert "weights at resume" in resume.detail and "restored, exactly" in resume.detail


@pytest.mark.parametrize(("in_model", "ok"), [(0, True), (2, True), (3, True), (27, False)])
def test_the_model_may_hold_no_more_untrained_tensors_than_the_optimizers_restored_copies(
    in_model: int, ok: bool
) -> None:
    """The model's own count at the resumed step, beside the optimizer's (data-parallel shards: a rank's
    fp32 shard of a trained tensor can be all zero where the model's whole tensor is not, so fewer in the
    model is no sign); more in the model is untrained weights the forward and rollout ran on."""
    steps = [
        _step("save", 21, 1, (24, 0.1), (3, 0.11)),
        _step("resume", 31, 1, (3, 0.11), (3, 0.12)),
    ]
    steps[1] |= {"model_zero_before": in_model, "model_sum_before": 0.11}
    came_back, why = restored({"steps": steps}, "save", "resume")
    assert came_back is ok, why
    if not ok:
        assert f"{in_model} tensors were all zero in the model, where the saved state had 3" in why
