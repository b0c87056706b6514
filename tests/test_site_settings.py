"""A real site: the installer's settings (validated, remembered), runner labels, cache layout, per-request
comments, triggers that refuse before reacting, and the CLI's rough edges a first-time user hit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl_e2e.config.site import SETTINGS, labels, merge
from verl_e2e.errors import UsageError
from verl_e2e.github.client import GitHubClient
from verl_e2e.github.trigger import CommandError, from_comment
from verl_e2e.report.comment import Context, render
from verl_e2e.report.publish import upsert_comment
from verl_e2e.run.cachelayout import cell_env, host_paths

from .conftest import ROOT
from .github_server import serve
from .test_trigger import HEAD, comment_event, examples, setup_pr, spec  # noqa: F401 - shared fixtures

SHA = "a" * 40


RUNNERS = '{"2": ["self-hosted", "gpu-2"], "4": ["self-hosted", "gpu-4"], "8": ["self-hosted", "gpu-8"]}'


def _install(bridge: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installer with the two settings it requires on a first install (unless the test gives its own)."""
    first = "--reset" in args or not (bridge / ".github/verl-e2e-site.json").exists()
    required = [*(("--repository", "NVIDIA-NeMo/verl-e2e") if first and "--repository" not in args else ())]
    required += [*(("--runners", RUNNERS) if first and "--runners" not in args else ())]
    cmd = [sys.executable, str(ROOT / "tools/install_callers.py"), "--bridge", str(bridge), "--sha", SHA]
    return subprocess.run([*cmd, *required, *args], capture_output=True, text=True, check=False)


@pytest.fixture
def bridge(tmp_path: Path) -> Path:
    (tmp_path / "src/megatron/bridge").mkdir(parents=True)
    return tmp_path


def _with(bridge: Path, name: str = "verl-e2e-pr.yml", job: str = "e2e") -> dict:
    return yaml.safe_load((bridge / ".github/workflows" / name).read_text())["jobs"][job]


def test_settings_are_written_in_and_remembered_across_re_runs(bridge: Path) -> None:
    runners = '{"2": ["self-hosted", "h100-2"], "4": ["self-hosted", "h100-4"], "8": ["self-hosted", "h100-8"]}'
    first = _install(bridge, "--cache-root", "/home/ci", "--cache-layout", "verl-ci", "--runners", runners,
                     "--registry-secret", "NGC_TOKEN")  # fmt: skip
    assert first.returncode == 0, first.stderr
    e2e = _with(bridge)
    assert e2e["with"]["cache_root"] == "/home/ci" and e2e["with"]["cache_layout"] == "verl-ci"
    assert json.loads(e2e["with"]["runners"])["4"] == ["self-hosted", "h100-4"]
    assert e2e["secrets"]["registry_token"] == "${{ secrets.NGC_TOKEN }}"
    again = _install(bridge, "--image-repository", "ghcr.io/nvidia/verl-e2e")  # changes one setting only
    assert again.returncode == 0, again.stderr
    assert re.search(r"^  cache_root +/home/ci  \[remembered\]$", again.stdout, re.M), again.stdout
    e2e = _with(bridge)
    assert e2e["with"]["cache_root"] == "/home/ci" and e2e["with"]["image_repository"] == "ghcr.io/nvidia/verl-e2e"
    assert e2e["secrets"]["registry_token"] == "${{ secrets.NGC_TOKEN }}"
    reset = _install(bridge, "--reset")
    assert reset.returncode == 0 and _with(bridge)["with"]["cache_root"] == "/var/cache/verl-e2e"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image-runner", '["self-hosted"]'], "match every self-hosted runner"),
        (["--runners", '{"two": ["self-hosted", "gpu-2"]}'], "is not a GPU count"),
        (["--registry-secret", "my token"], "expected a secret name"),
        (["--cache-layout", "nfs"], "expected verl-e2e or verl-ci"),
        (["--verl-ref", "0" * 40], "full 40-character commit SHA"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_written(bridge: Path, args: list[str], message: str) -> None:
    result = _install(bridge, *args)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (bridge / ".github").exists()


def test_a_sha_of_zeros_is_not_a_pin(bridge: Path) -> None:
    cmd = [sys.executable, str(ROOT / "tools/install_callers.py"), "--bridge", str(bridge), "--sha", "0" * 40]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "full 40-character commit SHA" in result.stderr


def test_the_warm_up_caller_runs_prefetch_on_the_site_runner_with_the_token_secret(bridge: Path) -> None:
    assert (
        _install(bridge, "--warmup-runner", '["self-hosted", "gpu-1"]', "--hf-token-secret", "HF_READ").returncode == 0
    )
    doc = yaml.safe_load((bridge / ".github/workflows/verl-e2e-warmup.yml").read_text())
    assert doc[True]["schedule"] and "workflow_dispatch" in doc[True]  # `on:` reads as True in YAML 1.1
    job = doc["jobs"]["warmup"]
    assert job["uses"].endswith(f"/.github/workflows/verl-e2e-warmup.yml@{SHA}")
    assert json.loads(job["with"]["runner"]) == ["self-hosted", "gpu-1"]
    assert job["secrets"]["hf_token"] == "${{ secrets.HF_READ }}"
    reusable = yaml.safe_load((ROOT / ".github/workflows/verl-e2e-warmup.yml").read_text())
    assert 'verl-e2e" prefetch' in reusable["jobs"]["prefetch"]["steps"][-1]["run"]


def test_the_docs_list_every_site_setting_in_one_table() -> None:
    text = (ROOT / "docs/workflows.md").read_text()
    table = text[text.index("## Site settings") :]
    for setting in SETTINGS:
        assert f"`{setting.flag}`" in table, setting.flag


def test_setting_values_merge_defaults_remembered_and_given() -> None:
    merged = merge({"cache_root": "/home/ci", "image": "old"}, {"image": "new", "cache_root": None})
    assert merged["cache_root"] == "/home/ci" and merged["image"] == "new" and merged["base_runs"] == "cache"
    with pytest.raises(UsageError):
        labels("self-hosted", "--image-runner")


def test_plan_takes_the_sites_runner_labels(subproc) -> None:
    runners = '{"2": ["self-hosted", "h100-2"], "4": ["self-hosted", "h100-4"], "8": ["self-hosted", "h100-8"]}'
    result = subproc("plan", "--levels", "2", "--family", "qwen", "--runners", runners, "--format", "json")
    assert result.code == 0, result.err
    assert {tuple(c["runs_on"]) for c in json.loads(result.out)["cells"]} >= {("self-hosted", "h100-4")}
    small = subproc("plan", "--levels", "2", "--runners", '{"2": ["self-hosted", "h100-2"]}')
    assert small.code == 2 and "a variant needs 4" in small.err


def test_the_verl_ci_cache_layout_is_what_verls_runners_have(tmp_path: Path) -> None:
    paths = host_paths(tmp_path, "verl-ci")
    assert paths["models"] == tmp_path / "models" and paths["datasets"] == tmp_path / "models/hf_data"
    assert cell_env("verl-ci", "/cache/datasets") == {"VERL_E2E_GSM8K_RAW": "/cache/datasets/gsm8k"}


def test_prefetch_fills_the_verl_ci_layout(subproc, tmp_path: Path) -> None:
    result = subproc(
        "prefetch", "--dry-run", "--family", "qwen3", "--cache", str(tmp_path), "--cache-layout", "verl-ci"
    )
    assert result.code == 0, result.err
    assert f"{tmp_path}/models/Qwen/Qwen3-0.6B" in result.out and f"{tmp_path}/models/hf_data/gsm8k " in result.out


def test_the_cell_finds_the_raw_dataset_where_the_layout_puts_it(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "containers"))
    try:
        from prepare import prepare_data  # type: ignore[import-not-found]
        from records import Recorder  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    raw = tmp_path / "hf_data" / "gsm8k"
    raw.mkdir(parents=True)
    verl = tmp_path / "verl" / "examples" / "data_preprocess"
    verl.mkdir(parents=True)
    (verl / "gsm8k.py").write_text(  # stands in for verl's preprocessing script: records its arguments
        "import sys, pathlib\nout = pathlib.Path(sys.argv[sys.argv.index('--local_save_dir') + 1])\n"
        "out.mkdir(parents=True)\n(out / 'train.parquet').write_text(' '.join(sys.argv))\n"
        "(out / 'test.parquet').write_text('')\n"
    )
    env = {"TRAIN_FILES": "/cache/datasets/gsm8k/train.parquet", "VAL_FILES": "/cache/datasets/gsm8k/test.parquet",
           "VERL_E2E_GSM8K_RAW": str(raw)}  # fmt: skip
    (tmp_path / "out").mkdir()
    rec = Recorder(tmp_path / "out", {"phases": []})
    assert prepare_data(env, tmp_path / "verl", rec, {}, tmp_path / "work") is None
    assert f"--local_dataset_path {raw}" in (tmp_path / "work/data/gsm8k/train.parquet").read_text()


def test_a_request_keeps_its_own_comment(spec) -> None:  # noqa: F811
    with serve(spec) as (url, state):
        setup_pr(state)
        client = GitHubClient("t", url)
        bot = "github-actions[bot]"
        auto = render([], Context(pr=1, sha=HEAD))
        request = render([], Context(pr=1, sha=HEAD, section="request-42"))
        assert upsert_comment(client, "Codertocat/Hello-World", 1, auto, bot)[0] == "created"
        assert upsert_comment(client, "Codertocat/Hello-World", 1, request, bot, section="request-42")[0] == "created"
        again = render([], Context(pr=1, sha=HEAD, section="request-42", run_url="https://example.com/r/2"))
        assert upsert_comment(client, "Codertocat/Hello-World", 1, again, bot, section="request-42")[0] == "updated"
        bodies = [c["body"] for c in state.comments[1]]
        assert len(bodies) == 2 and bodies[0] == auto  # the automatic run's report is untouched
        assert state.violations == []


def test_an_unknown_family_is_refused_before_any_reaction(examples, spec) -> None:  # noqa: F811
    with serve(spec) as (url, state):
        setup_pr(state)
        with pytest.raises(CommandError, match=r"family=qwen9 is not a model family.*did you mean"):
            from_comment(comment_event(examples, "/verl-e2e level=2 family=qwen9"), GitHubClient("t", url))
        assert state.reactions == [] and state.violations == []


def test_run_dry_run_needs_no_checkout_and_names_what_it_would_run(subproc, tmp_path: Path) -> None:
    result = subproc("run", "--example", "--dry-run", cwd=tmp_path)
    assert result.code == 0, result.err
    assert "IMAGE" not in result.out and "verl-e2e:" in result.out.split("the commands:")[-1]
    cells = sorted(p.parent.name for p in (tmp_path / "verl-e2e-runs").glob("*/cell.json"))
    assert cells and all(f"verl-e2e-runs/{c}:/run/verl-e2e" in result.out for c in cells)
    assert "/Megatron-Bridge:/workspace/Megatron-Bridge:ro" in result.out  # an absolute mount, not ../


def test_a_real_run_still_needs_the_checkout(subproc) -> None:
    result = subproc("run", "--example")
    assert result.code == 2 and "--bridge PATH and --out DIR are needed" in result.err


def test_evidence_of_a_run_dir_reads_its_phase_logs(subproc) -> None:
    run = ROOT / "tests/fixtures/real-runs/07-pass-level1-save-resume-one-gpu"
    result = subproc("evidence", str(run))
    assert result.code == 0, result.err
    assert "== resume.log" in result.out and "== save.log" in result.out and "driver.log" not in result.out


def test_validate_lists_every_cross_field_problem(subproc, tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    doc["defaults"]["family"] = "qwen9"
    doc["rules"][1]["name"] = doc["rules"][0]["name"]
    doc["aspects"][0]["pattern"] = "(unclosed"
    bad = tmp_path / "matrix.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = subproc("validate", str(bad))
    assert result.code == 2
    assert "defaults.family" in result.err and "appears twice" in result.err and "aspects[0].pattern" in result.err


def test_a_kind_family_that_cannot_run_is_refused(subproc, tmp_path: Path) -> None:
    """Shared MTP or GDN code is planned onto `kind_families`; a family with a cannot_run record there would
    turn every such change into "cannot run" (qwen35, 2026-12-05)."""
    doc = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    doc["defaults"]["kind_families"]["gdn"] = "qwen35"
    bad = tmp_path / "matrix.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = subproc("validate", str(bad))
    assert result.code == 2 and "kind_families.gdn" in result.err and "cannot_run" in result.err


def test_plan_refuses_a_model_that_is_not_a_checkpoint_id(subproc) -> None:
    result = subproc("plan", "--levels", "0", "--model", "not a model")
    assert result.code == 2 and "not a checkpoint id" in result.err


def test_settings_kept_in_repository_variables_and_secret_expressions(bridge: Path) -> None:
    """Bridge keeps its runner labels in `vars`: the expression is written in for the workflow to read."""
    done = _install(bridge, "--runners", "${{ vars.GPU_RUNNERS }}", "--image-runner", "${{ vars.DOCKER_RUNNER }}",
                    "--warmup-runner", '["self-hosted", "${{ vars.WARMUP_LABEL }}"]',
                    "--base-image", "${{ vars.VERL_BASE_IMAGE }}", "--cache-root", "${{ vars.CI_CACHE }}",
                    "--gpu-budget", "${{ vars.VERL_E2E_BUDGET }}",
                    "--hf-token-secret", "${{ secrets.BRIDGE_HF_TOKEN }}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    e2e = _with(bridge)
    # an unset variable reaches the plan as a sentence it refuses, never as "" (matrix.yaml's generic labels)
    assert e2e["with"]["runners"] == "${{ vars.GPU_RUNNERS || 'the repository variable GPU_RUNNERS is empty' }}"
    assert e2e["with"]["image_runner"] == '["${{ vars.DOCKER_RUNNER }}"]'  # a variable holds one label
    assert (
        e2e["with"]["base_image"] == "${{ vars.VERL_BASE_IMAGE }}"
        and e2e["with"]["gpu_budget"] == "${{ vars.VERL_E2E_BUDGET }}"
    )
    warmup = (bridge / ".github/workflows/verl-e2e-warmup.yml").read_text()
    assert "${{ secrets.BRIDGE_HF_TOKEN }}" in warmup  # the name taken from the expression
    assert json.loads(_with(bridge, "verl-e2e-warmup.yml", "warmup")["with"]["runner"]) == [
        "self-hosted",
        "${{ vars.WARMUP_LABEL }}",
    ]


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--runners", '{"1": ["self-hosted", "gpu-1"], "2": ["self-hosted", "gpu-2"]}', "cells need 4"),
        ("--gpu-budget", "lots", "expected whole GPU-minutes"),
        ("--base-image", "not an image!", "expected an image reference"),
        ("--hf-token-secret", "${{ vars.TOKEN }}", "expected a secret name"),
        ("--runners", "${{ github.event.comment.body }}", "only repository variables"),  # text a PR author writes
    ],
)
def test_installer_refuses_settings_that_cannot_work(bridge: Path, flag: str, value: str, says: str) -> None:
    done = _install(bridge, flag, value)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (bridge / ".github/workflows/verl-e2e-pr.yml").exists()


def test_a_base_image_and_budget_reach_the_reusable_workflow(bridge: Path) -> None:
    assert (
        _install(
            bridge, "--base-image", "mirror.example.com/verlai/verl:vllm024.dev2", "--gpu-budget", "120"
        ).returncode
        == 0
    )
    for caller in ("verl-e2e-pr.yml", "verl-e2e-comment.yml", "verl-e2e-dispatch.yml"):
        e2e = _with(bridge, caller)
        assert e2e["with"]["base_image"] == "mirror.example.com/verlai/verl:vllm024.dev2", caller
        assert e2e["with"]["gpu_budget"] == "120", caller


def test_the_scheduled_caller_runs_every_familys_level0_and_keeps_a_tracking_issue(bridge: Path) -> None:
    assert _install(bridge, "--replace-weekly").returncode == 0
    doc = yaml.safe_load((bridge / ".github/workflows/verl-e2e-scheduled.yml").read_text())
    assert set(doc[True]) == {"schedule", "workflow_dispatch"}  # PyYAML reads `on:` as True
    e2e, track = doc["jobs"]["e2e"], doc["jobs"]["track"]
    assert e2e["with"]["scheduled"] is True  # the reusable workflow plans it with `plan --scheduled`
    assert e2e["with"]["head_sha"] == "${{ github.sha }}"  # the commit the event names, never an input
    assert "issues" not in e2e["permissions"]  # only the GitHub-hosted tracking job may write issues
    assert track["permissions"] == {"contents": "read", "issues": "write"}
    assert "--tracking-issue" in track["steps"][-1]["run"]


def test_plan_family_all_is_every_familys_level0(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_e2e.cli.main import main
    from verl_e2e.config.matrix import load_matrix

    assert main(["plan", "--levels", "0", "--family", "all", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    families = load_matrix().families
    blocked = {name for name, f in families.items() if f.blocked("all")}  # matrix.yaml's cannot_run records
    assert blocked and {c["family"] for c in plan["cells"]} == set(families) - blocked
    assert sorted(w.split(":")[0] for w in plan["uncovered"]["0"] if "cannot run in verl today" in w) == sorted(blocked)
    assert {c["level"] for c in plan["cells"]} == {0} and plan["deferred"] == []


def test_the_scheduled_plan_is_every_familys_level0_and_the_weekly_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_e2e.cli.main import main
    from verl_e2e.config.matrix import load_matrix

    matrix = load_matrix()
    assert main(["plan", "--scheduled", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    level0 = {c["family"] for c in plan["cells"] if c["level"] == 0}
    assert level0 == {name for name, f in matrix.families.items() if f.blocked("all") is None}
    weekly = [c for c in plan["cells"] if c["level"] != 0]
    assert {c["variant"] for c in weekly} == {"weekly-pp4-vpp2", "weekly-moe-tp4-pp2-ep4"}
    assert all(c["gpus"] == 8 and c["family"] == matrix.defaults.family for c in weekly)
    env = {c["variant"]: c["phases"][0]["env"] for c in weekly}
    assert (env["weekly-pp4-vpp2"]["COMMON_PP"], env["weekly-pp4-vpp2"]["COMMON_VPP"]) == ("4", "2")
    assert env["weekly-moe-tp4-pp2-ep4"]["COMMON_EP"] == "4" and env["weekly-moe-tp4-pp2-ep4"]["INFER_TP"] == "8"
    assert plan["levels"] == [0, 2] and plan["requested"] == "scheduled"
    assert any(r["rule"] == "scheduled" for r in plan["reasons"]["2"])


def test_a_pull_request_never_gets_the_weekly_layouts(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_e2e.cli.main import main

    assert main(["plan", "--levels", "all", "--family", "qwen,qwen3_moe", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cells"] and not any(c["variant"].startswith("weekly-") for c in plan["cells"])


def test_without_an_eight_gpu_runner_the_weekly_layouts_are_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_e2e.cli.main import main

    runners = '{"2": ["self-hosted", "h100-2"], "4": ["self-hosted", "h100-4"]}'
    assert main(["plan", "--scheduled", "--runners", runners, "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cells"] and {c["level"] for c in plan["cells"]} == {0}
