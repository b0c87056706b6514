"""Publish a report: the sticky PR comment, the job summary, the aggregate check, a merged JUnit file.

The comment is the one-screen view; the job summary and the check run hold every cell in full, so
what the comment leaves out is one click away (the comment links the run) and never lost.

All GitHub I/O goes through one GitHubClient. The comment is found by its marker and edited in
place (never a second one), and left alone when its text is unchanged. Where check runs are not
allowed (a token without `checks: write`), a commit status carries the same conclusion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError
from verl_e2e.github.client import ForbiddenError, GitHubClient
from verl_e2e.judge import junit
from verl_e2e.judge.verdict import Verdict
from verl_e2e.report import comment as report
from verl_e2e.report.comment import Context
from verl_e2e.report.fullsummary import render_full


@dataclass(frozen=True)
class PublishOptions:
    comment: bool = True
    check: bool = True
    blocked_fails: bool = True  # a neutral check satisfies a required one: Blocked fails unless a site opts out
    summary: Path | None = None
    junit: Path | None = None
    dry_run: bool = False
    bot_login: str = "github-actions[bot]"  # the sticky comment is this account's, never someone else's
    tracking_issue: bool = False  # the scheduled run: keep one open issue with the latest report


def upsert_comment(
    client: GitHubClient, repo: str, pr: int, body: str, bot_login: str = "github-actions[bot]", *, section: str = ""
) -> tuple[str, int]:
    """Create the comment, or update ours (marker and author); ("unchanged", id) when nothing differs.

    Anyone can post a comment holding the marker; only the bot's own one is edited, so a planted
    marker neither hijacks the report nor makes an edit fail before the check is written.
    """
    existing = next(
        (
            c
            for c in client.comments(repo, pr)
            if report.marker(section) in (c.get("body") or "").splitlines()
            and (c.get("user") or {}).get("login") == bot_login
        ),
        None,
    )
    if existing is None:
        return "created", int(client.create_comment(repo, pr, body)["id"])
    if existing.get("body") == body:
        return "unchanged", int(existing["id"])
    return "updated", int(client.update_comment(repo, int(existing["id"]), body)["id"])


TRACKING_LABEL = "verl-e2e-scheduled"
TRACKING_TITLE = "verl-e2e: scheduled run on the default branch"


def upsert_issue(client: GitHubClient, repo: str, body: str, bot_login: str = "github-actions[bot]") -> tuple[str, int]:
    """The scheduled run's tracking issue: one open issue (label, marker and author), updated in place.

    Like the sticky comment, an issue someone else opened with the marker is never edited."""
    mine = (
        i
        for i in client.issues(repo, TRACKING_LABEL)
        if report.marker("scheduled") in (i.get("body") or "").splitlines()
        and (i.get("user") or {}).get("login") == bot_login
    )
    existing = next(mine, None)
    if existing is None:
        return "created", int(client.create_issue(repo, TRACKING_TITLE, body, TRACKING_LABEL)["number"])
    if existing.get("body") == body:
        return "unchanged", int(existing["number"])
    return "updated", int(client.update_issue(repo, int(existing["number"]), body)["number"])


def publish(
    verdicts: Sequence[Verdict],
    ctx: Context,
    opts: PublishOptions,
    client: GitHubClient | None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    body = report.render(verdicts, ctx)
    done: dict[str, Any] = {"result": report.overall(verdicts, ctx)}
    if opts.summary is not None:
        with opts.summary.open("a", encoding="utf-8") as fh:
            fh.write(render_full(verdicts, ctx))  # the comment's top and every cell in full
        done["summary"] = str(opts.summary)
    if opts.junit is not None:
        opts.junit.write_text(junit.render(verdicts), encoding="utf-8")
        done["junit"] = str(opts.junit)
    if opts.dry_run:
        if opts.comment and ctx.pr is not None:
            say(f"would upsert the comment on {ctx.repo}#{ctx.pr} ({len(body)} characters):\n{body}")
        if opts.check:
            payload = report.check_run(verdicts, ctx, blocked_fails=opts.blocked_fails)
            title = payload["output"]["title"]
            say(f"would POST /repos/{ctx.repo}/check-runs: {payload['conclusion']} - {title}")
        return done
    if (opts.comment or opts.check or opts.tracking_issue) and client is None:
        raise UsageError("report: publishing needs a GitHub token (GITHUB_TOKEN); or pass --dry-run")
    assert client is not None or not (opts.comment or opts.check)
    if opts.check and client is not None:  # the check first: a failing comment never leaves it unwritten
        if not ctx.sha:
            raise UsageError("report: --check needs the head commit (--sha or GITHUB_SHA)")
        try:
            check = client.create_check_run(ctx.repo, report.check_run(verdicts, ctx, blocked_fails=opts.blocked_fails))
            done["check_run"] = check.get("id")
            say(f"check run verl-e2e: {check.get('conclusion', 'completed')}")
        except ForbiddenError:
            client.create_status(
                ctx.repo, ctx.sha, report.commit_status(verdicts, ctx, blocked_fails=opts.blocked_fails)
            )
            done["status"] = "created"
            say("check runs are not allowed for this token; set a commit status instead")
    if opts.tracking_issue and client is not None:
        action, number = upsert_issue(client, ctx.repo, body, opts.bot_login)
        done["issue"] = {"action": action, "number": number}
        say(f"tracking issue {action}: {ctx.repo}#{number}")
    if opts.comment and ctx.pr is not None and client is not None:
        action, comment_id = upsert_comment(client, ctx.repo, ctx.pr, body, opts.bot_login, section=ctx.section)
        done["comment"] = {"action": action, "id": comment_id}
        say(f"comment {action} on {ctx.repo}#{ctx.pr}")
    return done
