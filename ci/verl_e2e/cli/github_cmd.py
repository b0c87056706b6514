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

from verl_e2e.cli.github_args import section_arg
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
        section=section_arg(args.section),
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
