"""The plan contract (`--format json`) and its human renderings (text, GitHub step summary).

JSON is a stable contract read by the workflows and by people's tooling: `schema_version`, `levels`,
`families`, `reasons` (level -> [{rule, why, family, paths}]), `skipped` (level -> why), `cells`,
`gpu_minutes`, `matrix` (the GitHub `{"include": [...]}`) plus context. Keys are sorted and the
output is byte-for-byte reproducible.
"""

from __future__ import annotations

import json
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
    """Name an escalation as such, so the text never passes one off as a path rule."""
    return "escalation " if any(e.name == rule for e in matrix.escalations) else ""


def render_text(plan: Plan, matrix: Matrix) -> str:
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
    out.append("")
    out.append("Selected levels:" if s.levels else "Selected levels: none")
    for level in s.levels:
        out.append(f"  Level {level}  {matrix.levels[level].title}")
        for r in s.reasons.get(level, ()):
            where = f": {_paths(r.paths)}" if r.paths else ""
            out.append(f"    - {_kind(r.rule, matrix)}{r.rule} [{r.family}]{where}")
            out.append(f"      {r.why}")
        for why in plan.uncovered.get(level, ()):
            out.append(f"    ! not covered: {why}")
    out.append("")
    out.append("Skipped levels:" if s.skipped else "Skipped levels: none")
    for level, why in s.skipped.items():
        out.append(f"  Level {level}  {matrix.levels[level].title}: {why}")
        out.append(f"    request it with a PR comment: /verl-e2e level={level}")
    for warning in s.warnings:
        out.append(f"warning: {warning}")
    out.append("")
    out.append(f"Cells: {len(plan.cells)} (about {gpu_minutes(plan.cells)} GPU-minutes)")
    width = max((len(c.id) for c in plan.cells), default=0)
    for c in plan.cells:
        dummy = " (dummy)" if c.dummy_config is not None else ""
        out.append(f"  {c.id:<{width}}  {c.gpus} GPU  {c.timeout_minutes:>3} min  {c.model}{dummy}")
    return "\n".join(out + _deferred_text(plan)) + "\n"


def _deferred_text(plan: Plan) -> list[str]:
    b = plan.budgeted
    if b is None or not b.deferred:
        return []
    out = [f"Not run (GPU budget of {b.budget} GPU-minutes): {len(b.deferred)} cell(s), run each with"]
    width = max(len(c.id) for c in b.deferred)
    out += [f"  {c.id:<{width}}  {c.gpus * c.minutes:>4} GPU-min  {request(c)}" for c in b.deferred]
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
            why += "".join(f"; **not covered**: {w}" for w in plan.uncovered.get(level, ()))
            lines.append(f"| {level} {matrix.levels[level].title} | yes | {why} |")
        else:
            why = s.skipped.get(level, "").replace("|", "\\|")
            lines.append(f"| {level} {matrix.levels[level].title} | no | {why} (`/verl-e2e level={level}`) |")
    for warning in s.warnings:
        lines += ["", f"> [!WARNING]\n> {warning}"]
    return "\n".join(lines) + "\n"


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
