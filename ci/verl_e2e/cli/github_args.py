"""The GitHub commands' arguments (report, react, reply, trigger, compare, gate, fork-notice), apart from
what they do (`github_cmd`): building the CLI's parser then loads argparse alone, and `verl-e2e plan`
does not import the GitHub client, the judge and the runner behind those commands."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError


def section_arg(value: str) -> str:
    """--section's value: a comment-section id, which ends up in a hidden HTML marker."""
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
