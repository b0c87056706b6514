"""The commands that talk to GitHub: `report`, `trigger`, `react`, `reply`, `fork-notice`.

Exit codes stay in `cli.main`; tokens come from the environment mapping passed in.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from verl_e2e.cli.progress import Progress
from verl_e2e.errors import UsageError
from verl_e2e.github.client import GitHubClient, repo_name
from verl_e2e.github.gate import Context as GateContext
from verl_e2e.github.gate import GateRefused, decide_warmup
from verl_e2e.github.gate import decide as gate_decide
from verl_e2e.github.trigger import (
    CommandError,
    Ignored,
    RunRequest,
    from_comment,
    from_dispatch,
    from_pull_request,
    from_push,
)
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.plan.contract import append_outputs
from verl_e2e.report.notices import fork_notice, refusal
from verl_e2e.report.publish import upsert_comment
from verl_e2e.report.regression import compare
from verl_e2e.report.reporting import ReportRequest, report
from verl_e2e.run.launch import sayer as _sayer


def _section(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9-]{0,64}", value):
        raise UsageError(f"--section {value[:40]!r}: expected lowercase letters, digits and '-' (e.g. request-123)")
    return value


def add_commands(sub: Any) -> None:
    rep = sub.add_parser(
        "report",
        help="publish run dirs: one sticky PR comment, the job summary, the aggregate check, merged JUnit",
        description="Aggregate every cell's verdict under RUN_DIR... and publish them. Repository, commit "
        "and run links default to the GitHub Actions environment (GITHUB_REPOSITORY, GITHUB_SHA, ...).",
    )
    rep.add_argument(
        "run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run dirs, or directories holding them (artifacts)"
    )
    rep.add_argument("--plan", type=Path, help="plan.json, for the levels the rules skipped")
    rep.add_argument(
        "--section",
        default="",
        help="which PR comment this run owns: empty for the automatic run's, e.g. request-<comment id> for a "
        "/verl-e2e comment's own (a request never overwrites another run's report)",
    )
    rep.add_argument("--repo", help="owner/name (default: GITHUB_REPOSITORY)")
    rep.add_argument("--pr", type=int, help="pull request number (no comment without one)")
    rep.add_argument("--sha", help="head commit (default: GITHUB_SHA)")
    rep.add_argument("--merge-base", help="merge base shown in the headline")
    rep.add_argument("--comment", action=argparse.BooleanOptionalAction, default=True, help="upsert the PR comment")
    rep.add_argument("--check", action=argparse.BooleanOptionalAction, default=True, help="create the check run")
    rep.add_argument(
        "--tracking-issue",
        action="store_true",
        help="the scheduled run: keep the report in one open issue (label verl-e2e-scheduled), updated in place",
    )
    rep.add_argument(
        "--blocked-neutral",
        action="store_true",
        help="a Blocked result gives a neutral check (site opt-in); by default it fails the check, since a "
        "neutral check satisfies a required one",
    )
    rep.add_argument("--blocked-fails", action="store_true", help=argparse.SUPPRESS)  # the default now
    rep.add_argument("--summary", type=Path, help="append the markdown here (default: GITHUB_STEP_SUMMARY)")
    rep.add_argument("--junit", type=Path, help="write the merged JUnit file here")
    rep.add_argument("--run-url", help="link to the workflow run (default: from the Actions environment)")
    rep.add_argument("--artifacts-url", help="link to the uploaded run dirs")
    rep.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    rep.add_argument(
        "--baseline",
        type=Path,
        metavar="RUNS_OF_BASE",
        help="run dirs of the same cells on the merge base: each failure is new, already failing, or changed",
    )
    rep.add_argument(
        "--pre-existing-fails",
        action="store_true",
        help="a failure already on the merge base fails the check too (default: it does not, and says so)",
    )
    rep.add_argument(
        "--bot-login",
        default="github-actions[bot]",
        help="the account whose marker comment is edited (the token's; default github-actions[bot])",
    )
    rep.add_argument(
        "--job-result",
        action="append",
        default=[],
        metavar="JOB=RESULT",
        help="a workflow job's result (needs.<job>.result); failure or cancelled fails the report",
    )

    react = sub.add_parser(
        "react",
        help="react to a /verl-e2e comment (eyes on receipt, rocket on start)",
        description="Add a reaction to a pull request comment through the REST API (GITHUB_TOKEN): the comment "
        "workflow says it saw a /verl-e2e command (eyes) and that the run started (rocket).",
    )
    react.add_argument("comment_id", type=int, help="the comment's id (github.event.comment.id)")
    react.add_argument(
        "content",
        choices=("eyes", "rocket", "confused", "+1", "-1", "hooray", "heart", "laugh"),
        help="the reaction",
    )
    react.add_argument("--repo", help="owner/name (default: GITHUB_REPOSITORY)")

    reply = sub.add_parser(
        "reply",
        help="refuse a /verl-e2e comment: a confused reaction and a reply with the usage",
        description="Answer a /verl-e2e comment that cannot run: a confused reaction on it and a reply that "
        "quotes the reason literally and shows the command's usage.",
    )
    reply.add_argument("--pr", type=int, required=True, help="the pull request's number")
    reply.add_argument("--comment-id", type=int, required=True, help="the refused comment's id")
    reply.add_argument("--reason", required=True, help="what was wrong")
    reply.add_argument("--repo", help="owner/name (default: GITHUB_REPOSITORY)")

    trig = sub.add_parser(
        "trigger",
        help="decide from a GitHub event whether and what to run (permission and head-SHA checks included)",
        description="Read the event payload (as data) and write run, plan, head_sha, base_sha, pr, levels, family, "
        "model, verl_ref, fork, reason to $GITHUB_OUTPUT. A refused /verl-e2e comment gets a confused reaction "
        "and a reply that says why; an accepted one gets eyes.",
    )
    trig.add_argument(
        "--event-name", required=True, choices=("push", "pull_request", "issue_comment", "workflow_dispatch")
    )
    trig.add_argument("--event", type=Path, required=True, help="the event payload (GITHUB_EVENT_PATH)")
    trig.add_argument(
        "--same-repo-prs",
        action="store_true",
        help="pull_request from a branch of this repository runs cells (site opt-in; forks never do)",
    )

    cmp = sub.add_parser(
        "compare",
        help="compare a cell's run dir with the same cell run on the merge base",
        description="Re-judge both run dirs and say whether the failure is new in the change, already failing "
        "on the base (same failure class and first exception), a changed failure, or unknown.",
    )
    cmp.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the cell's run dir on the change")
    cmp.add_argument(
        "base_run_dir", type=Path, metavar="BASE_RUN_DIR", help="the same cell's run dir on the merge base"
    )

    gate = sub.add_parser(
        "gate",
        help="the reusable workflow's first job: refuse any run that may not reach the GPU runners",
        description="Decide from GitHub's own context (EVENT_NAME, REPOSITORY, REF, SHA, PR_HEAD_REPOSITORY) and "
        "the caller's BRIDGE_REPOSITORY, HEAD_SHA and SAME_REPO_PRS whether this run may use the GPU runners. "
        "Exit 0 with the reason, or 1 with the refusal.",
    )
    gate.add_argument(
        "--warmup",
        action="store_true",
        help="the warm-up's gate: only schedule, or workflow_dispatch on DEFAULT_BRANCH",
    )

    notice = sub.add_parser(
        "fork-notice",
        help="comment on a fork's pull request how a maintainer starts the run (the workflow_run publisher)",
        description="Post (or update) the sticky note on a fork's pull request: its code does not run on the GPU "
        "runners until a maintainer reviews it and comments /verl-e2e sha=<the SHA they reviewed>. The notice "
        "file comes from the fork's run and is checked against the API before anything is posted.",
    )
    notice.add_argument("notice", type=Path, help="fork-notice.json from the fork's run (read as data)")
    notice.add_argument("--head-sha", required=True, help="github.event.workflow_run.head_sha")
    notice.add_argument("--repo", help="owner/name (default: GITHUB_REPOSITORY)")


def _repo(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    return repo_name(args.repo, env)


def cmd_report(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO, progress: Progress) -> int:
    request = ReportRequest(
        run_dirs=args.run_dirs,
        plan=args.plan,
        job_result=args.job_result,
        repo=args.repo,
        pr=args.pr,
        sha=args.sha,
        merge_base=args.merge_base,
        comment=args.comment,
        check=args.check,
        tracking_issue=args.tracking_issue,
        blocked_neutral=args.blocked_neutral,
        pre_existing_fails=args.pre_existing_fails,
        summary=args.summary,
        junit=args.junit,
        run_url=args.run_url,
        artifacts_url=args.artifacts_url,
        dry_run=args.dry_run,
        bot_login=args.bot_login,
        baseline=args.baseline,
        section=_section(args.section),
    )
    with progress.step("judging every run dir again, then publishing"):
        done = report(request, env, _sayer(stdout))
    stdout.write(f"verl-e2e: {done.result} ({done.cells} cells)\n")
    if done.superseded:
        return 0
    if done.only_pre_existing:
        stdout.write("verl-e2e: every failure is already on the merge base; not counted against the change\n")
        return 0
    return 0 if done.result in ("Pass", "Skipped") else 1


def cmd_compare(args: argparse.Namespace, stdout: TextIO, progress: Progress) -> int:
    with progress.step(f"judging {args.run_dir} and {args.base_run_dir}"):
        here, base = judge_run_dir(args.run_dir), judge_run_dir(args.base_run_dir)
    result = compare(here, base)
    if result is None:
        stdout.write(f"{here.cell_id}: Pass here (the base: {base.result}); nothing to compare\n")
        return 0
    stdout.write(f"{here.cell_id}: {result['outcome']} - {result['reason']}\n")
    stdout.write(f"  this run: {here.result}, {here.failure_class}: {here.exception or 'no exception'}\n")
    stdout.write(f"  the base: {base.result}, {base.failure_class}: {base.exception or 'no exception'}\n")
    return 0


def cmd_react(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    GitHubClient.from_env(env).react(_repo(args, env), args.comment_id, args.content)
    return 0


def cmd_reply(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO) -> int:
    client, repo = GitHubClient.from_env(env), _repo(args, env)
    client.react(repo, args.comment_id, "confused")
    created = client.create_comment(repo, args.pr, refusal(args.reason))
    stdout.write(f"verl-e2e: replied on {repo}#{args.pr} (comment {created.get('id')})\n")
    return 0


def cmd_trigger(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO) -> int:
    try:
        event = json.loads(args.event.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"trigger: --event {args.event}: unreadable event payload ({exc}); pass GITHUB_EVENT_PATH"
        ) from None
    if not isinstance(event, dict):
        raise UsageError(f"trigger: --event {args.event}: expected a JSON object (GitHub's event payload)")
    try:
        request = _request(args, event, env)
    except (KeyError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"trigger: the {args.event_name} payload in {args.event} lacks {exc} (or it has the wrong type); "
            "pass the event file GitHub wrote for this event (GITHUB_EVENT_PATH)"
        ) from None
    if request is None:
        request = RunRequest(run=False, plan=False, reason="not a /verl-e2e command on a pull request")
    outputs = request.outputs()
    if env.get("GITHUB_OUTPUT"):
        append_outputs(Path(env["GITHUB_OUTPUT"]), outputs)
    stdout.write(f"verl-e2e: run={outputs['run']} plan={outputs['plan']}: {request.reason}\n")
    return 0


def _request(args: argparse.Namespace, event: dict[str, Any], env: Mapping[str, str]) -> RunRequest | None:
    """The run request of one event payload (replies to a refused comment on the way)."""
    request: RunRequest | None
    if args.event_name == "pull_request":
        request = from_pull_request(event, same_repo_prs=args.same_repo_prs)
    elif args.event_name == "push":
        request = from_push(event, GitHubClient.from_env(env))
    else:
        client = GitHubClient.from_env(env)
        try:
            request = (
                from_comment(event, client) if args.event_name == "issue_comment" else from_dispatch(event, client)
            )
        except Ignored as exc:
            request = RunRequest(run=False, plan=False, reason=f"ignored: {exc}", source="issue_comment")
        except CommandError as exc:
            if args.event_name != "issue_comment":
                raise
            repo, number, comment_id = (
                event["repository"]["full_name"],
                event["issue"]["number"],
                event["comment"]["id"],
            )
            client.react(repo, int(comment_id), "confused")
            client.create_comment(repo, int(number), refusal(str(exc)))
            request = RunRequest(
                run=False,
                plan=False,
                reason=f"refused: {exc}",
                repo=repo,
                pr=int(number),
                comment_id=int(comment_id),
                source="issue_comment",
            )
        else:
            if request is not None and request.comment_id is not None:
                client.react(request.repo, request.comment_id, "eyes")
    return request


def cmd_gate(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO) -> int:
    decide = decide_warmup if args.warmup else gate_decide
    try:
        reason = decide(GateContext.from_env(env))
    except GateRefused as exc:
        stdout.write(f"verl-e2e gate: refused: {exc}\n")
        if env.get("GITHUB_STEP_SUMMARY"):
            with Path(env["GITHUB_STEP_SUMMARY"]).open("a", encoding="utf-8") as fh:
                fh.write(f"verl-e2e did not run on the GPU runners: {exc}\n")
        return 1
    stdout.write(f"verl-e2e gate: allowed: {reason}\n")
    return 0


def cmd_fork_notice(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO) -> int:
    """Post the plan-only note on a fork PR. The artifact came from untrusted code: check everything."""
    try:
        data = json.loads(args.notice.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"fork-notice: {args.notice}: unreadable ({exc})") from None
    pr, sha = str(data.get("pr", "")), str(data.get("head_sha", ""))
    if not pr.isdigit() or not re.fullmatch(r"[0-9a-f]{40}", sha) or sha != args.head_sha:
        raise UsageError("fork-notice: the notice does not name this run's pull request and head; nothing posted")
    client, repo = GitHubClient.from_env(env), _repo(args, env)
    pull = client.pull(repo, int(pr))
    if pull["head"]["sha"] != sha:
        raise UsageError(f"fork-notice: PR #{pr} is now at {pull['head']['sha'][:12]}, not {sha[:12]}; nothing posted")
    action, _ = upsert_comment(client, repo, int(pr), fork_notice(sha))
    stdout.write(f"verl-e2e: fork notice {action} on {repo}#{pr}\n")
    return 0
