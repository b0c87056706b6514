"""The reusable workflow's first job: which runs may reach the GPU runners, decided from GitHub's context.

A caller workflow is a file a pull request can edit (on `pull_request` the workflow comes from the
PR itself), so nothing it passes as an input is trusted here. The decision reads only what GitHub
sets for the run and the caller cannot forge: the event name, the repository, the ref and SHA that
triggered it, and for `pull_request` the repository the head comes from. Allowed:

* `push` to `pull-request/<N>` in the repository itself: the branch NVIDIA's copy-pr-bot creates
  once a maintainer vetted the head (`/ok to test <sha>`), the convention Megatron-Bridge's CI uses;
  the commit under test must be the pushed one;
* `issue_comment` and `workflow_dispatch`: their workflow comes from the default branch, and the
  trigger already checked the commenter's or dispatcher's write permission and pinned the SHA;
* `schedule`: GitHub runs it from the default branch's workflow (the scheduled full run);
* `pull_request` only from a branch of the repository itself, and only where the site opted in.
Everything else (forks, `pull_request_target`, other repositories, other branches) is refused.
The warm-up workflow (`--warmup`) runs no PR code at all, so it allows only `schedule`, and
`workflow_dispatch` on the default branch.

What the gate itself runs is not the caller's choice either: the reusable workflow installs verl-e2e
from its own commit, read from GitHub's OIDC claims (`job_workflow_sha`), before this runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from verl_e2e.errors import VerlE2EError

PR_BRANCH = re.compile(r"refs/heads/pull-request/([0-9]+)")
FULL_SHA = re.compile(r"[0-9a-f]{40}")


class GateRefused(VerlE2EError):  # noqa: N818 - a refusal, not a crash
    exit_code = 1


@dataclass(frozen=True)
class Context:
    """What GitHub says about the run (the `github` context), plus the inputs the caller passed."""

    event_name: str
    repository: str
    ref: str
    sha: str
    head_repository: str  # github.event.pull_request.head.repo.full_name ("" outside pull_request)
    bridge_repository: str  # input
    head_sha: str  # input
    same_repo_prs: bool  # input: the site's opt-in for same-repository pull_request runs
    default_branch: str = ""  # github.event.repository.default_branch ("" where the payload has none)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Context:
        return cls(
            event_name=env.get("EVENT_NAME", ""),
            repository=env.get("REPOSITORY", ""),
            ref=env.get("REF", ""),
            sha=env.get("SHA", ""),
            head_repository=env.get("PR_HEAD_REPOSITORY", ""),
            bridge_repository=env.get("BRIDGE_REPOSITORY", ""),
            head_sha=env.get("HEAD_SHA", ""),
            same_repo_prs=env.get("SAME_REPO_PRS", "false") == "true",
            default_branch=env.get("DEFAULT_BRANCH", ""),
        )


def decide(ctx: Context) -> str:
    """Why this run may use the GPU runners; raises GateRefused with the reason otherwise."""
    if not ctx.repository or ctx.bridge_repository != ctx.repository:
        raise GateRefused(
            f"the commit under test is in {ctx.bridge_repository or '(none)'}, but this run belongs to "
            f"{ctx.repository or '(unknown)'}; cells only test the repository's own commits"
        )
    if not FULL_SHA.fullmatch(ctx.head_sha):
        raise GateRefused(f"head_sha {ctx.head_sha[:50]!r} is not a full 40-character SHA")
    if ctx.event_name == "push":
        m = PR_BRANCH.fullmatch(ctx.ref)
        if m is None:
            raise GateRefused(f"push to {ctx.ref}: only pull-request/<N> branches (copy-pr-bot) run cells")
        if ctx.head_sha != ctx.sha:
            raise GateRefused(f"push of {ctx.sha[:12]}, but the caller asked to test {ctx.head_sha[:12]}")
        return f"pull request #{m.group(1)}, vetted by copy-pr-bot at {ctx.sha[:12]}"
    if ctx.event_name in ("issue_comment", "workflow_dispatch"):
        return f"{ctx.event_name} (default-branch workflow; the trigger checked write permission and the SHA)"
    if ctx.event_name == "schedule":
        return "scheduled run (GitHub runs it from the default branch's workflow)"
    if ctx.event_name == "pull_request":
        if ctx.head_repository != ctx.repository:
            raise GateRefused(
                f"pull request from {ctx.head_repository or 'a deleted fork'}: fork code never reaches the GPU "
                "runners by itself; a maintainer vets it (`/ok to test <sha>` or `/verl-e2e sha=<sha>`)"
            )
        if not ctx.same_repo_prs:
            raise GateRefused("same-repository pull requests do not run cells here (the site did not opt in)")
        return "pull request from a branch of this repository (site opt-in)"
    raise GateRefused(f"event {ctx.event_name or '(none)'} may not reach the GPU runners")


def decide_warmup(ctx: Context) -> str:
    """The warm-up fills a runner's cache and runs no PR code: only a schedule or a dispatch from the
    default branch may start it (its runner labels come from the default branch's caller then)."""
    if ctx.event_name == "schedule":
        return "scheduled warm-up (default branch)"
    if ctx.event_name == "workflow_dispatch":
        if not ctx.default_branch or ctx.ref != f"refs/heads/{ctx.default_branch}":
            raise GateRefused(
                f"warm-up dispatched on {ctx.ref or '(no ref)'}: only the default branch "
                f"({ctx.default_branch or 'unknown'}) may start it; dispatch it from there"
            )
        return f"warm-up dispatched on the default branch {ctx.default_branch}"
    raise GateRefused(f"event {ctx.event_name or '(none)'} may not start the warm-up (schedule or dispatch only)")
