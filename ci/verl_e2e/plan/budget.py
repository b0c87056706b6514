"""A GPU budget per pull request: which of the planned cells run, in what order of value, and which wait.

A change to shared code can select every level on many families; running all of them costs hours of
GPU time per push. The planner therefore ranks the cells by what they cover and runs them in that
order while the sum of `gpus x minutes` stays within the site's budget. What does not fit is not
dropped silently: it is listed as "not run (budget)" with the `/verl-e2e` request that runs it, and
the report says so.

The ranking, most valuable first:
1. one cell per selected level: the cell on the family the change itself named (a rule, aspect or
   recorded run that fired on a changed path) before a family only implied, then the cheapest;
2. Level 0 of every other family the change selected (each changed architecture builds once);
3. everything else (more variants and families of a level already covered).
Within a rank, lower levels come first. A cell's family always runs its Level 0 first: a higher level
is taken only together with it. Pure: cells and selection in, a `Budgeted` out.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from verl_e2e.plan.cells import Cell, gpu_minutes
from verl_e2e.plan.select import Selection

LEVEL_ORDER = (0, 1, 2, 4, 5, 3)  # Level 3 is optional: last among equals


@dataclass(frozen=True)
class Budgeted:
    """The cells that run within the budget and those that wait for a request."""

    run: list[Cell]
    deferred: list[Cell]
    budget: int | None  # None: no limit

    def deferred_json(self) -> list[dict[str, object]]:
        return [
            {
                "id": c.id,
                "level": c.level,
                "variant": c.variant,
                "family": c.family,
                "gpu_minutes": c.gpus * c.minutes,
                "request": request(c),
            }
            for c in self.deferred
        ]


def minutes(text: str) -> int:
    """`--budget` as argparse reads it: whole GPU-minutes, 0 for no limit."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of GPU-minutes (e.g. 240; 0: no limit)")
    return int(text)


def request(cell: Cell) -> str:
    """The PR comment that runs this cell (its level on its family)."""
    return f"/verl-e2e level={cell.level} family={cell.family}"


def _named(selection: Selection) -> set[tuple[int, str]]:
    """(level, family) pairs a reason with changed paths chose (not only implied by another level)."""
    return {(level, r.family) for level, rs in selection.reasons.items() for r in rs if r.paths}


def rank(cells: Sequence[Cell], selection: Selection) -> list[Cell]:
    """The cells, most valuable first (see the module's docstring)."""
    named = _named(selection)

    def pick(level: int) -> Cell | None:
        mine = [c for c in cells if c.level == level]
        return min(mine, key=lambda c: ((level, c.family) not in named, c.gpus * c.minutes, c.id), default=None)

    firsts = [c for c in (pick(level) for level in LEVEL_ORDER) if c is not None]
    level0 = [c for c in cells if c.level == 0 and c not in firsts]
    rest = [c for c in cells if c not in firsts and c not in level0]
    order = {lv: i for i, lv in enumerate(LEVEL_ORDER)}

    def key(c: Cell) -> tuple[int, int, str]:
        return (order.get(c.level, len(order)), c.gpus * c.minutes, c.id)

    return firsts + sorted(level0, key=key) + sorted(rest, key=key)


def apply(cells: Sequence[Cell], selection: Selection, budget: int | None) -> Budgeted:
    """Take cells in rank order while they fit; a cell brings its family's Level 0 along."""
    if budget is None or gpu_minutes(list(cells)) <= budget:
        return Budgeted(list(cells), [], budget)
    level0 = {c.family: c for c in cells if c.level == 0}
    taken: dict[str, Cell] = {}
    spent = 0
    for cell in rank(cells, selection):
        if cell.id in taken:
            continue
        bundle = [cell]
        base = level0.get(cell.family)
        if base is not None and base.id not in taken and base is not cell:
            bundle.insert(0, base)
        cost = sum(c.gpus * c.minutes for c in bundle)
        if spent + cost <= budget:
            taken |= {c.id: c for c in bundle}
            spent += cost
    run = [c for c in cells if c.id in taken]  # the plan's own order, so cell ids read as before
    return Budgeted(run, [c for c in cells if c.id not in taken], budget)
