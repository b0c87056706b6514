"""Events -> a RunRequest, or a refusal that says why. The trust decisions live here, not in YAML.

* push to `pull-request/<N>`: NVIDIA's copy-pr-bot pushes the PR head there once a maintainer vetted
  it (`/ok to test <sha>`), Megatron-Bridge's own CI convention: the pushed SHA runs.
* pull_request: drafts are skipped; every PR gets a plan; GPU cells only for a branch of this
  repository where the site opted in (a fork's code never runs by itself: a maintainer vets it).
* issue_comment: the first line must be `/verl-e2e [level=2,3] [family=x] [model=org/name] [sha=<40 hex>]
  [verl=<ref>]`; the commenter needs write permission (the REST permission endpoint, not
  author_association), checked before anything else: other commenters get no reaction and no reply.
  A fork PR needs `sha=`; the run uses exactly that SHA (refused when the PR head moved away from it),
  or, on a same-repository PR, the head at the time of the check. Commit dates are never trusted.
* workflow_dispatch: a full SHA (with an optional PR number for the comment) or a ref, levels,
  model and verl ref from the inputs.
The event payload is read as data; nothing from it is ever executed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import VerlE2EError, did_you_mean
from verl_e2e.github.client import GitHubClient, GitHubError
from verl_e2e.github.gate import PR_BRANCH

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


class Ignored(VerlE2EError):  # noqa: N818 - a decision, not a failure
    """A command from someone without write access: no reaction, no reply (no API budget spent on them)."""


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


def from_push(event: Mapping[str, Any], client: GitHubClient) -> RunRequest:
    """copy-pr-bot's push of a vetted PR head to `pull-request/<N>`: that exact SHA runs."""
    repo, ref, sha = event["repository"]["full_name"], str(event.get("ref", "")), str(event.get("after", ""))
    m = PR_BRANCH.fullmatch(ref)
    if m is None or not _VALUE["sha"].fullmatch(sha) or event.get("deleted"):
        return RunRequest(run=False, plan=False, reason=f"push to {ref[:80]}: not a pull-request/<N> branch head")
    number = int(m.group(1))
    pull = client.pull(repo, number)
    head_repo = (pull.get("head", {}).get("repo") or {}).get("full_name", "")
    return RunRequest(
        run=True,
        plan=True,
        reason=f"pull request #{number} vetted and pushed to pull-request/{number} at {sha[:12]}",
        repo=repo,
        pr=number,
        head_sha=sha,
        base_sha=base_tip(client, repo, pull),
        fork=head_repo != repo,
        requested_by=event.get("sender", {}).get("login", ""),
        source="push",
    )


def from_pull_request(event: Mapping[str, Any], same_repo_prs: bool = False) -> RunRequest:
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
                f"pull request from the fork {head_repo or '(deleted)'}: no GPU run until a maintainer reviews it and "
                f"names the commit they reviewed (`/ok to test <full SHA>` for copy-pr-bot, or `{COMMAND} "
                "sha=<full SHA>`)"
            ),
            **base,
        )
    if not same_repo_prs:
        return RunRequest(
            run=False,
            plan=True,
            reason=(
                f"GPU cells run when copy-pr-bot pushes pull-request/{pr['number']} (`/ok to test <sha>`), "
                f"or on `{COMMAND} sha=<sha>`"
            ),
            **base,
        )
    return RunRequest(run=True, plan=True, reason="pull request from a branch of this repository", **base)


def check_families(names: str) -> None:
    """Every family a request names must be one of matrix.yaml's: refused (and replied to) before any
    reaction, not accepted with a rocket and failed later in the plan job."""
    if not names:
        return
    known = load_matrix().families
    for name in names.split(","):
        if name not in known:
            raise CommandError(
                f"family={name} is not a model family of verl-e2e{did_you_mean(name, known)}; "
                "see `verl-e2e families` for the list (e.g. family=qwen3)"
            )


def from_comment(event: Mapping[str, Any], client: GitHubClient) -> RunRequest | None:
    """A RunRequest for a /verl-e2e comment on a PR; None when the comment is not for us.

    Raises Ignored for commenters without write access (checked first, one API call) and
    CommandError, replied to, for a writer's command that cannot run.
    """
    if event.get("action") != "created" or not event.get("issue", {}).get("pull_request"):
        return None
    comment = event["comment"]
    first = (comment.get("body") or "").lstrip().split("\n", 1)[0].split()
    if not first or first[0] != COMMAND:
        return None
    repo, number, user = (
        event["repository"]["full_name"],
        int(event["issue"]["number"]),
        comment["user"]["login"],
    )
    permission = client.permission(repo, user)
    if permission not in WRITE:
        raise Ignored(f"@{user} has {permission} permission; a /verl-e2e command needs write or above")
    command = parse_command(comment.get("body", ""))
    assert command is not None
    check_families(command.family)
    pull = client.pull(repo, number)
    head = pull["head"]["sha"]
    fork = (pull["head"].get("repo") or {}).get("full_name", "") != repo
    if fork and not command.sha:
        raise CommandError(
            f"this pull request comes from a fork: name the commit you reviewed, `{COMMAND} sha=<the full SHA you "
            "reviewed>` (copy it from the commit you read, not from this reply)"
        )
    if command.sha and command.sha != head:
        raise CommandError(
            f"the PR head is now {head[:12]}, not the {command.sha[:12]} the comment names; "
            "review the new commits and comment again with the SHA you reviewed (`/verl-e2e sha=<full sha>`)"
        )
    return RunRequest(
        run=True,
        plan=True,
        reason=f"requested by @{user} ({permission}) for {head[:12]}",
        repo=repo,
        pr=number,
        head_sha=head,
        base_sha=base_tip(client, repo, pull),
        levels=command.levels,
        family=command.family,
        model=command.model,
        verl_ref=command.verl,
        fork=fork,
        requested_by=user,
        source="issue_comment",
        comment_id=int(comment["id"]),
    )


def from_dispatch(event: Mapping[str, Any], client: GitHubClient) -> RunRequest:
    inputs = event.get("inputs") or {}
    repo = event["repository"]["full_name"]
    levels, model, verl, family = (inputs.get(k, "") for k in ("levels", "model", "verl_ref", "family"))
    for key, value in (("level", levels or "auto"), ("model", model), ("verl", verl), ("family", family)):
        if value and not _VALUE[key].fullmatch(value):
            raise CommandError(f"input {key}={value[:60]!r} is not valid; expected {EXPECTED[key]}")
    check_families(family)
    common = {
        "repo": repo,
        "levels": levels or "auto",
        "model": model,
        "verl_ref": verl,
        "family": family,
        "requested_by": event.get("sender", {}).get("login", ""),
        "source": "workflow_dispatch",
    }
    sha = str(inputs.get("sha") or "")
    if sha and not _VALUE["sha"].fullmatch(sha):
        raise CommandError(f"input sha={sha[:60]!r} is not valid; expected {EXPECTED['sha']}")
    if inputs.get("pr"):
        if not str(inputs["pr"]).isdigit():
            raise CommandError(f"input pr={inputs['pr']!r} is not a pull request number")
        if not sha:
            raise CommandError(
                "input pr needs sha: the full SHA of the head you reviewed (a PR number alone pins nothing)"
            )
        pull = client.pull(repo, int(inputs["pr"]))
        if pull["head"]["sha"] != sha:
            raise CommandError(f"PR #{inputs['pr']} head is {pull['head']['sha'][:12]}, not the sha given ({sha[:12]})")
        return RunRequest(
            run=True,
            plan=True,
            reason=f"manual dispatch of {sha[:12]} for PR #{inputs['pr']}",
            pr=int(inputs["pr"]),
            head_sha=sha,
            base_sha=base_tip(client, repo, pull),
            **common,
        )
    if sha:
        base = client.request("GET", f"/repos/{repo}/commits/{event['repository'].get('default_branch', 'main')}")
        return RunRequest(
            run=True,
            plan=True,
            reason=f"manual dispatch of {sha[:12]}",
            head_sha=sha,
            base_sha=base.json()["sha"],
            **common,
        )
    ref = inputs.get("ref") or event.get("ref", "")
    sha = client.request("GET", f"/repos/{repo}/commits/{ref}").json()["sha"]
    base = client.request("GET", f"/repos/{repo}/commits/{event['repository'].get('default_branch', 'main')}").json()
    return RunRequest(
        run=True, plan=True, reason=f"manual dispatch on {ref}", head_sha=sha, base_sha=base["sha"], **common
    )


def base_tip(client: GitHubClient, repo: str, pull: Mapping[str, Any]) -> str:
    """The base branch's commit now, not the PR's recorded `base.sha` (which GitHub leaves where the PR
    was last updated): a failure counts as pre-existing only where the merge base is this tip, so a PR
    branched from an old broken commit meets current main before it is excused."""
    base = pull["base"]
    ref = str(base.get("ref") or "")
    if ref and re.fullmatch(r"[A-Za-z0-9._/-]{1,200}", ref):
        try:
            sha = str(client.request("GET", f"/repos/{repo}/commits/{ref}").json().get("sha", ""))
        except (GitHubError, ValueError, AttributeError):
            sha = ""
        if _VALUE["sha"].fullmatch(sha):
            return sha
    return str(base["sha"])
