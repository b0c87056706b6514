"""The report stage's entry: one `ReportRequest` in, every planned cell published, the outcome out.

The CLI parses `report` into a `ReportRequest` and hands it down. Here: the plan read as data (a
missing or broken plan reports without it), the cell jobs' results, every run dir collected and
re-judged, the merge base's verdicts compared, the comment context built, a run superseded by a newer
push recognised (its half-run cells publish nothing and keep the last finished result), and the
verdicts published. The exit code stays with the CLI; `ReportOutcome` says what it rests on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_e2e.github.client import GitHubClient, repo_name
from verl_e2e.judge.verdict import Verdict
from verl_e2e.report.collect import collect
from verl_e2e.report.comment import Context, only_pre_existing
from verl_e2e.report.publish import PublishOptions, publish
from verl_e2e.report.regression import annotate


@dataclass(frozen=True)
class ReportRequest:
    """What `verl-e2e report` was asked, as parsed (repository and section already checked)."""

    run_dirs: Sequence[Path]
    plan: Path | None = None
    job_result: Sequence[str] = ()  # NAME=RESULT of the workflow's jobs
    repo: str | None = None  # owner/name (default: GITHUB_REPOSITORY), checked where it is needed
    pr: int | None = None
    sha: str | None = None
    merge_base: str | None = None
    comment: bool = True
    check: bool = True
    tracking_issue: bool = False
    blocked_neutral: bool = False
    pre_existing_fails: bool = False
    summary: Path | None = None
    junit: Path | None = None
    run_url: str | None = None
    artifacts_url: str | None = None
    dry_run: bool = False
    bot_login: str = "github-actions[bot]"
    baseline: Path | None = None
    section: str = ""


@dataclass(frozen=True)
class ReportOutcome:
    result: str  # the overall result published
    cells: int
    superseded: bool  # a newer push cancelled this run: nothing new was published
    only_pre_existing: bool  # every failure is already on the merge base


def _read_plan(path: Path | None, say: Callable[[str], None]) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        say(f"no readable plan at {path} ({exc.__class__.__name__}); reporting without it")
        return {}
    return data if isinstance(data, dict) else {}


def _job_results(items: Sequence[str], planned: bool) -> tuple[dict[str, str], list[str]]:
    results, failures = {}, []
    for item in items:
        name, _, result = item.partition("=")
        results[name] = result
        if result in ("failure", "cancelled"):
            failures.append(f"{name}: {result}")
    if planned:  # with the plan, every cell has a row (judged, or "did not report"): a failed cell job is told there
        failures = [j for j in failures if not j.startswith("cell:")]
    return results, failures


def _verdicts(
    req: ReportRequest, plan: Mapping[str, Any], results: Mapping[str, str], run_url: str, say: Callable[[str], None]
) -> list[Verdict]:
    planned = plan.get("cells") if isinstance(plan.get("cells"), list) else None
    verdicts = collect(
        list(req.run_dirs),
        say,
        allow_empty=req.plan is not None,
        planned=planned,
        job_result=results.get("cell", results.get("cells", "")),
        run_url=run_url,
        head_sha=req.sha or "",
    )
    if req.baseline is not None:
        base = {v.cell_id: v for v in collect([req.baseline], say, allow_empty=True)}
        context = plan.get("context") or {}
        verdicts = annotate(verdicts, base, str(context.get("merge_base") or ""), str(context.get("base") or ""))
    return verdicts


def report(req: ReportRequest, env: Mapping[str, str], say: Callable[[str], None]) -> ReportOutcome:
    """Collect, compare and publish; GitHub is written only when a comment, check or issue is asked."""
    plan = _read_plan(req.plan, say)
    results, job_failures = _job_results(req.job_result, isinstance(plan.get("cells"), list))
    server, run_id = env.get("GITHUB_SERVER_URL", "https://github.com"), env.get("GITHUB_RUN_ID")
    named = req.repo or env.get("GITHUB_REPOSITORY", "")
    run_url = req.run_url or (f"{server}/{named}/actions/runs/{run_id}" if named and run_id else "")
    verdicts = _verdicts(req, plan, results, run_url, say)
    publishing = (req.comment and req.pr is not None) or req.check or req.tracking_issue
    ctx = Context(
        repo=repo_name(req.repo, env) if publishing or req.repo else "",
        pr=req.pr,
        sha=req.sha or env.get("GITHUB_SHA", ""),
        merge_base=req.merge_base or plan.get("context", {}).get("merge_base", ""),
        run_url=run_url,
        artifacts_url=req.artifacts_url or (f"{run_url}#artifacts" if run_url else ""),
        skipped=plan.get("skipped", {}),
        reasons=plan.get("reasons", {}),
        uncovered=plan.get("uncovered", {}),
        deferred=[d for d in plan.get("deferred") or [] if isinstance(d, dict)],
        unexecuted=[u for u in (plan.get("context") or {}).get("unexecuted") or [] if isinstance(u, str)],
        section=req.section or ("scheduled" if req.tracking_issue else ""),
        job_failures=job_failures,
        pre_existing_fails=req.pre_existing_fails,
    )
    summary = req.summary or (Path(env["GITHUB_STEP_SUMMARY"]) if env.get("GITHUB_STEP_SUMMARY") else None)
    # cancelled, and no cell finished on its own (a cell's own deadline still leaves a verdict): superseded
    superseded = "cancelled" in results.values() and all(
        v.failure_class in ("did_not_report", "interrupted") for v in verdicts
    )
    if superseded:  # a newer push cancelled this run: its half-run cells say nothing; keep the last result
        say("the run was cancelled (superseded by a newer run): the PR comment and check keep the last finished result")
    opts = PublishOptions(
        comment=req.comment and not superseded,
        check=req.check and not superseded,
        blocked_fails=not req.blocked_neutral,
        summary=summary,
        junit=req.junit,
        dry_run=req.dry_run,
        bot_login=req.bot_login,
        tracking_issue=req.tracking_issue and not superseded,
    )
    client = None if req.dry_run or not publishing else GitHubClient.from_env(env)
    done = publish(verdicts, ctx, opts, client, say)
    pre_existing = done["result"] == "Fail" and only_pre_existing(verdicts, ctx)
    return ReportOutcome(str(done["result"]), len(verdicts), superseded, pre_existing)
