"""The GPU budget per PR: cells ranked by what they cover, the rest listed with the request that runs them."""

from __future__ import annotations

import json

from verl_e2e.cli.main import main
from verl_e2e.plan import budget
from verl_e2e.plan.cells import expand, gpu_minutes
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select
from verl_e2e.report.comment import Context, render


def _shared_change(matrix):
    """A change the rules send to every level on the default family and a MoE family."""
    return select(matrix, [], requested=[0, 1, 2, 4, 5], family_override=["qwen", "qwen3_moe"])


def test_within_the_budget_nothing_waits(matrix) -> None:
    sel = select(matrix, [], requested=[0], family_override=["qwen"])
    cells = expand(matrix, sel)
    chosen = budget.apply(cells, sel, 240)
    assert chosen.run == cells and chosen.deferred == []


def test_over_the_budget_each_level_first_then_the_rest_and_level0_comes_along(matrix) -> None:
    sel = _shared_change(matrix)
    cells = expand(matrix, sel)
    assert gpu_minutes(cells) > 240
    chosen = budget.apply(cells, sel, 240)
    assert gpu_minutes(chosen.run) <= 240
    assert {c.id for c in chosen.run} | {c.id for c in chosen.deferred} == {c.id for c in cells}
    # every family that runs a level runs its Level 0 too
    families = {c.family for c in chosen.run}
    assert all(any(c.family == f and c.level == 0 for c in chosen.run) for f in families)
    # Levels 0, 1 and 2 come before a second family's variants
    assert {0, 1, 2} <= {c.level for c in chosen.run}
    waiting = chosen.deferred_json()
    assert waiting and all(w["request"] == f"/verl-e2e level={w['level']} family={w['family']}" for w in waiting)


def test_no_limit_runs_everything(matrix) -> None:
    sel = _shared_change(matrix)
    cells = expand(matrix, sel)
    assert budget.apply(cells, sel, None).run == cells


def test_the_family_a_change_named_is_the_levels_representative(matrix) -> None:
    """A change to one architecture's bridge: its family carries the level, not a family only implied."""
    change = ChangedFile(
        "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py",
        diff_lines=("+        provider.moe_router_topk = 2",),
        scopes=("Qwen3MoEBridge", "provider_bridge"),
        module_level=False,
        architectures=("Qwen3MoeForCausalLM",),
    )
    sel = select(matrix, [change])
    ranked = budget.rank(expand(matrix, sel), sel)
    assert ranked[0].id == "L0-lora-ddp-qwen3_moe"


def test_plan_lists_what_waits_and_explicit_levels_are_not_limited(capsys) -> None:
    assert main(["plan", "--levels", "0,1,2,4,5", "--family", "qwen,qwen3_moe", "--format", "json"]) == 0
    requested = json.loads(capsys.readouterr().out)
    assert requested["deferred"] == [] and requested["gpu_budget"] is None
    assert main(["plan", "--example", "--budget", "30", "--format", "json"]) == 0
    auto = json.loads(capsys.readouterr().out)
    assert auto["gpu_budget"] == 30 and auto["gpu_minutes"] <= 30
    assert auto["deferred"], "the example's Level 4 and other families wait"
    assert main(["plan", "--example", "--budget", "30"]) == 0
    text = capsys.readouterr().out
    assert "Not run (GPU budget of 30 GPU-minutes)" in text and "/verl-e2e level=" in text


def test_budget_must_be_a_whole_number(capsys) -> None:
    assert main(["plan", "--example", "--budget", "lots"]) == 2
    assert "whole number of GPU-minutes" in capsys.readouterr().err


def test_the_comment_says_what_the_budget_left_out() -> None:
    waiting = [{"id": "L5-learning-signal-qwen", "gpu_minutes": 120, "request": "/verl-e2e level=5 family=qwen"}]
    body = render([], Context(deferred=waiting))
    assert "1 cell not run (GPU budget)" in body.splitlines()[1]
    assert "- `L5-learning-signal-qwen` (120 GPU-minutes): comment `/verl-e2e level=5 family=qwen`" in body
    assert "no verl run needed" not in body
