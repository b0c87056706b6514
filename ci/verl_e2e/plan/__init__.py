"""Plan: what a change touched -> which levels -> which cells (the first box of the flow).

Changed files come from a name-status list, a unified diff or git (`changes`, `diffs`,
`gitchanges`); `enrich` adds the changed line ranges, their innermost functions (`scopes`, on ASTs
from `pyparse`) and the architectures a model file registers (`registry`). `select` applies
matrix.yaml's rules, the verl-reachable surface (`surface`, `callgraph`) and the functions real
cells executed (`runtime`), and says why each level was chosen or skipped (`skipped`). `cells`
expands levels x variants x families into cells, `budget` keeps a push within its GPU-minutes, and
`contract` is the plan JSON every later stage and workflow reads (`scheduled` builds the weekly one).
`build` is the entry the CLI calls: a `PlanRequest` in, all of the above in order, a `Plan` out.
Pure apart from reading files and git; imports only config and the floor.
"""

from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.cells import Cell, cell_from_json, expand
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.contract import Plan, render_json

__all__ = ["Cell", "ChangedFile", "Plan", "PlanRequest", "cell_from_json", "expand", "make_plan", "render_json"]
