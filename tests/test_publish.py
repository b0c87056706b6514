"""Publishing against a loopback GitHub that validates every request with GitHub's OpenAPI description."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from verl_e2e.config.matrix import Matrix
from verl_e2e.github.client import ForbiddenError, GitHubClient, RateLimitError, UnprocessableError
from verl_e2e.judge.verdict import Check, Deliverable, Verdict
from verl_e2e.report.comment import CHECK_SUMMARY_LIMIT, LIMIT, MARKER, Context, check_run, marker, render
from verl_e2e.report.publish import TRACKING_LABEL, PublishOptions, publish, upsert_comment

from . import verl_log as V
from .github_server import Spec, serve
from .rundirs import cell_for, write_run_dir

REPO = "NVIDIA-NeMo/Megatron-Bridge"


@pytest.fixture(scope="session")
def spec() -> Spec:
    return Spec()


@pytest.fixture
def gh(spec: Spec):
    with serve(spec) as (url, state):
        sleeps: list[float] = []
        client = GitHubClient(token="ghs_secret_token", api_url=url, sleep=sleeps.append)
        yield client, state, sleeps
        assert state.violations == [], state.violations


def verdict(cell_id: str, result: str, level: int = 0, family: str = "qwen") -> Verdict:
    dl = [
        Deliverable(n, "Pass" if result == "Pass" else result, "detail")
        for n in (
            "Bridge-side checks",
            "Local Bridge import in verl",
            "verl Megatron backend run",
            "Requested variants",
            "Log capture",
        )
    ]
    return Verdict(
        cell_id=cell_id,
        level=level,
        variant="lora-ddp",
        family=family,
        model="Qwen/Qwen2.5-0.5B",
        result=result,
        headline=f"{result} - Level {level} of Qwen: KeyError: 'x'" if result != "Pass" else "Pass - ok",
        requested=f"Level {level} (lora-ddp)",
        deliverables=dl,
        checks=[Check("exit_zero", "Pass", "ok")],
        key_lines=["VANILLA_MBRIDGE=False", "training/global_step:1"],
        limitations=["no convergence claim"],
        follow_ups=["none"],
        failure_class="none" if result == "Pass" else "runtime",
        failed_phase=None,
        duration_s=754.0,
    )


def test_comment_created_then_updated_then_left_alone(gh) -> None:
    client, state, _ = gh
    assert upsert_comment(client, REPO, 7, MARKER + "\nfirst")[0] == "created"
    action, cid = upsert_comment(client, REPO, 7, MARKER + "\nsecond")
    assert action == "updated" and len(state.comments[7]) == 1 and state.comments[7][0]["body"].endswith("second")
    patches = sum(1 for m, _ in state.requests if m == "PATCH")
    assert upsert_comment(client, REPO, 7, MARKER + "\nsecond") == ("unchanged", cid)
    assert sum(1 for m, _ in state.requests if m == "PATCH") == patches  # nothing sent when nothing changed


def test_marker_found_among_150_comments_over_pages(gh) -> None:
    client, state, _ = gh
    state.comments[9] = [{"id": i, "body": f"comment {i}", "user": {"login": "x"}} for i in range(1, 151)]
    state.comments[9][120].update(body=MARKER + "\nold report", user={"login": "github-actions[bot]"})
    assert upsert_comment(client, REPO, 9, MARKER + "\nnew report") == ("updated", 121)
    assert len(state.comments[9]) == 150
    assert any("page=2" in path for _, path in state.requests)


def test_a_marker_planted_by_someone_else_is_not_our_comment(gh) -> None:
    """The attack: an outsider posts the hidden marker first, hoping the report edits (or fails on) it."""
    client, state, _ = gh
    state.comments[9] = [{"id": 5, "body": MARKER + "\n## ✅ verl-e2e: Pass (forged)", "user": {"login": "mallory"}}]
    action, comment_id = upsert_comment(client, REPO, 9, MARKER + "\nthe real report")
    assert action == "created" and comment_id != 5
    assert state.comments[9][0]["body"].endswith("(forged)")  # left alone, and ours is separate


def test_retries_502_then_succeeds(gh) -> None:
    client, state, sleeps = gh
    state.faults.append((502, {}, {"message": "Server Error"}))
    assert client.create_comment(REPO, 3, "hello")["body"] == "hello"
    assert sleeps == [1.0] and len(state.comments[3]) == 1


def test_secondary_rate_limit_waits_retry_after(gh) -> None:
    client, state, sleeps = gh
    state.faults.append((403, {"retry-after": "7"}, {"message": "You have exceeded a secondary rate limit."}))
    client.react(REPO, 55, "eyes")
    assert sleeps == [7.0] and state.reactions == [(55, "eyes")]


def test_primary_rate_limit_far_away_fails_clearly(gh) -> None:
    client, state, _ = gh
    state.faults.append(
        (
            403,
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "9999999999"},
            {"message": "API rate limit exceeded"},
        )
    )
    with pytest.raises(RateLimitError, match="resets at"):
        client.react(REPO, 1, "eyes")


def test_body_too_long_is_a_clear_error_and_the_token_never_shows(gh) -> None:
    client, _, _ = gh
    with pytest.raises(UnprocessableError) as info:
        client.create_comment(REPO, 4, "x" * 70_000)
    assert "422" in str(info.value) and "ghs_secret_token" not in str(info.value)
    assert "ghs_secret_token" not in repr(client)


def test_fork_token_gets_the_workflow_run_hint(gh) -> None:
    client, state, _ = gh
    state.forbid_checks = True
    with pytest.raises(ForbiddenError, match="workflow_run"):
        client.create_check_run(REPO, {"name": "verl-e2e", "head_sha": "a" * 40})


def test_publish_comment_check_summary_and_junit(gh, tmp_path: Path) -> None:
    client, state, _ = gh
    verdicts = [verdict("L0-lora-ddp-qwen", "Pass"), verdict("L1-save-resume-qwen", "Fail", 1)]
    ctx = Context(
        repo=REPO,
        pr=12,
        sha="a" * 40,
        merge_base="b" * 40,
        run_url="https://github.com/x/actions/runs/1",
        skipped={"3": "optional: runs only on request"},
        reasons={
            "1": [
                {
                    "rule": "hf-import-export",
                    "family": "qwen",
                    "paths": ["src/megatron/bridge/models/conversion/model_bridge.py"],
                }
            ]
        },
    )
    opts = PublishOptions(summary=tmp_path / "summary.md", junit=tmp_path / "junit.xml")
    done = publish(verdicts, ctx, opts, client, say=print)
    assert done["result"] == "Fail" and done["comment"]["action"] == "created"
    (run,) = state.check_runs
    assert run["conclusion"] == "failure" and run["head_sha"] == "a" * 40
    assert run["output"]["annotations"][0]["path"] == "src/megatron/bridge/models/conversion/model_bridge.py"
    assert (tmp_path / "summary.md").read_text().startswith("## ❌ verl-e2e: Fail")
    assert 'tests="10"' in (tmp_path / "junit.xml").read_text()
    again = publish(verdicts, ctx, opts, client, say=print)
    assert again["comment"]["action"] == "unchanged" and len(state.comments[12]) == 1


def test_checks_not_allowed_fall_back_to_a_commit_status(gh) -> None:
    client, state, _ = gh
    state.forbid_checks = True
    ctx = Context(repo=REPO, pr=None, sha="c" * 40)
    done = publish([verdict("L0-lora-ddp-qwen", "Blocked")], ctx, PublishOptions(comment=False), client, say=print)
    assert done["status"] == "created"
    assert state.statuses == [
        {
            "sha": "c" * 40,
            "state": "failure",  # Blocked fails by default: a neutral (or error) state satisfies nothing
            "context": "verl-e2e",
            "description": "verl-e2e: Blocked (1 cell: 1 blocked)",
        }
    ]


def test_blocked_fails_unless_the_site_opts_for_neutral() -> None:
    """A neutral check satisfies a required one, so Blocked fails by default."""
    ctx = Context(repo=REPO, sha="d" * 40)
    assert check_run([verdict("a", "Blocked")], ctx)["conclusion"] == "failure"
    assert check_run([verdict("a", "Blocked")], ctx, blocked_fails=False)["conclusion"] == "neutral"
    assert check_run([], ctx)["conclusion"] == "success"


def _markdown(text: str):
    return MarkdownIt("commonmark").enable("table").parse(text)


def test_comment_markdown_structure() -> None:
    verdicts = [verdict(f"L0-lora-ddp-f{i}", "Pass") for i in range(3)] + [verdict("L1-save-resume-qwen", "Fail", 1)]
    text = render(verdicts, Context(repo=REPO, pr=1, sha="e" * 40, skipped={"5": "no changed path matched its rules"}))
    tokens = _markdown(text)
    rows = [t for t in tokens if t.type == "tr_open"]
    assert len(rows) == 1 + len(verdicts)  # header + one row per cell
    cells = [t.content for t in tokens if t.type == "inline" and "L1-save-resume-qwen" in t.content]
    assert cells and "❌ Fail" in "".join(t.content for t in tokens if t.type == "inline")
    html = "".join(t.content for t in tokens if t.type == "html_block")
    # the failing cell's block and the limitations said once: passing cells have no block
    assert html.count("<details>") == 2
    first_details = html.index("<details>")
    assert "L1-save-resume-qwen" in html[first_details : first_details + 200]  # failures first
    assert "L0-lora-ddp-f0" not in html
    assert text.count("no convergence claim") == 1  # four cells carry it; said once
    assert "**Levels not run:** 5 (the plan's reasons are in the job summary)." in text


def test_300_cells_stay_under_the_limit_and_keep_failures() -> None:
    verdicts = [verdict(f"L{i % 6}-v-f{i}", "Pass" if i % 10 else "Fail", i % 6) for i in range(300)]
    text = render(verdicts, Context(repo=REPO, pr=1, sha="f" * 40))
    assert len(text) <= LIMIT
    assert text.startswith(MARKER + "\n## ❌ verl-e2e: Fail (300 cells: 270 pass, 30 fail)")
    assert text.count("<summary>❌") == 30  # every failure keeps its block
    tokens = _markdown(text)
    assert sum(t.type == "tr_open" for t in tokens) == 301
    summary = check_run(verdicts, Context(repo=REPO, pr=1, sha="f" * 40))["output"]["summary"]
    assert len(summary) <= CHECK_SUMMARY_LIMIT and summary.count("<summary>❌") == 30
    assert "passing cell(s) left out" in summary  # 270 passing cells in full do not fit a check run


def test_a_failing_block_is_dropped_before_the_limit_is_broken() -> None:
    verdicts = [verdict(f"L1-v-f{i}", "Fail", 1) for i in range(400)]
    text = render(verdicts, Context(repo=REPO, pr=1, sha="f" * 40))
    assert len(text) <= LIMIT and "failing cell(s) left out to fit" in text
    assert sum(t.type == "tr_open" for t in _markdown(text)) == 401  # every row stays


def test_report_cli_end_to_end(spec: Spec, tmp_path: Path, matrix: Matrix, cli) -> None:
    runs = tmp_path / "runs"
    write_run_dir(runs / "a", cell_for(matrix, 0), {"run": V.run(1)})
    write_run_dir(runs / "b", cell_for(matrix, 0, "llama"), {"run": V.run(1) + V.worker_traceback("KeyError", "'x'")})
    with serve(spec) as (url, state):
        env = {
            "GITHUB_API_URL": url,
            "GITHUB_TOKEN": "t",
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_SHA": "a" * 40,
            "GITHUB_RUN_ID": "42",
            "GITHUB_STEP_SUMMARY": str(tmp_path / "sum.md"),
        }
        result = cli("report", str(runs), "--pr", "5", "--junit", str(tmp_path / "all.xml"), env=env)
        assert result.code == 1, result.err
        assert state.violations == []
        body = state.comments[5][0]["body"]
        assert "❌ verl-e2e: Fail (2 cells: 1 pass, 1 fail)" in body and "actions/runs/42" in body
        assert state.check_runs[0]["conclusion"] == "failure"
        again = cli("report", str(runs), "--pr", "5", env=env)
        assert again.code == 1 and len(state.comments[5]) == 1
        reply = cli("reply", "--pr", "5", "--comment-id", "77", "--reason", "unknown level '9'", env=env)
        assert reply.code == 0 and state.reactions == [(77, "confused")]
        assert "unknown level '9'" in state.comments[5][-1]["body"] and "Usage:" in state.comments[5][-1]["body"]
        assert state.violations == []


def test_report_without_token_or_repo(cli, tmp_path: Path, matrix: Matrix) -> None:
    write_run_dir(tmp_path / "r", cell_for(matrix, 0), {"run": V.run(1)})
    no_token = cli("report", str(tmp_path / "r"), "--pr", "1", "--repo", REPO)
    assert no_token.code == 2 and "GITHUB_TOKEN" in no_token.err
    dry = cli("report", str(tmp_path / "r"), "--pr", "1", "--repo", REPO, "--dry-run")
    assert dry.code == 0 and "would upsert the comment" in dry.out
    bad = cli("report", str(tmp_path / "nothing-here"))
    assert bad.code == 2 and "no such directory" in bad.err


def test_the_stand_in_refuses_what_github_would(spec: Spec) -> None:
    """The loopback server is only useful if it really rejects invalid requests."""
    with serve(spec) as (url, state):
        client = GitHubClient(token="t", api_url=url, sleep=lambda s: None)
        with pytest.raises(Exception, match="400"):
            client.request("POST", f"/repos/{REPO}/issues/comments/5/reactions", json={"content": "party"})
        with pytest.raises(Exception, match="400"):
            client.request("GET", f"/repos/{REPO}/issues/5/comments", params={"colour": "blue"})
        with pytest.raises(Exception, match="400"):
            client.request("POST", f"/repos/{REPO}/check-runs", json={"name": "verl-e2e"})  # head_sha missing
        with pytest.raises(Exception, match="400"):
            client.request("PUT", f"/repos/{REPO}/issues/5/comments", json={"body": "x"})
        assert len(state.violations) == 4
        assert "is not one of" in state.violations[0] and "'head_sha' is a required property" in state.violations[2]


def test_a_failed_job_never_reports_green() -> None:
    ctx = Context(repo=REPO, sha="a" * 40, job_failures=["plan: failure"])
    payload = check_run([], ctx)
    assert payload["conclusion"] == "failure"
    assert "plan: failure" in payload["output"]["summary"] and "no verl run needed" not in payload["output"]["summary"]


def test_report_survives_a_missing_plan(cli, tmp_path: Path) -> None:
    result = cli(
        "report",
        str(tmp_path / "artifacts"),
        "--plan",
        str(tmp_path / "missing.json"),
        "--repo",
        REPO,
        "--sha",
        "a" * 40,
        "--job-result",
        "plan=failure",
        "--job-result",
        "cell=skipped",
        "--dry-run",
    )
    assert result.code == 1 and "reporting without it" in result.out and "Traceback" not in result.err
    assert "would POST" in result.out and "failure" in result.out


def test_the_scheduled_run_keeps_one_tracking_issue(gh) -> None:
    """Created once (label, marker), then edited in place; an issue someone else opened with the marker
    is left alone. Every request is checked against GitHub's OpenAPI description by the stand-in."""
    client, state, _ = gh
    forged = {"number": 3, "id": 3, "title": "x", "body": marker("scheduled") + "\nforged", "state": "open"}
    state.issues.append(forged | {"labels": [{"name": TRACKING_LABEL}], "user": {"login": "mallory"}})
    ctx = Context(repo=REPO, sha="a" * 40, section="scheduled")
    opts = PublishOptions(comment=False, check=False, tracking_issue=True)
    first = publish([verdict("L0-lora-ddp-qwen", "Pass")], ctx, opts, client, say=lambda _: None)
    assert first["issue"]["action"] == "created" and first["issue"]["number"] != 3
    again = publish([verdict("L0-lora-ddp-qwen", "Fail")], ctx, opts, client, say=lambda _: None)
    assert again["issue"] == {"action": "updated", "number": first["issue"]["number"]}
    ours = [i for i in state.issues if i["number"] == first["issue"]["number"]]
    assert len(state.issues) == 2 and "Fail" in ours[0]["body"] and state.issues[0]["body"].endswith("forged")
