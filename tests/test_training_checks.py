"""The checks every cell gets on what it trained: a nonzero update, a rollout engine that ran the trained
weights, and (Level 5) a reward trend judged against the run's own noise."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.judge import training
from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.judging import judge_run_dir

from . import verl_log as V
from .rundirs import cell_for, write_run_dir

TESTS_OK = {"status": "passed", "command": "pytest", "summary": "3 passed"}


def _step(optimizer: int, step: int, grad: float, update: float, lr: float = 1e-4) -> dict[str, object]:
    """One record as the probe (containers/probe/sitecustomize.py) writes it, merged by the driver."""
    return {
        "phase": "run",
        "pid": 4242,
        "optimizer": optimizer,
        "class": "FusedAdam",
        "step": step,
        "params": 120,
        "elements": 1_474_560,
        "lr": lr,
        "grad_norm": grad,
        "grads_missing": 0,
        "weight_norm": 12.5,
        "update_norm": update,
    }


def test_an_update_that_moved_the_weights_passes() -> None:
    updates = {"steps": [_step(1, s, 0.06, 1e-3) for s in (1, 2)]}
    check = training.update_check(updates, {})
    assert check.result == "Pass" and "1 optimizer(s), 2 step(s)" in check.detail


def test_zero_gradients_fail_even_when_weight_decay_moved_the_weights() -> None:
    """A zeroed adapter output gives zero gradients; AdamW's decoupled decay still nudges the weights."""
    updates = {"steps": [_step(1, 1, 0.2, 1e-3), _step(2, 1, 0.0, 4e-8), _step(2, 2, 0.0, 4e-8)]}
    check = training.update_check(updates, {})
    assert check.result == "Fail" and "gradient norm 0" in check.detail and "optimizer 2" in check.detail


def test_gradients_without_a_step_fail() -> None:
    """A step size that never reaches the optimizer: gradients, and the weights stay where they were."""
    updates = {"steps": [_step(1, s, 0.3, 0.0, lr=0.0) for s in (1, 2, 3)]}
    check = training.update_check(updates, {})
    assert check.result == "Fail" and "did not move" in check.detail and "learning rate 0" in check.detail


def test_hostile_update_records_are_dropped() -> None:
    updates = {"steps": [{"pid": "x"}, None, 3, {"pid": 1, "optimizer": 1, "step": 1, "grad_norm": "nan"}]}
    assert training.optimizers(updates)[0].grad == 0.0  # a string is no number
    assert training.optimizers({"steps": "many"}) == []


def test_without_records_the_actor_grad_norm_decides() -> None:
    zero = Evidence(zero_grad_norm=True, series={"actor/grad_norm": [[1.0, 0.0]]})
    assert training.update_check(None, {"run": zero}).result == "Fail"
    fine = Evidence(series={"actor/grad_norm": [[1.0, 0.06]]})
    assert training.update_check(None, {"run": fine}).result == "Pass"
    assert training.update_check(None, {"run": Evidence()}).result == "Skipped"


@pytest.mark.parametrize(
    ("k3", "moe", "result"),
    [
        (6.6e-4, False, "Pass"),
        (2.9e-3, False, "Pass"),
        (9.7e-3, False, "Fail"),
        (5.0e-3, True, "Pass"),
        (0.3, True, "Fail"),
    ],
    ids=["dense-base", "pretrained-base", "dense-mismatch", "moe-base", "moe-mismatch"],
)
def test_rollout_agreement_limits(k3: float, moe: bool, result: str) -> None:
    ev = Evidence(series={"rollout_corr/k3_kl": [[1.0, k3 / 2], [2.0, k3]]})
    check = training.rollout_check({"run": ev}, moe=moe)
    assert check.result == result, check.detail
    if result == "Fail":
        assert "other weights than the trainer" in check.detail and "step 2" in check.detail


@pytest.mark.parametrize(
    ("corr", "moe", "result"),
    [
        (0.99997, False, "Pass"),
        (0.9982, False, "Pass"),
        (0.983, False, "Fail"),
        (0.956, True, "Pass"),
        (0.8, True, "Fail"),
    ],
    ids=["random-base", "pretrained-base", "random-mismatch", "moe-base", "moe-mismatch"],
)
def test_the_log_prob_correlation_catches_what_a_small_kl_hides(corr: float, moe: bool, result: str) -> None:
    """On a random model every probability is near-uniform, so a mismatch keeps the KL small; the
    correlation of the two sides' probabilities is scale-free (values from the kept runs)."""
    ev = Evidence(
        series={"rollout_corr/k3_kl": [[1.0, 1e-3]], "training/rollout_actor_probs_pearson_corr": [[1.0, corr]]}
    )
    check = training.rollout_check({"run": ev}, moe=moe)
    assert check.result == result, check.detail
    if result == "Fail":
        assert "log-prob correlation" in check.detail and "other weights than the trainer" in check.detail


@pytest.mark.parametrize(
    ("entropy", "k3", "corr", "result"),
    [
        (0.94, 4.45e-3, 0.9872, "Pass"),  # run 33: SmolLM2 learning over 24 steps, the policy sharpening
        (1.82, 1.61e-3, 0.9993, "Pass"),  # run 35: SmolLM2 Level 0
        (1.82, 2.0e-2, 0.99, "Fail"),  # over 3x the trained model's clean maximum
        (1.82, 3.0e-3, 0.90, "Fail"),  # a gross mismatch the KL alone would let through
        (6.87, 4.45e-3, 0.9872, "Fail"),  # the same figures on a near-uniform (random) policy
    ],
    ids=["trained-learning", "trained-step", "trained-kl", "trained-corr", "random-same-figures"],
)
def test_a_trained_policy_is_held_to_its_own_calibration(entropy: float, k3: float, corr: float, result: str) -> None:
    """Probabilities concentrated near 0 and 1 correlate less between two bf16 engines as a policy
    sharpens (run 33), so the correlation floor that separates a random model's mismatch is too tight
    for a trained one; which one a run is comes from its first step's entropy."""
    ev = Evidence(
        series={
            "actor/entropy": [[1.0, entropy], [2.0, entropy / 4]],
            "rollout_corr/k3_kl": [[1.0, k3]],
            "training/rollout_actor_probs_pearson_corr": [[1.0, corr]],
        }
    )
    check = training.rollout_check({"run": ev})
    assert check.result == result, check.detail
    assert ("trained dense" in check.detail) == (entropy < training.TRAINED_ENTROPY) or result == "Fail"


def test_rollout_agreement_is_skipped_without_figures() -> None:
    assert training.rollout_check({"run": Evidence()}).result == "Skipped"


def test_trend_fit_recovers_a_known_line() -> None:
    rnd = random.Random(7)
    points = [[float(s), 0.2 + 0.01 * s + rnd.gauss(0, 0.02)] for s in range(1, 25)]
    trend = training.Trend.fit(points)
    assert math.isclose(trend.slope, 0.01, abs_tol=0.003)
    assert 0.01 < trend.noise < 0.04 and trend.t > 5
    assert trend.start < trend.end


@pytest.mark.parametrize(
    ("slope", "passes"),
    [(0.008, True), (0.0, False), (-0.005, False)],
    ids=["rising", "flat", "falling"],
)
def test_learning_signal_against_the_runs_own_noise(slope: float, passes: bool) -> None:
    rnd = random.Random(11)
    series = [[float(s), 0.25 + slope * s + rnd.gauss(0, 0.03)] for s in range(1, 25)]
    check = training.learning_signal({"run": Evidence(series={"critic/score/mean": series})})
    assert (check.result == "Pass") is passes, check.detail
    assert "baseline: the run's own fitted start" in check.detail and "t=" in check.detail


def test_a_noisy_flat_run_does_not_pass_by_its_last_third() -> None:
    """The old first-third-vs-last-third rule passed any run whose noise happened to end high."""
    flat = [0.3, 0.25, 0.33, 0.27, 0.31, 0.26, 0.29, 0.3, 0.24, 0.32, 0.27, 0.3, 0.26, 0.33, 0.28, 0.36]
    series = [[float(i + 1), v] for i, v in enumerate(flat)]
    check = training.learning_signal({"run": Evidence(series={"critic/score/mean": series})})
    assert check.result == "Fail", check.detail


def test_a_level0_run_that_trained_nothing_fails_with_its_own_class(tmp_path: Path, matrix: Matrix) -> None:
    """Level 0 lists no update check; every level gets it, and its class names what happened."""
    cell = cell_for(matrix, 0)
    log = V.run(1, grad_norms=[0.0])
    run = write_run_dir(tmp_path / "run", cell, {"run": log}, bridge_tests=TESTS_OK)
    (run / "updates.json").write_text(json.dumps({"steps": [_step(1, 1, 0.0, 3e-9)]}))
    verdict = judge_run_dir(run)
    assert (verdict.result, verdict.failure_class) == ("Fail", "no_update"), verdict.headline
    assert "no gradient reached the trained weights" in verdict.headline


def test_level0_reads_the_rollout_figures_verl_logs(tmp_path: Path, matrix: Matrix) -> None:
    cell = cell_for(matrix, 0)
    log = V.run(1).replace(" - actor/grad_norm:", " - rollout_corr/k3_kl:0.4 - actor/grad_norm:", 1)
    run = write_run_dir(tmp_path / "run", cell, {"run": log}, bridge_tests=TESTS_OK)
    verdict = judge_run_dir(run)
    assert (verdict.result, verdict.failure_class) == ("Fail", "rollout_weights"), verdict.headline


def test_level5_names_its_task_files_where_the_site_mounts_the_cache(matrix: Matrix) -> None:
    """matrix.yaml writes `{datasets}`; the cell carries the container path, args included."""
    cell = cell_for(matrix, 5)
    env, args = cell.phases[0].env, cell.phases[0].args
    datasets = matrix.defaults.container_paths["datasets"]
    assert env["TRAIN_FILES"] == f"{datasets}/arith/train.parquet" and env["ADV_ESTIMATOR"] == "grpo"
    assert f"reward.custom_reward_function.path={datasets}/arith/reward.py" in args
    assert not any("{" in a for a in args) and not any("{" in v for v in env.values())
