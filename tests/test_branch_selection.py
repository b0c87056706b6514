"""Changed lines under parallel-layout conditions: Level 0 runs their function at TP=PP=1 with DDP on a
dense model and never the line, so the plan runs the first cell whose layout takes the branch, or says
that no cell executes it. Conditions come from the file's AST (`plan --repo`) or a hunk's text."""

from __future__ import annotations

import json

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import layout
from verl_e2e.plan.branch_levels import reached
from verl_e2e.plan.branches import from_source
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.contract import render_json, render_text
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_diff
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select

MAPPING = "src/megatron/bridge/training/utils/layout_helpers.py"  # no rule or aspect: only the branches select
SOURCE = b"""
class ColumnParallelMapping:
    def megatron_to_hf(self, w, module):
        w = self.broadcast(w)
        if self.tp_size == 1 or _module_uses_fsdp(module):
            full = w
        else:
            gathered = self.gather_from_tp_ranks(w)
            full = torch.cat(gathered, dim=0)
        return full

def renumber(models, name, pp_group):
    if pp_group.size() == 1:
        return name
    return name.replace("layers.0", "layers.4")

def value_head(x, sp):
    if sp.sequence_parallel:
        x = gather(x)
    return x

def build(cfg, use_megatron_fsdp):
    out = {"a": 1}
    if use_megatron_fsdp:
        out["strategy"] = "optim_grads_params"
    while cfg.num_moe_experts and cfg.ep_size > 1:
        out["ep"] = True
    if self._pg_collection.cp.size() > 1:
        out["cp"] = True
    return out

def cp_only(x, cfg):
    if self._pg_collection.cp.size() > 1:
        x = scatter(x, tensor_model_parallel_size=cfg.tp)
    return x

def experts_only(cfg, out):
    if cfg.num_moe_experts:
        out["experts"] = True

class Config:
    def finalize(self):
        if self.sequence_parallel and self.tensor_model_parallel_size <= 1:
            self.sequence_parallel = False
"""


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.decode().splitlines(), 1) if text in line)


def _changed(*texts: str, path: str = MAPPING) -> ChangedFile:
    lines = [_line(t) for t in texts]
    branches = tuple(from_source(SOURCE, lines, removed=False))
    return ChangedFile(path, diff_lines=tuple(f"+{t}" for t in texts), module_level=False, branches=branches)


def _why(selection, level: int) -> str:
    return " ".join(r.why for r in selection.reasons.get(level, ()) if r.rule == "layout-branch")


def test_the_else_of_a_tp_size_check_runs_only_at_tp_above_one(matrix: Matrix) -> None:
    (branch,) = from_source(SOURCE, [_line("torch.cat(gathered")], removed=False)
    assert [c.shown() for c in branch.conditions] == ["the else of `if self.tp_size == 1 or _module_uses_fsdp(module)`"]
    assert branch.function == "ColumnParallelMapping.megatron_to_hf"
    sel = select(matrix, [_changed("torch.cat(gathered")])
    assert sel.levels == (0, 2)
    why = _why(sel, 2)
    assert "changed line under the else of `if self.tp_size == 1" in why and "runs only at TP > 1 → Level 2" in why


def test_an_early_return_guard_counts_and_a_line_level0_runs_adds_nothing(matrix: Matrix) -> None:
    (branch,) = from_source(SOURCE, [_line('name.replace("layers.0"')], removed=False)
    assert branch.conditions[0].kind == "guard" and branch.conditions[0].holds is False
    assert select(matrix, [_changed('name.replace("layers.0"')]).levels == (0, 2)
    assert from_source(SOURCE, [_line("w = self.broadcast(w)")], removed=False) == []  # no condition at all
    assert from_source(SOURCE, [_line("full = w")], removed=False)[0].conditions  # tp == 1: Level 0 takes it
    assert 2 not in select(matrix, [_changed("full = w")]).levels


def test_sequence_parallel_fsdp_and_experts_pick_their_levels(matrix: Matrix) -> None:
    assert select(matrix, [_changed("x = gather(x)")]).levels == (0, 2)
    assert "under sequence parallel" in _why(select(matrix, [_changed("x = gather(x)")]), 2)
    fsdp = select(matrix, [_changed('out["strategy"]')])
    assert fsdp.levels == (0, 3) and "under Megatron-FSDP → Level 3" in _why(fsdp, 3)
    moe = select(matrix, [_changed('out["ep"] = True')])
    assert 4 in moe.levels and moe.targets[4]["qwen3_moe"] == frozenset({"moe"})  # the MoE family that ran
    assert "on a MoE model" in _why(moe, 4) and "expert-parallel on a MoE model" in _why(moe, 4)


def test_an_expert_parallel_test_runs_in_level2s_ep_variant_and_level4s(matrix: Matrix) -> None:
    """EP > 1 is first taken by Level 2's EP=2 MoE variant; Level 4's EP=4 one stays (each rank holds
    other experts there); a test on experts alone, without an EP size, is Level 4's only."""
    moe = select(matrix, [_changed('out["ep"] = True')])
    assert {2, 4} <= set(moe.levels), moe.levels
    assert moe.targets[2]["qwen3_moe"] == frozenset({"moe"})
    assert "at EP > 1" in _why(moe, 2) and "Level 2's moe on a MoE model" in _why(moe, 2)
    experts = select(matrix, [_changed('out["experts"] = True')])
    assert 4 in experts.levels and 2 not in experts.levels, experts.levels


def test_a_branch_no_cell_takes_is_named_not_run(matrix: Matrix) -> None:
    sel = select(matrix, [_changed('out["cp"] = True')])
    # Level 0 would run the function around it, never the line: no level, and the plan names it
    assert sel.levels == ()
    (note,) = sel.unexecuted
    line = _line('out["cp"] = True')
    assert note.startswith(f"changed lines no cell executes: {MAPPING}:{line} ")
    assert "(under `if self._pg_collection.cp.size() > 1`" in note and note in sel.warnings


def test_words_of_a_line_no_cell_takes_select_nothing(matrix: Matrix) -> None:
    """`tensor_model_parallel` is a parallel-layout word (Level 2), but the line sits under CP > 1, which no
    PR cell runs: the plan names the line instead of running Level 2, which would not take it either."""
    sel = select(matrix, [_changed("x = scatter(x, tensor_model_parallel_size=cfg.tp)")])
    assert sel.levels == ()
    assert any("no cell executes" in n and "cp.size() > 1" in n for n in sel.unexecuted)
    both = select(matrix, [_changed("x = scatter(x, tensor_model_parallel_size=cfg.tp)", "x = gather(x)")])
    assert 2 in both.levels  # a line some cell takes keeps the file's words


def test_a_finalisation_reads_sequence_parallel_as_verl_hands_it_over(matrix: Matrix) -> None:
    """verl's engine config turns SP off at TP=1 before the provider's overrides (verl 1dda039 warns "set
    sequence parallel to false as TP size is 1"), so finalize's own `SP and TP <= 1` branch runs nowhere."""
    sel = select(matrix, [_changed("self.sequence_parallel = False")])
    assert 2 not in sel.levels
    (note,) = sel.unexecuted
    assert "no cell executes" in note and "self.sequence_parallel and self.tensor_model_parallel_size <= 1" in note


def test_the_hunk_text_gives_the_conditions_it_shows() -> None:
    diff = (
        "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n"
        "@@ -10,6 +10,6 @@ def export(mapping, w):\n"
        "     if mapping.tp_size > 1:\n"
        "         parts = gather(w)\n"
        "-        w = torch.cat(parts, dim=0)\n"
        "+        w = torch.cat(parts, dim=-1)\n"
        "     else:\n"
        "         w = w.clone()\n"
    )
    (diff_file,) = parse_unified_diff(diff).values()
    (file,) = with_diff([ChangedFile("src/x.py")], {"src/x.py": diff_file})
    assert [(b.line, b.removed, b.function) for b in file.branches] == [(12, True, "export"), (12, False, "export")]
    assert {c.shown() for b in file.branches for c in b.conditions} == {"`if mapping.tp_size > 1`"}


@pytest.mark.parametrize(
    ("test", "tp", "expected"),
    [
        ("get_tensor_model_parallel_world_size() > 1", 1, {False}),
        ("get_tensor_model_parallel_world_size() > 1", 2, {True}),
        ("tp_rank == 0", 2, {True, False}),
        ("parallel_state.is_pipeline_last_stage()", 1, {True}),
        ("getattr(config, 'sequence_parallel', False)", 2, {True}),
        ("pp_group.size() > 1 and vp_size is not None", 1, {False}),
        ("self.config.some_flag and tp_size > 1", 1, {False}),
        ("self.config.some_flag", 1, {True, False}),
        # what verl sets on every provider: the alltoall dispatcher, no recompute
        ("config.moe_token_dispatcher_type != 'flex'", 2, {True}),
        ("self.config.recompute_method is None", 2, {True}),
        # an expert on a dense model: none (the MoE layout, tp=2 here, can be either)
        ("is_expert_linear(prefix) and '.local_experts.' not in prefix", 1, {False}),
        ("is_expert_linear(prefix) and '.local_experts.' not in prefix", 2, {True, False}),
        ("not self.is_expert", 1, {True}),
    ],
)
def test_conditions_evaluate_over_the_values_a_layout_allows(test: str, tp: int, expected: set[bool]) -> None:
    node = layout.parse(test)
    assert node is not None
    at = layout.Layout(tp=tp, pp=tp, moe=tp > 1)
    assert {h for h in (True, False) if layout.can_hold(node, h, at)} == expected


def test_a_branch_in_code_no_cell_runs_selects_nothing() -> None:
    recorded = {"ColumnParallelMapping.megatron_to_hf", "ConfigContainer"}
    assert reached("ColumnParallelMapping.megatron_to_hf", recorded)
    assert reached("megatron_to_hf", recorded)  # a hunk names the plain def
    assert not reached("ConfigContainer.validate", recorded)  # a class body ran at import; no method did
    assert not reached("apply_flex_dispatcher_backend", recorded)
    assert reached("anything", set()) and reached("", recorded)  # no records, or not known: cannot tell


def test_the_layouts_are_read_from_the_matrix(matrix: Matrix) -> None:
    cells = {(c.level, c.variant): c for c in layout.cell_layouts(matrix)}
    assert cells[(0, "lora-ddp")].layout == layout.Layout()
    assert cells[(2, "dense")].layout.tp == 2 and cells[(2, "dense")].layout.pp == 2
    assert cells[(3, "megatron-fsdp")].layout.fsdp
    assert cells[(4, "expert-parallel")].layout.ep == 4 and cells[(4, "expert-parallel")].kind == "moe"
    assert cells[(2, "weekly-pp4-vpp2")].scheduled and cells[(2, "weekly-pp4-vpp2")].layout.vpp == 2


def test_the_records_decide_whether_a_branch_counts(matrix: Matrix) -> None:
    record = Ran(0, "lora-ddp", "qwen", "", "", {MAPPING: frozenset({"SomethingElse.run"})})
    assert select(matrix, [_changed("torch.cat(gathered")], ran=[record]).levels == (0,)


def test_the_plan_json_and_text_name_lines_no_cell_executes(matrix: Matrix, tmp_path) -> None:
    diff = tmp_path / "change.diff"
    diff.write_text(
        "diff --git a/src/megatron/bridge/models/gpt_provider.py b/src/megatron/bridge/models/gpt_provider.py\n"
        "--- a/src/megatron/bridge/models/gpt_provider.py\n+++ b/src/megatron/bridge/models/gpt_provider.py\n"
        "@@ -330,4 +330,4 @@ class GPTModelProvider:\n"
        "     def provide(self):\n"
        "         if self._pg_collection.cp.size() > 1:\n"
        "-            cp_stream = torch.cuda.Stream()\n"
        "+            cp_stream = torch.cuda.Stream(priority=-1)\n"
    )
    plan = make_plan(PlanRequest(diff=str(diff)), matrix)
    data = json.loads(render_json(plan))
    (note,) = data["context"]["unexecuted"]
    assert note.startswith("changed lines no cell executes: src/megatron/bridge/models/gpt_provider.py:332 ")
    assert "(under `if self._pg_collection.cp.size() > 1`; no cell runs them)" in note
    assert note in data["warnings"] and f"warning: {note}" in render_text(plan, matrix)
    assert data["levels"] == []  # Level 0 would run the function, never the line


CLOSURE = b"""def local_to_global(models, name):
    ep_group = get_ep_group(models)
    if is_expert and get_pg_size(ep_group) > 1:
        def renumber(name):
            match = find(name)
            if match is None:
                return name
            return bump(name, match)

        name = renumber(name)
    return name
"""


def test_a_closure_defined_under_a_layout_test_runs_under_it_where_its_definer_ran() -> None:
    """probes-20: a rewritten line of an EP-renumbering closure, defined inside `if ... ep size > 1`, drew
    no EP level: the closure never ran at EP = 1, so its branch counted as code no cell reaches."""
    line = CLOSURE.decode().splitlines().index("            if match is None:") + 1
    (branch,) = from_source(CLOSURE, [line], removed=False)
    assert branch.function == "local_to_global.<locals>.renumber"
    assert "get_pg_size(ep_group) > 1" in branch.conditions[0].test
    assert reached(branch.function, {"local_to_global"})
    assert not reached(branch.function, {"other"})
    assert reached(branch.function, {"local_to_global.renumber"})  # recorded itself (`<locals>` dropped)
