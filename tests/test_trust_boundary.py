"""The second trust review's findings, one regression test each (the workflow ones run under act in
test_act.py; the static workflow checks are in test_workflows.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from verl_e2e.cli.main import main
from verl_e2e.judge.evidence import parse_bytes
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.report.collect import collect
from verl_e2e.run.backends import container_spec, local_command
from verl_e2e.run.runopts import RunOptions

from . import verl_log as V
from .conftest import ROOT
from .oidc_server import TOKEN, serve_oidc
from .rundirs import cell_for, write_run_dir

VERL = "/workspace/verl/verl"
LORA = "/workspace/Megatron-Bridge/src/megatron/bridge/peft/lora.py"


# 1. The gate's package comes from the OIDC claims of the reusable workflow's own commit.
def _self_step(workflow: str) -> str:
    doc = yaml.safe_load((ROOT / ".github/workflows" / workflow).read_text())
    (step,) = [s for s in doc["jobs"]["gate"]["steps"] if s.get("id") == "self"]
    return str(step["run"])


@pytest.fixture
def oidc() -> Iterator[tuple[str, dict]]:
    claims: dict = {}
    with serve_oidc(claims) as url:
        yield url, claims


def _run_self(script: str, tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:
    out = tmp_path / "github_output"
    out.write_text("")
    proc = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out), **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return proc, out.read_text()


@pytest.mark.parametrize("workflow", ["verl-e2e.yml", "verl-e2e-warmup.yml"])
def test_the_package_comes_from_the_workflows_own_commit(workflow: str, oidc, tmp_path: Path) -> None:
    url, claims = oidc
    sha = "a" * 40
    claims |= {
        "job_workflow_ref": f"verl-e2e/verl-e2e/.github/workflows/{workflow}@{sha}",
        "job_workflow_sha": sha,
        "workflow_ref": "someone/Megatron-Bridge/.github/workflows/verl-e2e-pr.yml@refs/pull/7/merge",
    }
    env = {"ACTIONS_ID_TOKEN_REQUEST_URL": url, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": TOKEN}
    proc, outputs = _run_self(_self_step(workflow), tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert outputs.splitlines() == ["repository=verl-e2e/verl-e2e", f"sha={sha}"]


def test_no_oidc_token_installs_nothing(tmp_path: Path) -> None:
    """A fork's pull_request (or a caller without `id-token: write`) gets no token: the gate stops."""
    proc, outputs = _run_self(_self_step("verl-e2e.yml"), tmp_path, {})
    assert proc.returncode != 0 and "no OIDC token" in proc.stderr and outputs == ""


def test_a_token_naming_no_workflow_commit_installs_nothing(oidc, tmp_path: Path) -> None:
    url, claims = oidc
    claims |= {"job_workflow_ref": "x/y/.github/workflows/verl-e2e.yml@main", "job_workflow_sha": "main"}
    env = {"ACTIONS_ID_TOKEN_REQUEST_URL": url, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": TOKEN}
    proc, outputs = _run_self(_self_step("verl-e2e.yml"), tmp_path, env)
    assert proc.returncode != 0 and "names no reusable workflow commit" in proc.stderr and outputs == ""


# 2. The warm-up's gate.
@pytest.mark.parametrize(
    ("event", "ref", "code"),
    [
        ("schedule", "refs/heads/main", 0),
        ("workflow_dispatch", "refs/heads/main", 0),
        ("workflow_dispatch", "refs/heads/feature", 1),
        ("pull_request", "refs/pull/7/merge", 1),
        ("push", "refs/heads/main", 1),
    ],
)
def test_the_warmup_runs_only_on_a_schedule_or_a_default_branch_dispatch(
    event: str, ref: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"EVENT_NAME": event, "REF": ref, "DEFAULT_BRANCH": "main"}
    assert main(["gate", "--warmup"], env=env) == code
    assert ("allowed" if code == 0 else "refused") in capsys.readouterr().out


# 3. In Actions a cell runs only in a container; the local backend never hands GITHUB_ENV on.
@pytest.mark.parametrize(
    "backend", [["--backend", "local", "--verl", "."], ["--backend", "slurm", "--verl", "."]], ids=["local", "slurm"]
)
def test_in_actions_cells_run_only_in_a_container(
    backend: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["run-cell", "plan.json", "--cell-id", "L0", "--bridge", str(tmp_path), "--out", str(tmp_path / "o")]
    assert main([*args, *backend], env={"GITHUB_ACTIONS": "true"}) == 2
    err = capsys.readouterr().err
    assert "runs PR code as the runner's user" in err and "--backend docker" in err
    assert not (tmp_path / "o").exists()


def test_the_local_backend_never_passes_the_runners_files_on(matrix, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_ENV", "/runner/_temp/set_env")
    monkeypatch.setenv("GITHUB_PATH", "/runner/_temp/add_path")
    monkeypatch.setenv("ACTIONS_RUNTIME_URL", "https://pipelines.example")
    opts = RunOptions(
        cell_file=tmp_path / "c.json", bridge=tmp_path, out=tmp_path / "o", backend="local", verl=tmp_path, gpus="none"
    )
    _, env = local_command(cell_for(matrix, 0), opts, tmp_path / "scratch")
    assert not {"GITHUB_ENV", "GITHUB_PATH", "ACTIONS_RUNTIME_URL"} & set(env)


# 6. The class comes from the root exception, not from a setup-looking line elsewhere.
def test_a_cleanup_line_does_not_turn_a_provider_failure_into_blocked() -> None:
    frames = (
        ("main", f"{VERL}/trainer/main_ppo.py"),
        ("init_model", f"{VERL}/workers/megatron_workers.py"),
        ("transform", LORA),
    )
    root = V.python_traceback(
        "TypeError", "ParallelLinearAdapter.__init__() got an unexpected keyword argument", frames
    )
    cleanup = "(raylet) rm: cannot remove '/tmp/ray/session_1/logs': No space left on device\n"
    ev = parse_bytes((V.trace() + V.TASK + "starting\n" + root + cleanup).encode())
    assert ev.failure_class == "model_build", (ev.failure_class, ev.failure_signature)
    # with no root exception of its own, the same line still names the cause
    alone = parse_bytes((V.trace() + V.TASK + "OSError: [Errno 28] No space left on device\n").encode())
    assert alone.failure_class == "setup"


def test_a_messenger_exception_still_defers_to_the_logs_cause() -> None:
    oom = "(raylet) Memory on the node (IP: 10.0.0.2) exceeds the memory usage threshold 0.95; killing a worker\n"
    died = V.worker_traceback("ActorDiedError", "The actor died unexpectedly before finishing this task.")
    ev = parse_bytes((V.trace() + oom + died).encode())
    assert ev.failure_class == "oom"


# 8. Only the hub cache is mounted, never the HF home with its token.
def test_only_the_hub_cache_is_mounted(tmp_path: Path) -> None:
    hf = tmp_path / ".cache/huggingface"
    (hf / "hub").mkdir(parents=True)
    (hf / "token").write_text("hf_secret")
    opts = RunOptions(
        cell_file=tmp_path / "c.json",
        bridge=tmp_path,
        out=tmp_path / "o",
        cache={"hf_home": hf, "models": tmp_path / "models"},
        container_paths={"hf_home": "/cache/hf", "models": "/cache/models"},
        image="verl-e2e:x",
    )
    spec = container_spec(opts, None, tmp_path / "scratch")
    mounted = {src: (dst, ro) for src, dst, ro in spec.mounts}
    assert mounted[str(hf / "hub")] == ("/cache/hf/hub", True)
    assert str(hf) not in mounted and spec.environment["HF_HOME"] == "/cache/hf"


def test_the_verl_ci_layout_finds_gsm8k_where_verls_runners_keep_it(tmp_path: Path) -> None:
    from verl_e2e.run import cachelayout

    paths = cachelayout.host_paths(tmp_path, "verl-ci")
    assert paths["datasets"] / cachelayout.layout("verl-ci").gsm8k_raw == tmp_path / "models/hf_data/gsm8k"
    assert cachelayout.cell_env("verl-ci", "/cache/datasets") == {"VERL_E2E_GSM8K_RAW": "/cache/datasets/gsm8k"}


# 9. The host's exit code outranks records from inside the cell; one run dir per cell id.
def _passing(matrix, root: Path) -> Path:
    cell = cell_for(matrix, 0)
    return write_run_dir(root / cell.id, cell, {"run": V.run(1)})


def test_a_nonzero_host_exit_is_never_a_pass(matrix, tmp_path: Path) -> None:
    run = _passing(matrix, tmp_path)
    assert judge_run_dir(run).result == "Pass"
    provenance = json.loads((run / "provenance.json").read_text())
    (run / "provenance.json").write_text(json.dumps(provenance | {"host_exit_code": 1}))
    verdict = judge_run_dir(run)
    assert verdict.result == "Fail" and "exited 1 on the host" in verdict.headline


def test_two_run_dirs_for_one_cell_are_neither_trusted(matrix, tmp_path: Path) -> None:
    first = _passing(matrix, tmp_path / "a")
    _passing(matrix, tmp_path / "b")
    said: list[str] = []
    (verdict,) = collect([tmp_path], said.append, planned=[json.loads((first / "cell.json").read_text())])
    assert verdict.result == "Fail" and "two run dirs claim this cell" in verdict.headline
    assert any("second run dir" in s for s in said)


# 9. Refusals never hand out a ready-to-paste command with the current head.
def test_a_refusal_never_prints_the_current_head() -> None:
    from verl_e2e.github import trigger

    source = Path(trigger.__file__).read_text()
    assert not re.search(r"sha=\{head", source), "a refusal must not offer the PR's current head SHA"


# 9. The installer validates what it keeps and says what changed.
def _install(bridge: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(ROOT / "tools/install_callers.py"), "--bridge", str(bridge), "--sha", "a" * 40]
    cmd += ["--repository", "NVIDIA-NeMo/verl-e2e", "--runners", '{"2": "gpu-x2", "4": "gpu-x4", "8": "gpu-x8"}']
    return subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("remembered", "says"),
    [
        ({"cache_root": "relative/cache"}, "expected an absolute path"),
        ({"image": "evil image; rm -rf /"}, "expected an image reference"),
        ({"run_cell_args": "--backend local"}, "set by the workflow itself"),
        ({"run_cell_args": "--no-such-flag"}, "run-cell has no option"),
        ({"same_repo_prs": "yes"}, "expected true or false"),
    ],
)
def test_the_installer_refuses_bad_remembered_values(remembered: dict, says: str, tmp_path: Path) -> None:
    (tmp_path / "src/megatron/bridge").mkdir(parents=True)
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github/verl-e2e-site.json").write_text(json.dumps(remembered))
    proc = _install(tmp_path)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not (tmp_path / ".github/workflows").exists()


def test_the_installer_shows_what_changed(tmp_path: Path) -> None:
    (tmp_path / "src/megatron/bridge").mkdir(parents=True)
    assert _install(tmp_path, "--cache-root", "/srv/cache").returncode == 0
    proc = _install(tmp_path, "--cache-root", "/data/cache")
    assert proc.returncode == 0 and "changed cache_root: '/srv/cache' -> '/data/cache'" in proc.stdout


# 9. Log-derived text renders only inside code spans in the comment.
def test_log_text_in_the_comment_renders_nothing() -> None:
    from dataclasses import replace

    from markdown_it import MarkdownIt

    from verl_e2e.report.comment import Context, render

    from .test_publish import verdict

    hostile = "**urgent** see https://evil.example/x owner/repo#12 :tada: @maintainer <b>x</b> | a"
    v = replace(verdict("L0-lora-ddp-qwen", "Fail"), headline=f"Fail - Level 0 of Qwen: RuntimeError: {hostile}")
    text = render([v], Context(repo="NVIDIA-NeMo/Megatron-Bridge", pr=1, sha="e" * 40))
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    row = next(t for t in tokens if t.type == "inline" and "evil.example" in t.content and "RuntimeError" in t.content)
    assert row.children is not None
    spans = [c for c in row.children if c.type == "code_inline"]
    assert len(spans) == 1 and "https://evil.example/x owner/repo#12 :tada: @maintainer" in spans[0].content
    assert not [c for c in row.children if c.type in ("strong_open", "link_open", "html_inline")]


# Malformed events are one line and exit 2 (no KeyError traceback).
@pytest.mark.parametrize("name", ["push", "pull_request", "workflow_dispatch"])
def test_a_malformed_event_is_one_line(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "opened"}))
    env = {"GITHUB_TOKEN": "t", "GITHUB_API_URL": "http://127.0.0.1:9"}
    assert main(["trigger", "--event-name", name, "--event", str(event)], env=env) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GITHUB_EVENT_PATH" in err


def test_a_superseded_run_never_posts_a_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A newer push cancels the cell jobs; the report still runs (always()), but must not turn the PR's
    comment and check into "Fail ... cancelled": it keeps the last finished result."""
    plan = tmp_path / "plan.json"
    assert main(["plan", "--levels", "0", "--out", str(plan)], env={}) == 0
    (tmp_path / "artifacts").mkdir()
    args = ["report", str(tmp_path / "artifacts"), "--plan", str(plan), "--pr", "7", "--repo", "o/r", "--dry-run"]
    capsys.readouterr()
    assert main([*args, "--job-result", "cell=cancelled"], env={}) == 0
    out = capsys.readouterr().out
    assert "keep the last finished result" in out and "would upsert" not in out and "would POST" not in out
    assert main([*args, "--job-result", "cell=failure"], env={}) == 1  # a real failure still reports
    assert "would upsert" in capsys.readouterr().out
