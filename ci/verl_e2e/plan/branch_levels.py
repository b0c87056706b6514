"""Changed lines under layout conditions -> the cheapest cell whose layout runs them, or none.

Groups a file's branches by the condition that keeps them off Level 0 and by the cell that first
runs them (layout.running), so a plan says once per condition: "changed line under `if self.tp_size
> 1` runs only at TP > 1 -> Level 2", or names the lines no cell executes.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, replace

from verl_e2e.plan import layout
from verl_e2e.plan.branches import Branch
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.layout import CellLayout
from verl_e2e.plan.runtime import Ran, spans
from verl_e2e.plan.targets import Targets


@dataclass(frozen=True)
class Outcome:
    cell: CellLayout | None  # the first PR cell that runs the lines; None: no PR cell does
    lines: tuple[int, ...]
    shown: str  # the conditions, as the plan quotes them
    words: str  # what the layout needs ("at TP > 1")
    scheduled: str | None = None  # the scheduled variant that runs lines no PR cell runs

    def why(self) -> str:
        many = len(set(self.lines)) > 1  # a line's removed and added sides are one changed line
        level = f"Level {self.cell.level}" if self.cell is not None else "no cell"
        if self.cell is not None and self.cell.kind == "moe":
            level += f"'s {self.cell.variant} on a MoE model"
        lines = f"changed line{'s' if many else ''} under {self.shown} run{'' if many else 's'}"
        return f"{lines} only {self.words} → {level}"

    def unexecuted(self, path: str) -> str:
        where = f"only the scheduled {self.scheduled} layout runs them" if self.scheduled else "no cell runs them"
        return f"changed lines no cell executes: {path}:{spans(frozenset(self.lines))} (under {self.shown}; {where})"


def reached(function: str, recorded: set[str]) -> bool:
    """Whether a cell can run code in `function`, as far as the records of its file tell: a module no
    record covers, a function not known (a hunk that does not show it), a function some cell ran (by
    its qualified or its plain name), or a method of a class some cell ran a method of (new methods
    of a class verl builds). A function in a recorded module that no cell ran, of a class none built,
    is not verl's code: its layout branches select nothing. A closure (`f.<locals>.g`) is reached where
    the function defining it is."""
    if not recorded or not function:
        return True
    if ".<locals>." in function:  # a closure runs where the function that defines it ran
        return function.replace(".<locals>", "") in recorded or reached(
            function.split(".<locals>.", maxsplit=1)[0], recorded
        )
    names = function.split(".")
    if function in recorded or any(q.rsplit(".", 1)[-1] == names[-1] for q in recorded):
        return True
    owners = [".".join(names[:i]) for i in range(1, len(names))]
    return any(q.startswith(f"{o}.") for o in owners for q in recorded)


def _expert_parallel(
    first: CellLayout | None,
    extra: Sequence[CellLayout],
    tests: list[tuple[ast.expr, bool]],
    read: set[str],
    moe_family: bool,
) -> list[CellLayout | None]:
    """The cells for a group: `first`, and for a test on the expert-parallel sizes also a cheaper MoE
    cell that runs it. Level 2's EP=2 variant takes EP > 1 first; Level 4's EP=4 one stays, since the
    experts each rank holds (and so the renumbering) differ between the two. A MoE-only test without EP
    stays with Level 4 alone, the families' own level."""
    if not read & {"ep", "etp"}:
        return [first]
    cheaper = [c for c in extra if c.kind == "moe" and not c.scheduled and (first is None or c.level < first.level)]
    found = next(layout.running(cheaper, tests, moe_family), None)
    if found is None:
        return [first]
    return [found] if first is None else [found, first]


def outcomes(
    cells: Sequence[CellLayout], branches: Sequence[Branch], moe_family: bool, extra: Sequence[CellLayout] = ()
) -> list[Outcome]:
    """What each group of a file's branches needs beyond Level 0 (nothing for lines Level 0 runs);
    `extra`: other levels' MoE variants, taken for a test on the expert-parallel sizes."""
    base = next(c for c in cells if c.level == 0 and c.kind == "all").layout
    base = replace(base, moe=True) if moe_family else base
    groups: dict[tuple[CellLayout | None, str, str, str | None], list[int]] = {}
    for branch in branches:
        tests = branch.tests()
        found = list(layout.running(list(cells), tests, moe_family))
        first = next((c for c in found if not c.scheduled), None)
        if first is not None and first.level == 0 and first.kind == "all":
            continue
        held = [layout.can_hold(t, holds, base) for t, holds in tests]
        blocking = [c for c, ok in zip(branch.conditions, held, strict=False) if not ok] or list(branch.conditions)
        read = {d for c in blocking if (t := layout.parse(c.test)) is not None for d in layout.reads(t)}
        for cell in _expert_parallel(first, extra, tests, read, moe_family):
            other = cell or next((c for c in found if c.scheduled), None)
            dims = (read & layout.differs(base, other.layout)) if other is not None else read
            words = " and ".join(layout.WORDS[d] for d in sorted(dims or read)) or "under another layout"
            scheduled = other.variant if cell is None and other is not None else None
            key = (cell, " and ".join(c.shown() for c in blocking), words, scheduled)
            groups.setdefault(key, []).append(branch.line)
    return [Outcome(cell, tuple(lines), shown, words, sched) for (cell, shown, words, sched), lines in groups.items()]


def picks(
    cells: Sequence[CellLayout], file: ChangedFile, ran: Sequence[Ran], fams: Targets
) -> tuple[list[tuple[int, str, str, str]], list[str]]:
    """(level, family, variant kind, why) for each cell a file's layout branches need beyond Level 0,
    and the lines no cell runs, on each family the file's change runs on."""
    recorded = {q.replace(".<locals>", "") for r in ran for p in file.paths for q in r.functions.get(p, ())}
    branches = [b for b in file.branches if reached(b.function, recorded)]
    # a branch in code no record reached selects no cell, but one no layout takes runs nowhere whether its
    # function is verl's or not (a CP > 1 branch of a family that has never run); the head side only: a
    # deleted definition's lines are gone, not unexecuted
    unreached = [b for b in file.branches if b not in branches and not b.removed]
    chosen: list[tuple[int, str, str, str]] = []
    unexecuted: list[str] = []
    every = [c for c in layout.cell_layouts(fams.matrix, every_kind=True) if c not in cells] if file.branches else []
    for fam in fams.targets(file.path, file, changed=True) if file.branches else []:
        moe = fams.matrix.families[fam].has("moe")
        for out in outcomes(cells, branches, moe, every):
            kind = "all" if out.cell is None else out.cell.kind
            target = fam if kind == "all" else fams.kind_family(fam, kind)
            if out.cell is None or target is None:
                unexecuted.append(out.unexecuted(file.path))
            else:
                chosen.append((out.cell.level, target, kind, out.why()))
        unexecuted += [out.unexecuted(file.path) for out in outcomes(cells, unreached, moe, every) if out.cell is None]
    return chosen, list(dict.fromkeys(unexecuted))
