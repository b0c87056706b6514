"""The plan contract (`--format json`) and its human renderings (text, GitHub step summary).

JSON is a stable contract read by the workflows and by people's tooling: `schema_version`, `levels`,
`families`, `reasons` (level -> [{rule, why, family, paths}]), `skipped` (level -> why), `cells`,
`gpu_minutes`, `matrix` (the GitHub `{"include": [...]}`) plus context. Keys are sorted and the
output is byte-for-byte reproducible.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.budget import Budgeted, request
from verl_e2e.plan.cells import Cell, github_matrix, gpu_minutes
from verl_e2e.plan.select import Selection

SCHEMA_VERSION = 1
MAX_PATHS_SHOWN = 5


@dataclass(frozen=True)
class Plan:
    selection: Selection
    cells: list[Cell]
    context: dict[str, Any] = field(default_factory=dict)  # source, base/head/merge base, changed-file count
    uncovered: dict[int, list[str]] = field(default_factory=dict)  # selected level -> why it has no cell
    budgeted: Budgeted | None = None  # the cells over the GPU budget, with the requests that run them

    def to_json(self) -> dict[str, Any]:
        s = self.selection
        return {
            "schema_version": SCHEMA_VERSION,
            "requested": s.requested,
            "levels": list(s.levels),
            "families": list(s.families),
            "reasons": {str(lv): [r.to_json() for r in rs] for lv, rs in s.reasons.items()},
            "skipped": {str(lv): why for lv, why in s.skipped.items()},
            "ignored": {g: list(p) for g, p in s.ignored.items()},
            "cosmetic": list(s.cosmetic),
            "unmatched": list(s.unmatched),
            "off_surface": dict(s.off_surface),
            "uncovered": {str(lv): why for lv, why in self.uncovered.items()},
            "warnings": list(s.warnings),
            "cells": [c.to_json() for c in self.cells],
            "gpu_minutes": gpu_minutes(self.cells),
            "gpu_budget": self.budgeted.budget if self.budgeted else None,
            "deferred": self.budgeted.deferred_json() if self.budgeted else [],
            "matrix": json.loads(github_matrix(self.cells)),
            "context": self.context,
        }


def render_json(plan: Plan) -> str:
    return json.dumps(plan.to_json(), sort_keys=True, indent=2) + "\n"


def _paths(paths: tuple[str, ...]) -> str:
    shown = ", ".join(paths[:MAX_PATHS_SHOWN])
    return shown + (f" and {len(paths) - MAX_PATHS_SHOWN} more" if len(paths) > MAX_PATHS_SHOWN else "")


def _kind(rule: str, matrix: Matrix) -> str:
    """What chose a level, named as what it is: a path rule, an escalation (never passed off as a
    path rule), an aspect of the diff, or the planner's own reason (executed code, architecture)."""
    if any(e.name == rule for e in matrix.escalations):
        return f"escalation {rule}"
    if rule.startswith("aspect:"):
        return f"aspect {rule.removeprefix('aspect:')}"
    return f"rule {rule}" if any(r.name == rule for r in matrix.rules) else rule


def render_text(plan: Plan, matrix: Matrix) -> str:
    """The plan as a person reads it in a terminal or a job log: what changed, each selected level
    with the rule and paths that chose it, the levels skipped and why, and the cells in a table
    whose units are named (a GPU-minute estimate is not a timeout)."""
    s, ctx = plan.selection, plan.context
    out = [f"verl-e2e plan: {ctx.get('summary', '')}".rstrip()]
    for name, paths in s.ignored.items():
        out.append(f"  ignored ({name}): {_paths(paths)}")
    if s.cosmetic:
        out.append(f"  comment/docstring-only: {_paths(s.cosmetic)}")
    for path, why in s.off_surface.items():
        out.append(f"  {path}: {why}")
    if s.unmatched:
        out.append(f"  on verl's surface, but no rule or aspect matched: {_paths(s.unmatched)}")
    out += ["", "Selected levels:" if s.levels else "Selected levels: none"]
    for level in s.levels:
        out.append(f"  Level {level}  {matrix.levels[level].title}")
        for r in s.reasons.get(level, ()):
            where = f" ({_paths(r.paths)})" if r.paths else ""
            out.append(f"    - {_kind(r.rule, matrix)}, family {r.family}{where}:")
            out.append(f"      {r.why}")
        out += [f"    ! not covered: {why}" for why in plan.uncovered.get(level, ())]
    out += ["", "Skipped levels:" if s.skipped else "Skipped levels: none"]
    for level, why in s.skipped.items():
        out.append(f"  Level {level}  {matrix.levels[level].title}: {why}")
        out.append(f"    request it with a PR comment: /verl-e2e level={level}")
    out += [f"warning: {warning}" for warning in s.warnings]
    return "\n".join([*out, "", *_cells_text(plan.cells), *_deferred_text(plan)]) + "\n"


def _cells_text(cells: list[Cell]) -> list[str]:
    """The cells as a table with headers: the estimate in GPU-minutes (GPUs x expected minutes, what
    the budget counts) apart from the timeout in wall-clock minutes (when the job is stopped)."""
    out = [f"Cells: {len(cells)}, about {gpu_minutes(cells)} GPU-minutes in all"]
    if not cells:
        return out
    rows = [("cell", "GPUs", "estimate", "timeout", "model")]
    for c in cells:
        dummy = " (dummy)" if c.dummy_config is not None else ""
        rows.append((c.id, str(c.gpus), f"{c.gpus * c.minutes} GPU-min", f"{c.timeout_minutes} min", c.model + dummy))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cell, gpus, estimate, timeout, model = row
        line = f"  {cell:<{widths[0]}}  {gpus:>{widths[1]}}  {estimate:>{widths[2]}}  {timeout:>{widths[3]}}  {model}"
        out.append(line)
    return out


def _deferred_text(plan: Plan) -> list[str]:
    b = plan.budgeted
    if b is None or not b.deferred:
        return []
    out = ["", f"Not run (GPU budget of {b.budget} GPU-minutes): {len(b.deferred)} cell(s), run each with"]
    rows = [("cell", "estimate", "request")]
    rows += [(c.id, f"{c.gpus * c.minutes} GPU-min", request(c)) for c in b.deferred]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    out += [f"  {cell:<{widths[0]}}  {est:>{widths[1]}}  {req}" for cell, est, req in rows]
    return out


def render_markdown(plan: Plan, matrix: Matrix) -> str:
    """The plan as a GitHub job summary."""
    s = plan.selection
    lines = ["## verl-e2e plan", ""]
    if plan.context.get("summary"):
        lines += [plan.context["summary"], ""]
    if not plan.cells:
        lines += ["No verl run is needed for this change.", ""]
    else:
        lines += [f"**{len(plan.cells)} cells**, about {gpu_minutes(plan.cells)} GPU-minutes.", ""]
        lines += ["| Cell | Level | Model | GPUs | Timeout |", "|---|---|---|---|---|"]
        for c in plan.cells:
            lines.append(
                f"| `{c.id}` | {c.level} {matrix.levels[c.level].title} | `{c.model}` "
                f"| {c.gpus} | {c.timeout_minutes} min |"
            )
        lines.append("")
    if plan.budgeted is not None and plan.budgeted.deferred:
        lines += [f"**Not run (GPU budget of {plan.budgeted.budget} GPU-minutes):**", ""]
        lines += [f"- `{c.id}`: comment `{request(c)}`" for c in plan.budgeted.deferred]
        lines.append("")
    lines += ["| Level | Selected | Why |", "|---|---|---|"]
    for level in sorted(matrix.levels):
        if level in s.reasons:
            why = "; ".join(f"`{r.rule}` ({r.family})" for r in s.reasons[level])
            uncovered = "".join(f"; **not covered**: {_literal(w)}" for w in plan.uncovered.get(level, ()))
            why += uncovered.replace("|", "\\|")
            lines.append(f"| {level} {matrix.levels[level].title} | yes | {why} |")
        else:
            why = s.skipped.get(level, "").replace("|", "\\|")
            lines.append(f"| {level} {matrix.levels[level].title} | no | {why} (`/verl-e2e level={level}`) |")
    for warning in s.warnings:
        lines += ["", f"> [!WARNING]\n> {_literal(warning)}"]
    return "\n".join(lines) + "\n"


def _literal(text: str) -> str:
    """Text that may quote the PR's code (a branch condition, an architecture name) as one code span: its
    fence longer than any backtick run inside, so nothing in it renders as markdown, a link or a mention."""
    flat = " ".join(text.split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"


def append_outputs(path: Path, outputs: Mapping[str, str]) -> None:
    """Append step outputs in the heredoc form with a random delimiter, so no value can end the block early."""
    with path.open("a", encoding="utf-8") as fh:
        for key, value in outputs.items():
            delimiter = f"ghadelim_{secrets.token_hex(8)}"
            fh.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")


def write_github(plan: Plan, matrix: Matrix, env: Mapping[str, str]) -> dict[str, str]:
    """Append `levels`, `matrix`, `has_cells`, `verl_ref` to $GITHUB_OUTPUT and the markdown to $GITHUB_STEP_SUMMARY.

    Values go through the heredoc form with a random delimiter, so no value can end the block early.
    Returns the outputs (also what gets printed when the files are not set, e.g. locally).
    """
    outputs = {
        "levels": json.dumps(list(plan.selection.levels), separators=(",", ":")),
        "matrix": github_matrix(plan.cells),
        "has_cells": "true" if plan.cells else "false",
        # the verl commit the image bakes in: the pinned one unless the request named another
        "verl_ref": matrix.defaults.verl_ref,
        "merge_base": str(plan.context.get("merge_base", "")),  # where a failed cell's base result comes from
    }
    if env.get("GITHUB_OUTPUT"):
        append_outputs(Path(env["GITHUB_OUTPUT"]), outputs)
    if env.get("GITHUB_STEP_SUMMARY"):
        with Path(env["GITHUB_STEP_SUMMARY"]).open("a", encoding="utf-8") as fh:
            fh.write(render_markdown(plan, matrix))
    return outputs
