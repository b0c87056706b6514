"""The verdicts a report shows: every planned cell exactly once, judged from its run dir or "did not report".

A report must never hide a cell. With the plan at hand, each planned cell gets one row: its run dir is
re-judged (a `verdict.json` found in an artifact is not trusted: it may be stale, from another run,
or malformed), and a planned cell with no run dir becomes a Fail that says it did not report, with
the cell job's result and a link to the run. Run dirs of cells the plan does not name are ignored
and said so (a stale Pass of another PR must not mask a Fail). Without a plan, every run dir found
is judged (reading runs by hand).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.rundir import load_run_dir
from verl_e2e.judge.verdict import Deliverable, Verdict, identity
from verl_e2e.plan.cells import Cell, cell_from_json


def _run_dirs(paths: Sequence[Path], allow_empty: bool) -> list[Path]:
    found: list[Path] = []
    for root in paths:
        if not root.exists():
            if allow_empty:
                continue
            raise UsageError(f"report: {root}: no such directory; pass run dirs or the directory holding them")
        found_here = {p.parent for p in root.rglob("cell.json") if p.is_file() and not p.is_symlink()}
        # an earlier attempt kept inside a run dir (attempt-1/) belongs to that run dir, not a row of its own
        dirs = sorted(d for d in found_here if not any(a in found_here for a in d.parents))
        if not dirs and not allow_empty:
            raise UsageError(f"report: {root}: no run dirs (no cell.json below it)")
        found += dirs
    return found


def did_not_report(cell: Cell, job_result: str, run_url: str) -> Verdict:
    """The row of a planned cell that left no run dir: a Fail, never a silent Skip."""
    where = f" (the cell job's result: {job_result})" if job_result else ""
    link = f"; see {run_url}" if run_url else ""
    reason = f"did not report: no run dir was uploaded{where}{link}"
    none = "no run dir"
    return Verdict(
        **identity(cell),
        result="Fail",
        headline=f"Fail - Level {cell.level} ({cell.variant}) of {cell.model}: {reason}",
        requested=f"Level {cell.level} ({cell.variant})",
        deliverables=[
            Deliverable("Bridge-side checks", "Skipped", none),
            Deliverable("Local Bridge import in verl", "Fail", none),
            Deliverable("verl Megatron backend run", "Fail", f"{cell.variant}: {reason}"),
            Deliverable("Requested variants", "Not requested" if cell.level == 0 else "Fail", none),
            Deliverable("Log capture", "Fail", "no run dir, so no log, was uploaded"),
        ],
        checks=[],
        key_lines=[reason],
        limitations=list(cell.limitations),
        follow_ups=["open the workflow run: the cell job failed, was cancelled or never started; rerun it"],
        failure_class="did_not_report",
        failed_phase=None,
        duration_s=None,
    )


def tested_another_commit(v: Verdict, head_sha: str) -> Verdict:
    """A run dir whose Bridge checkout was not the head under test: not evidence for this commit."""
    tested = str((v.repos.get("bridge") or {}).get("full_commit", ""))
    reason = f"the run dir tested Bridge {tested[:12]}, not the head under test {head_sha[:12]}"
    return replace(
        v,
        result="Fail",
        headline=f"Fail - Level {v.level} ({v.variant}) of {v.model}: {reason}",
        failure_class="wrong_commit",
        key_lines=[reason, *v.key_lines],
        follow_ups=["rerun the cell on the head under test"],
    )


def claimed_twice(first: Verdict, cell: Cell | None) -> Verdict:
    """Two run dirs for one cell id: a job uploads exactly one, so one of them is not this run's."""
    reason = "two run dirs claim this cell (a job uploads exactly one); neither is evidence"
    return replace(
        first,
        result="Fail",
        headline=f"Fail - Level {first.level} ({first.variant}) of {first.model}: {reason}",
        failure_class="harness",
        key_lines=[reason],
        limitations=list(cell.limitations) if cell is not None else first.limitations,
        follow_ups=["rerun the workflow; check that no step adds a run dir of its own"],
    )


def collect(
    paths: Sequence[Path],
    say: Callable[[str], None] = print,
    *,
    allow_empty: bool = False,
    planned: Sequence[Mapping[str, Any]] | None = None,
    job_result: str = "",
    run_url: str = "",
    head_sha: str = "",
) -> list[Verdict]:
    """One verdict per planned cell (or per run dir found, without a plan), sorted by cell id."""
    cells = {c.id: c for c in (cell_from_json(dict(item)) for item in planned or [])}
    verdicts: dict[str, Verdict] = {}
    doubled: set[str] = set()
    for run in _run_dirs(paths, allow_empty or planned is not None):
        try:
            cell_id = load_run_dir(run).cell.id
        except UsageError as exc:
            say(f"{run}: not a run dir ({exc}); ignored")
            continue
        if planned is not None and cell_id not in cells:
            say(f"{run}: cell {cell_id} is not in this run's plan; ignored (a stale or foreign run dir)")
            continue
        if cell_id in verdicts or cell_id in doubled:
            say(f"{run}: a second run dir for {cell_id}; neither is trusted, the cell is reported as a Fail")
            doubled.add(cell_id)
            continue
        verdict = judge_run_dir(run, cell=cells.get(cell_id))
        tested = str((verdict.repos.get("bridge") or {}).get("full_commit", ""))
        if head_sha and tested and tested != head_sha:
            say(f"{run}: tested Bridge {tested[:12]}, not {head_sha[:12]}; reported as a Fail")
            verdict = tested_another_commit(verdict, head_sha)
        verdicts[cell_id] = verdict
    for cell_id in doubled:
        verdicts[cell_id] = claimed_twice(verdicts.pop(cell_id), cells.get(cell_id))
    for cell_id, cell in cells.items():
        if cell_id not in verdicts:
            say(f"{cell_id}: planned, but no run dir was found; reported as did not report")
            verdicts[cell_id] = did_not_report(cell, job_result, run_url)
    return [verdicts[k] for k in sorted(verdicts)]
