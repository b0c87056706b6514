"""The reusable workflow's gate: only runs GitHub says are vetted reach the GPU runners."""

from __future__ import annotations

from dataclasses import replace

import pytest

from verl_e2e.cli.main import main
from verl_e2e.github.gate import Context, GateRefused, decide

REPO = "NVIDIA-NeMo/Megatron-Bridge"
SHA = "a" * 40
PUSH = Context("push", REPO, "refs/heads/pull-request/42", SHA, "", REPO, SHA, False)


def test_copy_pr_bot_push_is_allowed() -> None:
    assert "#42" in decide(PUSH)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"ref": "refs/heads/main"}, "only pull-request/<N> branches"),
        ({"head_sha": "b" * 40}, "but the caller asked to test"),
        ({"bridge_repository": "someone/fork"}, "cells only test the repository's own commits"),
        ({"head_sha": "main"}, "not a full 40-character SHA"),
        ({"event_name": "pull_request_target"}, "may not reach the GPU runners"),
        ({"event_name": "pull_request", "head_repository": "someone/fork", "same_repo_prs": True}, "fork code never"),
        ({"event_name": "pull_request", "head_repository": REPO}, "did not opt in"),
        ({"event_name": "workflow_run"}, "may not reach"),
    ],
    ids=[
        "other-branch",
        "other-sha",
        "other-repo",
        "not-a-sha",
        "pull-request-target",
        "fork-pr",
        "no-opt-in",
        "workflow-run",
    ],
)
def test_refusals(change: dict[str, object], reason: str) -> None:
    with pytest.raises(GateRefused, match=reason):
        decide(replace(PUSH, **change))  # type: ignore[arg-type]


def test_same_repo_pr_with_opt_in_and_default_branch_events() -> None:
    assert "opt-in" in decide(replace(PUSH, event_name="pull_request", head_repository=REPO, same_repo_prs=True))
    for event in ("issue_comment", "workflow_dispatch"):
        assert event in decide(replace(PUSH, event_name=event, ref="refs/heads/main"))


def test_gate_cli_reads_githubs_context_from_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    env = {
        "EVENT_NAME": "pull_request",
        "REPOSITORY": REPO,
        "REF": "refs/pull/7/merge",
        "SHA": SHA,
        "PR_HEAD_REPOSITORY": "someone/fork",
        "BRIDGE_REPOSITORY": REPO,
        "HEAD_SHA": SHA,
        "SAME_REPO_PRS": "true",
    }
    assert main(["gate"], env=env) == 1
    assert "refused" in capsys.readouterr().out
    assert main(["gate"], env=env | {"EVENT_NAME": "push", "REF": "refs/heads/pull-request/7"}) == 0
