"""The installer on Bridge's conventions: runner names and registry from repository variables, nothing
generic by default, Bridge's licence header, one schedule only with consent, a summary of where every
setting came from, and a site file a pull request edited is not taken at its word."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from .conftest import ROOT

SHA = "b" * 40
PREFIX = "${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}"
REGISTRY = "${{ vars.DEFAULT_CONTAINER_REGISTRY }}"
BRIDGE = ["--repository", "NVIDIA-NeMo/verl-e2e", "--runners", PREFIX]
# Bridge's copyright check: "Copyright.*NVIDIA CORPORATION" in a file's first 10 lines
COPYRIGHT = re.compile(r"Copyright.*NVIDIA CORPORATION")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_callers", ROOT / "tools/install_callers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


installer = _load()


@pytest.fixture
def bridge(tmp_path: Path) -> Path:
    (tmp_path / "src/megatron/bridge").mkdir(parents=True)
    return tmp_path


def install(bridge: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = installer.main(["--bridge", str(bridge), "--sha", SHA, *args])
    out, err = capsys.readouterr()
    return code, out, err


def workflow(bridge: Path, name: str) -> dict:
    return yaml.safe_load((bridge / ".github/workflows" / name).read_text())


def test_without_runners_nothing_is_written_and_one_line_says_how(bridge: Path, capsys) -> None:
    code, out, err = install(bridge, "--repository", "NVIDIA-NeMo/verl-e2e", capsys=capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "missing --runners" in err and "${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}" in err
    assert not (bridge / ".github").exists()


def test_where_verl_e2e_is_hosted_is_asked_for_not_assumed(bridge: Path, capsys) -> None:
    code, _, err = install(bridge, "--runners", PREFIX, capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "missing --repository OWNER/NAME" in err
    assert not (bridge / ".github").exists()
    assert install(bridge, *BRIDGE, capsys=capsys)[0] == 0
    uses = workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["uses"]
    assert uses == f"NVIDIA-NeMo/verl-e2e/.github/workflows/verl-e2e.yml@{SHA}"
    assert install(bridge, capsys=capsys)[0] == 0  # remembered from then on


def test_a_runner_prefix_variable_names_every_gpu_count(bridge: Path, capsys, subproc) -> None:
    assert install(bridge, *BRIDGE, capsys=capsys)[0] == 0
    given = workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["with"]
    runners = json.loads(given["runners"])
    assert runners == {str(n): [f"${{{{ vars.RUNNER_PREFIX }}}}-gpu-x{n}"] for n in (2, 4, 8)}
    # the image is built, and the cache warmed, on the smallest GPU runner: no generic label anywhere
    assert json.loads(given["image_runner"]) == ["${{ vars.RUNNER_PREFIX }}-gpu-x2"]
    warmup = workflow(bridge, "verl-e2e-warmup.yml")["jobs"]["warmup"]["with"]
    assert json.loads(warmup["runner"]) == ["${{ vars.RUNNER_PREFIX }}-gpu-x2"]
    text = "".join(p.read_text() for p in (bridge / ".github/workflows").glob("*.yml"))
    assert "gpu-1" not in text and '"linux"' not in text
    # what the plan job receives once GitHub has filled the variable in
    filled = given["runners"].replace("${{ vars.RUNNER_PREFIX }}", "nemo-ci-azure")
    plan = subproc("plan", "--levels", "2", "--family", "qwen", "--runners", filled, "--format", "json")
    assert plan.code == 0, plan.err
    assert {tuple(c["runs_on"]) for c in json.loads(plan.out)["cells"]} == {
        ("nemo-ci-azure-gpu-x2",),
        ("nemo-ci-azure-gpu-x4",),
    }


def test_an_unset_runner_variable_stops_the_plan_instead_of_queueing(subproc) -> None:
    empty = json.dumps({"2": ["-gpu-x2"], "4": ["-gpu-x4"]})  # `${{ vars.RUNNER_PREFIX }}-gpu-x2` with nothing set
    result = subproc("plan", "--levels", "0", "--runners", empty)
    assert result.code == 2 and "was a repository variable empty" in result.err
    result = subproc("plan", "--levels", "0", "--runners", "the repository variable GPU_RUNNERS is empty")
    assert result.code == 2 and "GPU_RUNNERS is empty; set it" in result.err


@pytest.mark.parametrize(
    ("value", "labels"),
    [
        ("nemo-ci-azure-gpu-x2", ["nemo-ci-azure-gpu-x2"]),  # a plain label
        ('["self-hosted", "docker-builder"]', ["self-hosted", "docker-builder"]),  # a list
        ("${{ vars.DEFAULT_RUNNER_PREFIX }}", ["${{ vars.DEFAULT_RUNNER_PREFIX }}"]),  # a variable holding a label
        ("${{ vars.RUNNER_PREFIX }}-cpu", ["${{ vars.RUNNER_PREFIX }}-cpu"]),  # a prefix expression
    ],
)
def test_a_runner_is_a_label_a_list_or_a_variable(bridge: Path, value: str, labels: list[str], capsys) -> None:
    code, _, err = install(bridge, *BRIDGE, "--image-runner", value, capsys=capsys)
    assert code == 0, err
    assert json.loads(workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["with"]["image_runner"]) == labels


@pytest.mark.parametrize(
    ("runners", "says"),
    [
        ("nemo-ci-azure-gpu-x2", "one label cannot serve every GPU count"),
        ('{"2": "gpu-x2"}', "cells need 4"),
        ('{"2": "-gpu-x2", "4": "gpu-x4"}', "an empty part"),
    ],
)
def test_runner_values_that_cannot_work_are_refused(bridge: Path, runners: str, says: str, capsys) -> None:
    code, _, err = install(bridge, "--repository", "NVIDIA-NeMo/verl-e2e", "--runners", runners, capsys=capsys)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert not (bridge / ".github").exists()


def test_a_registry_variable_names_where_the_image_goes(bridge: Path, capsys) -> None:
    assert install(bridge, *BRIDGE, "--registry", REGISTRY, capsys=capsys)[0] == 0
    given = workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["with"]
    assert given["image_repository"] == "${{ vars.DEFAULT_CONTAINER_REGISTRY }}/verl-e2e"
    mirror = f"{REGISTRY}/dockerhub/verlai/verl:vllm024.dev2"  # Bridge pulls Docker Hub images through its registry
    code, _, err = install(
        bridge, "--image-repository", "ghcr.io/nvidia/verl-e2e", "--base-image", mirror, capsys=capsys
    )
    assert code == 0, err
    given = workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["with"]
    assert given["image_repository"] == "ghcr.io/nvidia/verl-e2e" and given["base_image"] == mirror


def test_every_generated_file_carries_bridges_licence_header(bridge: Path, capsys) -> None:
    assert install(bridge, *BRIDGE, "--replace-weekly", capsys=capsys)[0] == 0
    files = [*(bridge / ".github/workflows").glob("*.yml"), bridge / ".github/verl-e2e-site.json"]
    assert len(files) == len(installer.templates()) + 1
    for path in files:
        head = "\n".join(path.read_text().splitlines()[:10])
        assert COPYRIGHT.search(head) and "Apache License, Version 2.0" in head, path.name
    json.loads(files[-1].read_text())  # still JSON
    pr = bridge / ".github/workflows/verl-e2e-pr.yml"
    pr.write_text(pr.read_text().replace(pr.read_text().split(",")[0], "# Copyright (c) 2025", 1))
    assert install(bridge, capsys=capsys)[0] == 0
    assert pr.read_text().startswith("# Copyright (c) 2025, NVIDIA CORPORATION.  All rights reserved.\n")


def test_the_scheduled_run_replaces_the_weekly_job_only_with_consent(bridge: Path, capsys) -> None:
    weekly = bridge / ".github/workflows/verl-e2e-weekly.yml"
    weekly.parent.mkdir(parents=True)
    weekly.write_text("name: verl e2e (weekly)\n")
    code, out, _ = install(bridge, *BRIDGE, capsys=capsys)
    assert code == 0 and weekly.exists() and not (bridge / ".github/workflows/verl-e2e-scheduled.yml").exists()
    assert re.search(r"--replace-weekly installs verl-e2e-scheduled.yml \(\d+ cells, [\d,]+ GPU-minutes a week\)", out)
    code, out, _ = install(bridge, "--replace-weekly", capsys=capsys)
    assert code == 0 and not weekly.exists() and f"removed {weekly}" in out
    assert (bridge / ".github/workflows/verl-e2e-scheduled.yml").exists()
    assert install(bridge, capsys=capsys)[0] == 0  # remembered
    assert (bridge / ".github/workflows/verl-e2e-scheduled.yml").exists()
    code, out, _ = install(bridge, "--no-replace-weekly", capsys=capsys)
    assert code == 0 and not (bridge / ".github/workflows/verl-e2e-scheduled.yml").exists() and "removed" in out


def test_the_warm_up_and_the_scheduled_run_never_fire_together(bridge: Path, capsys) -> None:
    assert install(bridge, *BRIDGE, "--replace-weekly", capsys=capsys)[0] == 0
    crons = {
        name: workflow(bridge, name)[True]["schedule"][0]["cron"].split()
        for name in ("verl-e2e-warmup.yml", "verl-e2e-scheduled.yml")
    }
    warmup, scheduled = crons["verl-e2e-warmup.yml"], crons["verl-e2e-scheduled.yml"]
    assert warmup[0] != scheduled[0]  # different minutes
    assert (warmup[4], int(warmup[1])) < (scheduled[4], int(scheduled[1]))  # and the warm-up first


def test_the_summary_names_every_setting_and_where_it_came_from(bridge: Path, capsys) -> None:
    code, out, _ = install(bridge, *BRIDGE, "--registry", REGISTRY, "--cache-layout", "verl-ci", capsys=capsys)
    assert code == 0
    rows = dict(re.findall(r"^  (\w+) +.*\[(.*)\]$", out, re.M))
    assert set(rows) == {"repository", "sha"} | {s.key for s in installer.SETTINGS}
    assert rows["cache_layout"] == "flag" and rows["cache_root"] == "default"
    assert rows["runners"] == "flag; variable vars.RUNNER_PREFIX, read when the workflow runs"
    assert rows["image_runner"].startswith("derived from --runners")
    assert rows["image_repository"].startswith("derived from --registry (flag)")
    code, out, _ = install(bridge, capsys=capsys)
    rows = dict(re.findall(r"^  (\w+) +.*\[(.*)\]$", out, re.M))
    assert rows["cache_layout"] == "remembered" and rows["repository"] == "remembered"


def test_the_help_counts_what_it_writes(bridge: Path, capsys) -> None:
    help_text = subprocess.run(
        [sys.executable, str(ROOT / "tools/install_callers.py"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    said = re.search(r"Writes (\d+) caller workflows .*\((\d+) in all\)", " ".join(help_text.split()))
    assert said, help_text
    code, out, _ = install(bridge, *BRIDGE, capsys=capsys)
    assert code == 0 and out.count(".yml\n") == int(said.group(1))
    code, out, _ = install(bridge, "--replace-weekly", capsys=capsys)
    assert code == 0 and len(re.findall(r"^wrote .*\.yml$", out, re.M)) == int(said.group(2))


@pytest.mark.parametrize(
    ("key", "value", "flag"),
    [
        ("repository", "someone/verl-e2e", "--repository"),
        ("image", "ghcr.io/someone/verl:latest", "--image"),
        ("registry", "registry.example.com/someone", "--image-repository or --registry"),
    ],
)
def test_a_repository_or_image_the_site_file_changed_is_not_taken(bridge: Path, key, value, flag, capsys) -> None:
    """The site file is in Bridge's tree, so a pull request can edit it: what decides which code and
    which image run is refused when it differs from the installed callers, unless a flag says so."""
    assert install(bridge, *BRIDGE, capsys=capsys)[0] == 0
    remembered = bridge / ".github/verl-e2e-site.json"
    doc = json.loads(remembered.read_text())
    remembered.write_text(json.dumps(doc | {key: value}))
    before = (bridge / ".github/workflows/verl-e2e-pr.yml").read_text()
    code, _, err = install(bridge, capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"sets {'image_repository' if key == 'registry' else key} to" in err and value in err
    assert f"pass {flag}" in err and "--accept-site-file" in err
    assert (bridge / ".github/workflows/verl-e2e-pr.yml").read_text() == before
    code, _, err = install(bridge, "--accept-site-file", capsys=capsys)
    assert code == 0, err
    assert value in (bridge / ".github/workflows/verl-e2e-pr.yml").read_text()


def test_a_value_given_as_a_flag_is_the_maintainers_choice(bridge: Path, capsys) -> None:
    assert install(bridge, *BRIDGE, "--image", "ghcr.io/nvidia/verl-e2e:v1", capsys=capsys)[0] == 0
    assert install(bridge, capsys=capsys)[0] == 0  # unchanged since the install: taken
    remembered = bridge / ".github/verl-e2e-site.json"
    remembered.write_text(json.dumps(json.loads(remembered.read_text()) | {"image": "ghcr.io/evil/x:1"}))
    assert install(bridge, "--image", "ghcr.io/nvidia/verl-e2e:v2", capsys=capsys)[0] == 0
    assert workflow(bridge, "verl-e2e-pr.yml")["jobs"]["e2e"]["with"]["image"] == "ghcr.io/nvidia/verl-e2e:v2"


def test_a_site_file_without_installed_callers_is_not_taken_either(bridge: Path, capsys) -> None:
    (bridge / ".github").mkdir()
    (bridge / ".github/verl-e2e-site.json").write_text(
        json.dumps({"repository": "someone/verl-e2e", "runners": '{"2": "a", "4": "b"}'})
    )
    code, _, err = install(bridge, capsys=capsys)
    assert code == 2 and "no installed caller confirms it" in err
