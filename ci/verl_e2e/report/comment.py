"""Verdicts -> the PR comment, job summary and check run payload. Pure: no I/O, exact text.

One comment per PR, found by a hidden marker. It leads with the overall result and counts "as of
commit X, merge base Y", then a table of cells, then one collapsible block per cell in the skill's
summary format (failures first), then the levels the rules skipped with how to request them. GitHub
refuses bodies over 65,536 characters: details of passing cells are dropped first, then failing
details are shortened; the headline, the table and the failures' results always stay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from verl_e2e.config.compat import KNOWN
from verl_e2e.judge.verdict import Verdict, image_line, render_text
from verl_e2e.report.regression import counts_against_the_pr, says

MARKER = "<!-- verl-e2e:pr-comment -->"


def marker(section: str = "") -> str:
    """The hidden line that finds our comment: one for the automatic run, one per explicit request
    (a `/verl-e2e` comment or a dispatch), so a request never overwrites another run's report."""
    return MARKER if not section else f"<!-- verl-e2e:pr-comment section={section} -->"


LIMIT = 65_536
CHECK_SUMMARY_LIMIT = 65_535
MAX_ANNOTATIONS = 50
ICON = {"Pass": "✅", "Fail": "❌", "Blocked": "⛔", "Skipped": "⏭️", "Not requested": "·"}
ORDER = {"Fail": 0, "Blocked": 1, "Pass": 2, "Skipped": 3}
USAGE = (
    "`/verl-e2e level=<levels> [family=<name>] [model=<hf id>] [sha=<head sha>] [verl=<ref>]`, "
    "for example `/verl-e2e level=1,2 family=qwen`"
)


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


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


_MD = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "|": "\\|",
        "`": "'",
        "[": "\\[",
        "]": "\\]",
        "@": "&#64;",  # no mention of anyone from a log line
        "\n": " ",
        "\r": " ",
    }
)


def md(text: object) -> str:
    """A value from a run dir or a plan, shown as plain text in markdown or HTML: nothing it says renders."""
    return str(text).translate(_MD).strip()


def code(text: object) -> str:
    """Log-derived text as a code span: no link, mention, emphasis, emoji or `owner/repo#N` renders in
    it (a pipe stays escaped, as GitHub's tables need even inside a span); "" stays empty."""
    inner = str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ").replace("\r", " ").strip()
    return f"`{inner}`" if inner else ""


def key_line(v: Verdict) -> str:
    if v.result in ("Fail", "Blocked"):
        versus = says(v)
        return ((versus + ": ") if versus else "") + v.headline.split(": ", 1)[-1][:140]
    return next(
        (k for k in reversed(v.key_lines) if "training/global_step" in k),
        v.key_lines[-1] if v.key_lines else "",
    )[:140]


def headline(verdicts: Sequence[Verdict], ctx: Context) -> list[str]:
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
        where.append("Workflow jobs that did not finish: " + ", ".join(code(j) for j in ctx.job_failures))
    line = ". ".join(where) + ("." if where else "")
    if links:
        line += (" " if line else "") + " · ".join(links)
    return ([title, "", line] if line else [title]) + compat_notice(verdicts)


def compat_notice(verdicts: Sequence[Verdict]) -> list[str]:
    """Once at the top: the cells ran a fallback Megatron-Core because the pinned one is known not to
    run with this verl (pre-existing on the base branch), so no one reads the PR's cells as testing it."""
    known = sorted({x.removeprefix(KNOWN) for v in verdicts for x in v.limitations if x.startswith(KNOWN)})
    return [line for text in known for line in ("", f"> [!NOTE]\n> **Megatron-Core:** {md(text)}")]


def _ran_with(verdicts: Sequence[Verdict]) -> str:
    """The verl commit(s) and image(s) the cells ran with, as recorded in their run dirs."""
    verl = sorted({str(v.repos["verl"].get("commit")) for v in verdicts if isinstance(v.repos.get("verl"), dict)})
    images = sorted({image_line(v.repos) for v in verdicts if v.repos})
    parts = []
    if verl:
        parts.append("verl " + ", ".join(code(c) for c in verl))
    if images:
        parts.append("image " + ", ".join(code(i) for i in images))
    return "Ran with " + "; ".join(parts) if parts else ""


def changed_code(v: Verdict) -> str:
    """How much of the PR's changed code the cell ran: '3 of 4', or a warning when none."""
    cov = v.coverage or {}
    ran, missed = len(cov.get("executed") or ()), len(cov.get("not_executed") or ())
    if not ran + missed:
        return "-"
    return f"{ran} of {ran + missed}" + (" (none ran)" if not ran else "")


def table(verdicts: Sequence[Verdict]) -> list[str]:
    if not verdicts:
        return []
    covered = any(v.coverage for v in verdicts)  # the column appears once the plan named changed functions
    column = (" Changed code ran |", "---|") if covered else ("", "")
    rows = [
        "| Cell | Level | Variant | Model | Result | Duration |" + column[0] + " Key line |",
        "|---|---|---|---|---|---|" + column[1] + "---|",
    ]
    for v in sorted(verdicts, key=lambda v: (ORDER.get(v.result, 9), v.level, v.cell_id)):
        rows.append(
            f"| `{md(v.cell_id)}` | {v.level} | {md(v.variant)} | `{md(v.model)}` "
            f"| {ICON.get(v.result, '')} {v.result} "
            f"| {_duration(v.duration_s)} |" + (f" {changed_code(v)} |" if covered else "") + f" {code(key_line(v))} |"
        )
    return rows


def details(v: Verdict, limit: int | None = None) -> str:
    body = render_text(v).rstrip("\n")
    if limit is not None and len(body) > limit:
        body = body[: max(0, limit - 40)].rstrip() + "\n… (shortened; the full summary is in the run dir)"
    fenced = body.replace("```", "'''")  # a fence inside would end the code block early
    return (
        f"<details><summary>{ICON.get(v.result, '')} <code>{md(v.cell_id)}</code>: {v.result}</summary>\n\n"
        f"```text\n{fenced}\n```\n\n</details>"
    )


def uncovered_levels(ctx: Context) -> list[str]:
    """Selected levels (or parts of them) that no cell ran, with the reason: shown, never passed over."""
    lines: list[str] = []
    for level, whys in sorted(ctx.uncovered.items()):
        lines += [f"- Level {md(level)} selected, not run: {md(why)}" for why in whys]
    return ["", "**Not covered**", "", *lines] if lines else []


def deferred_cells(ctx: Context) -> list[str]:
    """Cells the plan selected but left over the GPU budget, each with the comment that runs it."""
    lines = [
        f"- `{md(d.get('id'))}` ({md(d.get('gpu_minutes'))} GPU-minutes): comment `{md(d.get('request'))}`"
        for d in ctx.deferred
    ]
    return (
        ["", "**Not run (GPU budget)**: selected for this change, but over the site's budget per push", "", *lines]
        if lines
        else []
    )


def skipped_levels(ctx: Context) -> list[str]:
    if not ctx.skipped:
        return []
    lines = ["", "<details><summary>Levels not run</summary>", ""]
    for level, why in sorted(ctx.skipped.items()):
        lines.append(f"- Level {md(level)}: {md(why)}. Request it with `/verl-e2e level={md(level)}`.")
    return [*lines, "", "</details>"]


def render(verdicts: Sequence[Verdict], ctx: Context, limit: int = LIMIT, with_marker: bool = True) -> str:
    """The whole comment (or job summary), never longer than `limit` characters."""
    head = [*([marker(ctx.section)] if with_marker else []), *headline(verdicts, ctx), "", *table(verdicts)]
    head += uncovered_levels(ctx) + deferred_cells(ctx)
    tail = [*skipped_levels(ctx), "", f"<sub>Comment with {USAGE} to run other levels.</sub>"]
    failing = [v for v in verdicts if v.result in ("Fail", "Blocked")]
    passing = [v for v in verdicts if v not in failing]
    fixed = "\n".join(head) + "\n\n" + "\n".join(tail) + "\n"
    budget = limit - len(fixed) - 200
    blocks = [details(v) for v in failing]
    if sum(len(b) + 2 for b in blocks) > budget and failing:
        share = max(200, budget // len(failing) - 200)
        blocks = [details(v, share) for v in failing]
    used = sum(len(b) + 2 for b in blocks)
    omitted = 0
    for v in passing:
        block = details(v)
        if used + len(block) + 2 <= budget:
            blocks.append(block)
            used += len(block) + 2
        else:
            omitted += 1
    if omitted:
        blocks.append(
            f"<sub>Details of {omitted} passing cell(s) left out to fit GitHub's comment limit; "
            "they are in the run dirs.</sub>"
        )
    text = "\n".join(head) + "\n\n" + "\n\n".join(blocks) + "\n" + "\n".join(tail) + "\n"
    if len(text) > limit:  # a last resort for pathological inputs: keep the head, cut the rest
        text = text[: limit - 80] + "\n\n… (cut to fit GitHub's limit; see the run dirs)\n"
    return text


def check_run(verdicts: Sequence[Verdict], ctx: Context, *, blocked_fails: bool = True) -> dict[str, Any]:
    """The payload of the one aggregate check run: conclusion, summary, up to 50 annotations."""
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
    payload: dict[str, Any] = {
        "name": "verl-e2e",
        "head_sha": ctx.sha,
        "status": "completed",
        "conclusion": conclusion,
        "output": {"title": title[:255], "summary": render(verdicts, ctx, CHECK_SUMMARY_LIMIT, with_marker=False)},
    }
    if ctx.run_url:
        payload["details_url"] = ctx.run_url
    if annotations:
        payload["output"]["annotations"] = annotations
    return payload


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


def refusal(reason: str) -> str:
    """The reply to a `/verl-e2e` comment that could not be run."""
    return f"{MARKER.replace('pr-comment', 'reply')}\n⚠️ verl-e2e did not run: {md(reason)}\n\nUsage: {USAGE}\n"


def fork_notice(sha: str) -> str:
    """The sticky comment on a fork's PR: nothing ran, and how a maintainer starts it."""
    return (
        f"{MARKER}\n## ⏸️ verl-e2e: waiting for a maintainer\n\n"
        f"This pull request comes from a fork, so its code does not run on the GPU runners by itself. "
        f"A maintainer with write access can start the run for commit {sha[:12]} with\n\n"
        f"`/verl-e2e sha={sha}`\n\n(add `level=...` to choose levels). Usage: {USAGE}\n"
    )
