"""The parts of a report every output shares: the context, the result line, notes said once, and the
plan's levels that did not run. Pure: verdicts and a context in, markdown lines out.

Anything a cell or a plan wrote is shown through `markup` (code spans, fenced blocks), never as
live markdown; only our own words and the run's links render.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_e2e.config.compat import KNOWN
from verl_e2e.judge.verdict import Verdict, image_line
from verl_e2e.report.markup import block, span
from verl_e2e.report.regression import says
from verl_e2e.report.rows import ICON, table

COMMAND = "`/verl-e2e level=<levels> [family=<name>] [model=<hf id>] [sha=<the SHA you reviewed>] [verl=<ref>]`"
USAGE = f"{COMMAND}, for example `/verl-e2e level=1,2 family=qwen`"


@dataclass(frozen=True)
class Context:
    repo: str = ""
    pr: int | None = None
    sha: str = ""
    merge_base: str = ""
    run_url: str = ""
    artifacts_url: str = ""
    skipped: Mapping[str, str] = field(default_factory=dict)  # level -> why (from the plan)
    reasons: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)  # plan reasons
    job_failures: Sequence[str] = ()  # workflow jobs that failed or were cancelled (e.g. "plan: failure")
    pre_existing_fails: bool = False  # site setting: a failure already on the merge base fails the check
    uncovered: Mapping[str, Sequence[str]] = field(default_factory=dict)  # selected level -> why it has no cell
    deferred: Sequence[Mapping[str, Any]] = ()  # cells over the GPU budget (plan.json `deferred`)
    unexecuted: Sequence[str] = ()  # changed lines no planned cell executes (plan.json context.unexecuted)
    section: str = ""  # "" for the automatic run's comment; e.g. "request-123" for a comment's own


def overall(verdicts: Sequence[Verdict], ctx: Context | None = None) -> str:
    results = {v.result for v in verdicts}
    if ctx is not None and ctx.job_failures:
        results.add("Fail")  # a job that died before judging anything must not look like a pass
    if ctx is not None and ctx.uncovered:
        results.add("Blocked")  # a selected level nothing ran cannot pass: not evidence either way
    for result in ("Fail", "Blocked", "Pass"):
        if result in results:
            return result
    return "Skipped"


def _title(verdicts: Sequence[Verdict], ctx: Context) -> str:
    result = overall(verdicts, ctx)
    counts: Counter[str] = Counter(v.result for v in verdicts)
    parts = ", ".join(f"{counts[r]} {r.lower()}" for r in ("Pass", "Fail", "Blocked", "Skipped") if counts[r])
    title = f"## {ICON[result]} verl-e2e: {result}"
    versus = Counter(says(v) for v in verdicts if says(v))
    if versus:
        parts += "; " + ", ".join(f"{n} {what.split(' (')[0]}" for what, n in sorted(versus.items()))
    if verdicts:
        title += f" ({len(verdicts)} cell{'s' if len(verdicts) != 1 else ''}: {parts})"
    elif not ctx.job_failures and not ctx.uncovered and not ctx.deferred:
        title += " (no verl run needed)"
    if ctx.deferred:
        title += f"; {len(ctx.deferred)} cell{'s' if len(ctx.deferred) != 1 else ''} not run (GPU budget)"
    return title


def headline(verdicts: Sequence[Verdict], ctx: Context) -> list[str]:
    """The result line, then what was tested with what, the run's links and the notes said once."""
    where = []
    if ctx.sha:
        where.append(f"As of commit {ctx.sha[:12]}" + (f", merge base {ctx.merge_base[:12]}" if ctx.merge_base else ""))
    ran_with = _ran_with(verdicts)
    if ran_with:
        where.append(ran_with)
    links = [f"[workflow run]({ctx.run_url})"] if ctx.run_url else []
    if ctx.artifacts_url:
        links.append(f"[run dirs]({ctx.artifacts_url})")
    if ctx.job_failures:
        where.append("Workflow jobs that did not finish: " + ", ".join(span(j, table=False) for j in ctx.job_failures))
    line = ". ".join(where) + ("." if where else "")
    if links:
        line += (" " if line else "") + " · ".join(links)
    title = _title(verdicts, ctx)
    return ([title, "", line] if line else [title]) + compat_notice(verdicts)


CORE = "Megatron-Core: "  # the judge's limitation when the PR's pinned Megatron-LM did not run


def _about_core(text: str) -> bool:
    return text.startswith((KNOWN, CORE))


def compat_notice(verdicts: Sequence[Verdict]) -> list[str]:
    """Once at the top: which Megatron-Core the cells ran when it was not the PR's pinned one, and why
    (a fallback because the pinned one is known not to run with this verl, pre-existing on the base
    branch), so no one reads the PR's cells as testing it. Said here, never again per cell."""
    found = {x for v in verdicts for x in v.limitations if _about_core(x)}
    texts = sorted(x.removeprefix(KNOWN) for x in found if x.startswith(KNOWN))
    texts += sorted(x.removeprefix(CORE) for x in found if x.startswith(CORE))
    if not texts:
        return []
    quoted = "\n>\n> ".join(span(text, table=False) for text in texts)
    return ["", f"> [!NOTE]\n> **Megatron-Core:** {quoted}"]


def _ran_with(verdicts: Sequence[Verdict]) -> str:
    """The verl commit(s) and image(s) the cells ran with, as recorded in their run dirs."""
    verl = sorted({str(v.repos["verl"].get("commit")) for v in verdicts if isinstance(v.repos.get("verl"), dict)})
    images = sorted({image_line(v.repos) for v in verdicts if v.repos})
    parts = []
    if verl:
        parts.append("verl " + ", ".join(span(c, table=False) for c in verl))
    if images:
        parts.append("image " + ", ".join(span(i, table=False) for i in images))
    return "Ran with " + "; ".join(parts) if parts else ""


def limitations(verdicts: Sequence[Verdict]) -> list[str]:
    """Every cell's limitations in one list, each said once: those every cell shares plainly, the
    others with the cells they belong to. Which Megatron-Core ran is in the note at the top."""
    carriers: dict[str, list[int]] = {}
    for i, v in enumerate(verdicts):
        for text in v.limitations:
            if not _about_core(text) and i not in carriers.setdefault(text, []):
                carriers[text].append(i)
    if not carriers:
        return []
    lines = [
        f"- {' '.join(text.split())}"
        + ("" if len(held) == len(verdicts) else f" [{', '.join(verdicts[i].cell_id for i in held)}]")
        for text, held in carriers.items()
    ]
    summary = f"Limitations ({len(lines)}): what these cells do not show"
    return ["", f"<details><summary>{summary}</summary>", "", block("\n".join(lines)), "", "</details>"]


def uncovered_levels(ctx: Context) -> list[str]:
    """Selected levels (or parts of them) that no cell ran, with the reason: shown, never passed over."""
    lines: list[str] = []
    for level, whys in sorted(ctx.uncovered.items()):
        lines += [f"- Level {span(level, table=False)} selected, not run: {span(why, table=False)}" for why in whys]
    return ["", "**Not covered**", "", *lines] if lines else []


def deferred_cells(ctx: Context) -> list[str]:
    """Cells the plan selected but left over the GPU budget, each with the comment that runs it."""
    lines = [
        f"- {span(d.get('id'), table=False)} ({_number(d.get('gpu_minutes'))} GPU-minutes): "
        f"comment {span(d.get('request'), table=False)}"
        for d in ctx.deferred
    ]
    return (
        ["", "**Not run (GPU budget)**: selected for this change, but over the site's budget per push", "", *lines]
        if lines
        else []
    )


def _number(value: object) -> str:
    """A count from the plan as plain digits; anything else it holds, as literal text."""
    return str(value) if isinstance(value, int) or str(value).isdigit() else span(value, table=False)


def skipped_levels(ctx: Context) -> list[str]:
    """The levels the rules did not select, why, and the comment that runs each."""
    if not ctx.skipped:
        return []
    lines = ["", "<details><summary>Levels not run</summary>", ""]
    for level, why in sorted(ctx.skipped.items()):
        run = f" (`/verl-e2e level={level}`)" if str(level).isdigit() else ""
        lines.append(f"- Level {_number(level)}{run}: {span(why, table=False)}")
    return [*lines, "", "</details>"]


def top(verdicts: Sequence[Verdict], ctx: Context) -> list[str]:
    """What every output opens with: the result line, the notes, one row per cell, the levels the
    plan selected that did not run."""
    return [*headline(verdicts, ctx), "", *table(verdicts), *uncovered_levels(ctx), *deferred_cells(ctx)]
