"""The plan stage's entry: one `PlanRequest` in, a `Plan` out.

The CLI parses `plan` and `run` into a `PlanRequest` and hands it down; reading the change (a
name-status list and a diff, a git range, or a built-in example), enriching it (changed lines, their
functions, the architectures a model file serves), selecting levels, expanding cells and keeping the
push inside its GPU budget all happen here, so the plan command stays a parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verl_e2e.config import site
from verl_e2e.config.matrix import Matrix, with_runners
from verl_e2e.errors import UsageError
from verl_e2e.plan import budget, runtime, scheduled, surface
from verl_e2e.plan.cells import expand, uncovered
from verl_e2e.plan.changes import ChangedFile, is_pin, parse_name_status, read_changed_files
from verl_e2e.plan.contract import Plan
from verl_e2e.plan.diffs import read_diff
from verl_e2e.plan.enrich import (
    changed_defaults,
    changed_line_ranges,
    changed_names,
    files_from_diff,
    with_architectures,
    with_diff,
)
from verl_e2e.plan.examples import EXAMPLES
from verl_e2e.plan.gitchanges import changes_from_git, resolve_commit
from verl_e2e.plan.select import select

HF_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class PlanRequest:
    """What the person asked to plan, as parsed: one source of changes, or levels; the rest narrows."""

    command: str = "plan"
    changed_files: str | None = None  # a path, or "-" for the text in `stdin`
    diff: str | None = None
    repo: str | None = None
    base: str | None = None
    head: str | None = None
    example: str | None = None
    levels: list[int] | None = None  # None: the rules decide
    families: tuple[str, ...] = ()
    model: str | None = None
    scheduled: bool = False
    budget: int | None = None  # None: matrix.yaml's defaults.gpu_budget_minutes
    runners: str | None = None  # a site's runner labels (installer setting), replacing matrix.yaml's
    stdin: str | None = None


def _check_sources(req: PlanRequest) -> None:
    chosen = [n for n in ("changed_files", "repo", "example") if getattr(req, n) is not None]
    if len(chosen) > 1:
        raise UsageError(
            f"plan: --{chosen[0].replace('_', '-')} and --{chosen[1].replace('_', '-')} both given; "
            "pass only one source of changes"
        )
    if req.repo is None and (req.base or req.head):
        raise UsageError("plan: --base/--head need --repo PATH (the Bridge checkout to diff)")
    if req.diff is not None and req.repo is not None:
        raise UsageError("plan: --diff and --repo both given; --repo reads the diff itself, pass only one")


def read_changes(req: PlanRequest) -> tuple[list[ChangedFile] | None, dict[str, object]]:
    """The changed files and the plan context saying where they came from (None: no change given)."""
    _check_sources(req)
    if req.changed_files is not None or req.diff is not None:
        diffs = read_diff(req.diff) if req.diff is not None else {}
        if req.changed_files is not None:
            text = req.stdin if req.changed_files == "-" else None
            files = read_changed_files(req.changed_files, text)
        else:
            files = files_from_diff(diffs)
        files = with_architectures(with_diff(files, diffs), surface.shipped())
        what = "changed file(s)" + (" with their diff" if req.diff is not None else "")
        return files, {"source": "changed-files", "summary": f"{len(files)} {what}"}
    if req.repo is not None:
        if not req.base:
            raise UsageError("plan: --repo needs --base REV (e.g. --base origin/main)")
        files, merge_base, head = changes_from_git(req.repo, req.base, req.head or "HEAD")
        return (
            files,
            {
                "source": "git",
                "merge_base": merge_base,
                "base": resolve_commit(req.repo, req.base),  # the base branch's tip as the trigger saw it
                "head": head,
                "summary": f"{len(files)} changed file(s) at {head[:12]} against merge base {merge_base[:12]}",
            },
        )
    if req.example is not None:
        what, text = EXAMPLES[req.example]
        files = parse_name_status(text, f"example {req.example}")
        return files, {"source": f"example:{req.example}", "summary": f"example '{req.example}': {what}"}
    return None, {"source": "none", "summary": "no changes given"}


def _change_context(files: list[ChangedFile]) -> dict[str, object]:
    """What the judge needs from the change: its line ranges, pins and functions (plan JSON `context`)."""
    return {
        "changes": changed_line_ranges(files),  # the judge names a failing frame in these lines
        "changed_names": changed_names(files),  # weights Bridge could not load that this change named
        "changed_defaults": changed_defaults(files),  # a changed default a failing path reads: the likely cause
        "pins_changed": sorted({p for f in files for p in f.paths if is_pin(p)}),
        "changed_functions": {
            f.path: list(f.functions if f.functions is not None else f.scopes)
            for f in files
            if f.path.endswith(".py") and (f.functions or f.scopes)
        },
    }


def make_plan(req: PlanRequest, matrix: Matrix) -> Plan:
    """Levels with their reasons, the cells that run them within the GPU budget, and the context."""
    if req.model is not None and not HF_ID.fullmatch(req.model):
        raise UsageError(
            f"--model {req.model!r}: not a checkpoint id; expected ORG/NAME as on the Hugging Face hub "
            "(e.g. Qwen/Qwen3-0.6B), the path under the runners' model cache"
        )
    if req.runners:
        matrix = with_runners(matrix, site.runners(req.runners))
    families = sorted(matrix.families) if "all" in req.families else list(req.families)
    if req.scheduled:
        selection, cells = scheduled.plan(matrix)
        return Plan(selection, cells, {"source": "scheduled", "summary": scheduled.WHY}, uncovered(matrix, selection))
    files, context = read_changes(req)
    if files is None and req.levels is None:
        raise UsageError(
            f"{req.command}: nothing to plan; pass --changed-files FILE, --repo PATH --base REV, --example, "
            "or explicit --levels (e.g. --levels 0)"
        )
    selection = select(matrix, files or [], req.levels, families, surface.shipped(), ran=runtime.shipped())
    if files:
        context.update(_change_context(files))
    if selection.unexecuted:  # changed lines under layout conditions no cell's layout takes (also a warning)
        context["unexecuted"] = list(selection.unexecuted)
    cells = expand(matrix, selection, req.model)
    limit = matrix.defaults.gpu_budget_minutes if req.budget is None else req.budget
    chosen = budget.apply(cells, selection, limit or None if req.levels is None else None)
    return Plan(selection, chosen.run, context, uncovered(matrix, selection), chosen)
