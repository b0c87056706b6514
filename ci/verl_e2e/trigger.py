"""Events -> a RunRequest, or a refusal that says why. The trust decisions live here, not in YAML.

* pull_request: drafts are skipped; a PR from a fork gets a plan but no GPU run (its code would run on
  self-hosted runners) until a maintainer comments `/verl-e2e`.
* issue_comment: the first line must be `/verl-e2e [level=2,3] [family=x] [model=org/name] [sha=<40 hex>]
  [verl=<ref>]`; the commenter needs write permission (asked through the REST permission endpoint, not
  author_association); the run uses the PR head current when the comment was written, or the SHA it
  names, and is refused when the PR moved after the comment (time of check vs. time of use).
* workflow_dispatch: a PR number or a ref, levels, model and verl ref from the inputs.
The event payload is read as data; nothing from it is ever executed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from verl_e2e.errors import VerlE2EError, did_you_mean
from verl_e2e.github import GitHubClient

COMMAND = "/verl-e2e"
KEYS = ("level", "levels", "family", "model", "sha", "verl")
WRITE = frozenset({"admin", "maintain", "write"})
_VALUE = {
    "level": re.compile(r"(?:auto|all|[0-5](?:,[0-5])*)"),
    "family": re.compile(r"[a-z0-9_]+(?:,[a-z0-9_]+)*"),
    "model": re.compile(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+"),
    "sha": re.compile(r"[0-9a-f]{40}"),
    "verl": re.compile(r"[A-Za-z0-9._/-]{1,100}"),
}
EXPECTED = {
    "level": "auto, all or levels 0-5 separated by commas (level=1,2)",
    "family": "family names from matrix.yaml (family=qwen,llama)",
    "model": "a Hugging Face id (model=Qwen/Qwen3-0.6B)",
    "sha": "the PR head's full 40-character SHA",
    "verl": "a verl branch, tag or commit",
}


class CommandError(VerlE2EError):
    """A /verl-e2e comment that cannot be run; the message is the reply's reason."""

    exit_code = 2


@dataclass(frozen=True)
class Command:
    levels: str = "auto"
    family: str = ""
    model: str = ""
    sha: str = ""
    verl: str = ""


@dataclass(frozen=True)
class RunRequest:
    run: bool  # run GPU cells
    plan: bool  # at least plan (and comment)
    reason: str
    repo: str = ""
    pr: int | None = None
    head_sha: str = ""
    base_sha: str = ""
    levels: str = "auto"
    family: str = ""
    model: str = ""
    verl_ref: str = ""
    fork: bool = False
    requested_by: str = ""
    source: str = ""
    comment_id: int | None = None

    def outputs(self) -> dict[str, str]:
        data = asdict(self)
        return {
            k: ("true" if v is True else "false" if v is False else "" if v is None else str(v))
            for k, v in data.items()
        }


def parse_command(body: str) -> Command | None:
    """The command on the comment's first line; None when the comment is not a command at all."""
    first = (body or "").lstrip().split("\n", 1)[0].strip()
    tokens = first.split()
    if not tokens or tokens[0] != COMMAND:
        return None
    seen: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep:
            raise CommandError(f"`{token[:40]}` is not key=value")
        key = "level" if key == "levels" else key
        if key not in KEYS:
            raise CommandError(f"unknown option `{key[:30]}`{did_you_mean(key, KEYS)}")
        if key in seen:
            raise CommandError(f"`{key}` is given twice")
        if not _VALUE[key].fullmatch(value):
            raise CommandError(f"`{key}={value[:60]}` is not valid; expected {EXPECTED[key]}")
        seen[key] = value
    return Command(
        levels=seen.get("level", "auto"),
        family=seen.get("family", ""),
        model=seen.get("model", ""),
        sha=seen.get("sha", ""),
        verl=seen.get("verl", ""),
    )


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def from_pull_request(event: Mapping[str, Any]) -> RunRequest:
    pr = event["pull_request"]
    repo = event["repository"]["full_name"]
    base = {
        "repo": repo,
        "pr": int(pr["number"]),
        "head_sha": pr["head"]["sha"],
        "base_sha": pr["base"]["sha"],
        "requested_by": event.get("sender", {}).get("login", ""),
        "source": "pull_request",
    }
    if pr.get("draft"):
        return RunRequest(run=False, plan=False, reason="draft pull request: marked ready for review it runs", **base)
    head_repo = (pr["head"].get("repo") or {}).get("full_name", "")
    if head_repo != repo:
        return RunRequest(
            run=False,
            plan=True,
            fork=True,
            reason=(
                f"pull request from the fork {head_repo or '(deleted)'}: no GPU run until a maintainer comments "
                f"`{COMMAND}` (optionally with sha=<head sha>)"
            ),
            **base,
        )
    return RunRequest(run=True, plan=True, reason="pull request from this repository", **base)


def from_comment(event: Mapping[str, Any], client: GitHubClient) -> RunRequest | None:
    """A RunRequest for a /verl-e2e comment on a PR; None when the comment is not for us."""
    if event.get("action") != "created" or not event.get("issue", {}).get("pull_request"):
        return None
    comment = event["comment"]
    command = parse_command(comment.get("body", ""))
    if command is None:
        return None
    repo, number, user = (
        event["repository"]["full_name"],
        int(event["issue"]["number"]),
        comment["user"]["login"],
    )
    common = {
        "repo": repo,
        "pr": number,
        "requested_by": user,
        "source": "issue_comment",
        "comment_id": int(comment["id"]),
    }
    permission = client.permission(repo, user)
    if permission not in WRITE:
        raise CommandError(f"@{user} has {permission} permission here; running on GPU runners needs write or above")
    pull = client.pull(repo, number)
    head = pull["head"]["sha"]
    if command.sha and command.sha != head:
        raise CommandError(
            f"the PR head is now {head[:12]}, not the {command.sha[:12]} the comment names; "
            "check the new commits and comment again"
        )
    if not command.sha:
        commit = client.request("GET", f"/repos/{repo}/commits/{head}").json()
        committed = commit.get("commit", {}).get("committer", {}).get("date")
        if committed and _time(committed) > _time(comment["created_at"]):
            raise CommandError(
                f"the PR moved after the comment (head {head[:12]} is newer); comment again, or "
                f"name the commit with sha={head}"
            )
    return RunRequest(
        run=True,
        plan=True,
        reason=f"requested by @{user} ({permission})",
        head_sha=head,
        base_sha=pull["base"]["sha"],
        levels=command.levels,
        family=command.family,
        model=command.model,
        verl_ref=command.verl,
        **common,
    )


def from_dispatch(event: Mapping[str, Any], client: GitHubClient) -> RunRequest:
    inputs = event.get("inputs") or {}
    repo = event["repository"]["full_name"]
    levels, model, verl, family = (inputs.get(k, "") for k in ("levels", "model", "verl_ref", "family"))
    for key, value in (("level", levels or "auto"), ("model", model), ("verl", verl), ("family", family)):
        if value and not _VALUE[key].fullmatch(value):
            raise CommandError(f"input {key}={value[:60]!r} is not valid; expected {EXPECTED[key]}")
    common = {
        "repo": repo,
        "levels": levels or "auto",
        "model": model,
        "verl_ref": verl,
        "family": family,
        "requested_by": event.get("sender", {}).get("login", ""),
        "source": "workflow_dispatch",
    }
    if inputs.get("pr"):
        if not str(inputs["pr"]).isdigit():
            raise CommandError(f"input pr={inputs['pr']!r} is not a pull request number")
        pull = client.pull(repo, int(inputs["pr"]))
        return RunRequest(
            run=True,
            plan=True,
            reason="manual dispatch",
            pr=int(inputs["pr"]),
            head_sha=pull["head"]["sha"],
            base_sha=pull["base"]["sha"],
            **common,
        )
    ref = inputs.get("ref") or event.get("ref", "")
    sha = client.request("GET", f"/repos/{repo}/commits/{ref}").json()["sha"]
    base = client.request("GET", f"/repos/{repo}/commits/{event['repository'].get('default_branch', 'main')}").json()
    return RunRequest(
        run=True, plan=True, reason=f"manual dispatch on {ref}", head_sha=sha, base_sha=base["sha"], **common
    )
