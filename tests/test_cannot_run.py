"""A family that cannot run in verl today (matrix.yaml `cannot_run`, recorded from a real run) gets no
cell: the plan says why instead of scheduling a cell that would fail for a reason that is not the PR's."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from verl_e2e.cli.main import main
from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import ConfigError
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.contract import render_text

from .matrix_records import with_record

WHY = "vLLM 0.24 has no model class for this architecture"
SEEN = "Level 0 on a tiny random model, 2026-12-03"


def _matrix(tmp_path: Path, family: str, record: dict[str, object]) -> Path:
    return with_record(tmp_path, family, "cannot_run", record)


def test_a_family_that_cannot_run_gets_no_cell_and_the_plan_says_why(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "gemma", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(levels=[0], families=("gemma", "qwen")), matrix)
    assert [c.family for c in plan.cells] == ["qwen"]
    assert plan.uncovered[0] == [f"gemma: cannot run in verl today: {WHY} (seen: {SEEN})"]
    assert f"! not covered: gemma: cannot run in verl today: {WHY}" in render_text(plan, matrix)


def test_a_record_for_one_kind_leaves_the_familys_other_cells(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "qwen3_moe", {"why": WHY, "seen": SEEN, "kinds": ["moe"]}))
    plan = make_plan(PlanRequest(levels=[0, 4], families=("qwen3_moe",)), matrix)
    ids = [c.id for c in plan.cells]
    assert "L0-lora-ddp-qwen3_moe" in ids
    assert not [i for i in ids if i.startswith("L4-")]
    assert any("cannot run in verl today" in w for w in plan.uncovered[4])


def test_the_scheduled_run_leaves_the_family_out_and_says_so(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "gemma", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(scheduled=True), matrix)
    assert "L0-lora-ddp-gemma" not in [c.id for c in plan.cells]
    assert "L0-lora-ddp-qwen3" in [c.id for c in plan.cells]
    assert any(w.startswith("gemma: cannot run in verl today") for w in plan.uncovered[0])


def test_a_record_without_the_run_that_showed_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="seen"):
        load_matrix(_matrix(tmp_path, "gemma", {"why": WHY}))


def test_families_lists_the_record(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["families", "--matrix", str(_matrix(tmp_path, "gemma", {"why": WHY, "seen": SEEN}))], stdout=out) == 0
    lines = out.getvalue().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("gemma "))
    assert lines[at + 1].strip().split(": ", 1) == ["cannot run in verl today", f"{WHY} (seen: {SEEN})"]
