"""A family whose critic verl cannot build (matrix.yaml `no_critic`, recorded from a real run) still runs:
its cells train critic-free (GRPO, so verl builds no value model) and say so, instead of no cell at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import ConfigError
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.cells import CRITIC_FREE_ENTROPY

from .matrix_records import with_record

WHY = "the value head has no mapping in this bridge"
SEEN = "Level 0 on a tiny random model, 2026-12-03"


def _matrix(tmp_path: Path, family: str, record: dict[str, object] | None) -> Path:
    return with_record(tmp_path, family, "no_critic", record)


def _estimators(cell_phases: list[object]) -> set[str]:
    return {p.env.get("ADV_ESTIMATOR", "gae") for p in cell_phases}  # type: ignore[attr-defined]


def test_a_family_without_a_critic_runs_grpo_and_says_why(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "qwen", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(levels=[0, 1], families=("qwen", "llama")), matrix)
    by_id = {c.id: c for c in plan.cells}
    for cid in ("L0-lora-ddp-qwen", "L1-save-resume-qwen"):
        assert _estimators(list(by_id[cid].phases)) == {"grpo"}, cid
        assert any(x.startswith("critic-free (GRPO") and WHY in x for x in by_id[cid].limitations)
    assert _estimators(list(by_id["L0-lora-ddp-llama"].phases)) == {"gae"}
    assert not any("critic-free" in x for x in by_id["L0-lora-ddp-llama"].limitations)
    assert not plan.uncovered.get(0)


def test_the_same_family_with_a_critic_runs_gae(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "qwen", None))
    plan = make_plan(PlanRequest(levels=[0], families=("qwen",)), matrix)
    assert _estimators(list(plan.cells[0].phases)) == {"gae"}


def test_the_shipped_records_run_their_families(tmp_path: Path) -> None:
    """gemma and qwen_vl were known breaks of the critic (real runs 24 and 29): they get cells again."""
    matrix = load_matrix()
    assert matrix.families["gemma"].no_critic and matrix.families["qwen_vl"].no_critic
    plan = make_plan(PlanRequest(levels=[0], families=("gemma", "qwen_vl")), matrix)
    assert sorted(c.family for c in plan.cells) == ["gemma", "qwen_vl"]
    assert all(_estimators(list(c.phases)) == {"grpo"} for c in plan.cells)


def test_a_record_without_the_run_that_showed_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="seen"):
        load_matrix(_matrix(tmp_path, "qwen", {"why": WHY}))


def test_a_critic_free_smoke_cell_adds_an_entropy_bonus_and_level5_does_not(tmp_path: Path) -> None:
    """GRPO on a random model scores every answer 0: without the bonus its gradient is exactly zero."""
    matrix = load_matrix(_matrix(tmp_path, "qwen", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(levels=[0, 5], families=("qwen",)), matrix)
    by_level = {c.level: c for c in plan.cells}
    assert all(CRITIC_FREE_ENTROPY in p.args for p in by_level[0].phases)
    assert not any(CRITIC_FREE_ENTROPY in p.args for p in by_level[5].phases)
    assert any("entropy bonus" in x for x in by_level[0].limitations)
    assert not any("entropy bonus" in x for x in by_level[5].limitations)
