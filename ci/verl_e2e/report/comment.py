"""Verdicts -> the sticky PR comment and the check run payload. Pure: no I/O, exact text.

One comment per PR, found by a hidden marker, that reads on one screen (Dr. CI's comment is the
model): the result line "as of commit X, merge base Y", notes said once, one row per cell with the
culprit file:line in view, a short block per failing cell (its result, deliverables, key lines and
follow-ups), every limitation once, and the levels that did not run. What a reader needs only to
dig (each cell's command line, repositories, image, passing cells' details) is in the job summary
and the run dirs (`fullsummary`), and the comment says so. GitHub refuses bodies over 65,536
characters: failing blocks are dropped last, the result line and the table never.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl_e2e.judge.verdict import Verdict
from verl_e2e.report.fullsummary import CHECK_SUMMARY_LIMIT, render_full
from verl_e2e.report.markup import block, html_code, span
from verl_e2e.report.regression import counts_against_the_pr
from verl_e2e.report.rows import CAUSE_CHARS, ICON, culprit, ordered, table
from verl_e2e.report.sections import COMMAND, Context, headline, limitations, overall, top

__all__ = [
    "CHECK_SUMMARY_LIMIT",
    "LIMIT",
    "MARKER",
    "Context",
    "check_run",
    "commit_status",
    "headline",
    "marker",
    "only_pre_existing",
    "overall",
    "render",
    "table",
]

MARKER = "<!-- verl-e2e:pr-comment -->"
LIMIT = 65_536
MAX_ANNOTATIONS = 50


def marker(section: str = "") -> str:
    """The hidden line that finds our comment: one for the automatic run, one per explicit request
    (a `/verl-e2e` comment or a dispatch), so a request never overwrites another run's report."""
    return MARKER if not section else f"<!-- verl-e2e:pr-comment section={section} -->"


def brief(v: Verdict) -> str:
    """A failing cell's block: which deliverables failed and what to do. The row above has its cause
    and culprit (the cause is repeated in full only where the row had to cut it); its limitations
    are in the shared list; its key lines and the rest are in the job summary and its run dir."""
    found = culprit(v)
    lines = [f"Cause in full: {v.headline.split(': ', 1)[-1]}"] if len(found.cause) > CAUSE_CHARS else []
    failed = [d for d in v.deliverables if d.result == "Fail"]
    lines += ["Failed deliverables:", *(f"- {d.name}: {d.detail}" for d in failed)] if failed else []
    # a follow-up that only points at the frame the row names already (the judge's "look first at") is left out
    follow = [x for x in v.follow_ups if not (found.where and x.replace("`", "").endswith(found.where))]
    lines += ["Follow-ups:", *(f"- {x}" for x in follow or ["see the row above"])]
    return (
        f"<details><summary>{ICON.get(v.result, '')} {html_code(v.cell_id)}: {v.result}</summary>\n\n"
        f"{block(chr(10).join(lines))}\n\n</details>"
    )


def skipped_line(ctx: Context) -> list[str]:
    """The levels the rules did not select, in one line; why each was skipped is in the job summary."""
    levels = sorted(str(level) for level in ctx.skipped if str(level).isdigit())
    if not levels:
        return []
    return ["", f"**Levels not run:** {', '.join(levels)} (the plan's reasons are in the job summary)."]


def unexecuted_lines(ctx: Context) -> list[str]:
    """Changed lines no planned cell executes (a branch only a layout no cell has takes): said plainly,
    since a Pass then proves nothing about them. The text quotes the PR's code: shown literally."""
    if not ctx.unexecuted:
        return []
    shown = [f"- {span(u, table=False)}" for u in ctx.unexecuted[:5]]
    more = [f"- and {len(ctx.unexecuted) - 5} more (the plan lists them)"] if len(ctx.unexecuted) > 5 else []
    return ["", "**Changed lines no cell executes** (no result here covers them):", *shown, *more]


def where_the_rest_is(ctx: Context) -> str:
    """The comment's last line: where the detail it leaves out is, and how to run more."""
    where = "the workflow run's job summary and the run dirs" + (" (linked above)" if ctx.run_url else "")
    return f"<sub>Every cell in full, with the command that reproduces it: {where}. Run more: {COMMAND}.</sub>"


def render(verdicts: Sequence[Verdict], ctx: Context, limit: int = LIMIT, with_marker: bool = True) -> str:
    """The PR comment, never longer than `limit` characters."""
    head = [*([marker(ctx.section)] if with_marker else []), *top(verdicts, ctx)]
    tail = [*unexecuted_lines(ctx), *limitations(verdicts), *skipped_line(ctx), "", where_the_rest_is(ctx)]
    fixed = len("\n".join(head)) + len("\n".join(tail)) + 200
    blocks, used, left_out = [], 0, 0
    for v in ordered(verdicts):
        if v.result not in ("Fail", "Blocked"):
            continue
        one = brief(v)
        if fixed + used + len(one) + 2 > limit:
            left_out += 1
            continue
        blocks.append(one)
        used += len(one) + 2
    if left_out:
        blocks.append(f"<sub>{left_out} failing cell(s) left out to fit GitHub's limit; see the job summary.</sub>")
    text = "\n".join(head) + "\n\n" + "".join(b + "\n\n" for b in blocks) + "\n".join(tail).lstrip("\n") + "\n"
    if len(text) > limit:  # a last resort for pathological inputs: keep the head, cut the rest
        text = text[: limit - 80] + "\n\n… (cut to fit GitHub's limit; see the run dirs)\n"
    return text


def check_run(verdicts: Sequence[Verdict], ctx: Context, *, blocked_fails: bool = True) -> dict[str, Any]:
    """The payload of the one aggregate check run: conclusion, the full summary, up to 50 annotations."""
    result = overall(verdicts, ctx)
    conclusion = {
        "Pass": "success",
        "Fail": "failure",
        "Skipped": "success",
        "Blocked": "failure" if blocked_fails else "neutral",
    }[result]
    title = headline(verdicts, ctx)[0].removeprefix("## ")
    if result == "Fail" and only_pre_existing(verdicts, ctx):
        conclusion = "neutral"
        title += " - every failure is already on the merge base, so the check does not fail"
    payload: dict[str, Any] = {
        "name": "verl-e2e",
        "head_sha": ctx.sha,
        "status": "completed",
        "conclusion": conclusion,
        "output": {"title": title[:255], "summary": render_full(verdicts, ctx, CHECK_SUMMARY_LIMIT)},
    }
    if ctx.run_url:
        payload["details_url"] = ctx.run_url
    annotations = _annotations(verdicts, ctx)
    if annotations:
        payload["output"]["annotations"] = annotations
    return payload


def _annotations(verdicts: Sequence[Verdict], ctx: Context) -> list[dict[str, Any]]:
    """One annotation per failing cell, on the first changed path the plan gave its level and family."""
    annotations = []
    for v in [v for v in verdicts if v.result in ("Fail", "Blocked")][:MAX_ANNOTATIONS]:
        paths = [
            p for r in ctx.reasons.get(str(v.level), []) if r.get("family") == v.family for p in r.get("paths", [])
        ]
        annotations.append(
            {
                "path": paths[0] if paths else ".github/workflows/verl-e2e.yml",
                "start_line": 1,
                "end_line": 1,
                "annotation_level": "failure" if v.result == "Fail" else "warning",
                "title": f"{v.cell_id}: {v.result}"[:255],
                "message": v.headline[:4000],
            }
        )
    return annotations


def only_pre_existing(verdicts: Sequence[Verdict], ctx: Context) -> bool:
    """Every failed cell was already failing on the merge base (and the site does not count those)."""
    failing = [v for v in verdicts if v.result == "Fail"]
    return (
        bool(failing)
        and not ctx.job_failures
        and not any(counts_against_the_pr(v, ctx.pre_existing_fails) for v in failing)
    )


def commit_status(verdicts: Sequence[Verdict], ctx: Context, *, blocked_fails: bool = True) -> dict[str, Any]:
    """The fallback where check runs are not allowed: one commit status."""
    result = overall(verdicts, ctx)
    state = {
        "Pass": "success",
        "Skipped": "success",
        "Fail": "failure",
        "Blocked": "failure" if blocked_fails else "error",
    }[result]
    if result == "Fail" and only_pre_existing(verdicts, ctx):
        state = "success"  # statuses have no neutral; the description says why
    description = headline(verdicts, ctx)[0].removeprefix("## ").replace(ICON[result], "").strip()
    payload = {"state": state, "context": "verl-e2e", "description": description[:140]}
    if ctx.run_url:
        payload["target_url"] = ctx.run_url
    return payload
