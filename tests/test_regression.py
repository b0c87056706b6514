"""New in this PR, already failing on the merge base, changed, or unknown: from real run dirs."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from verl_e2e.cli.main import main
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.report.comment import Context, check_run
from verl_e2e.report.regression import compare

from .conftest import SHARED

REAL = SHARED / "reference" / "real-runs"
TYPEERROR = "03-verl-vs-mcore-unwrap-model-typeerror"  # Fail, model_build
APEX = "02-gradient-accumulation-fusion-needs-apex"  # Blocked, setup
PASSED = "05-pass-level0-mcore-0.19-attention-auto"


def _tested(run: Path) -> str:
    """The Bridge commit a run dir recorded (the commit it tested)."""
    return json.loads((run / "provenance.json").read_text())["bridge"]["full_commit"]


def _copy(name: str, into: Path) -> Path:
    """A real run dir copied under `into` (judging writes its records), read in place otherwise.

    The five shared runs committed the same verl tree afresh each time (so their verl commit ids
    differ); the copy takes run 03's verl commit, as runs of one pinned verl would have.
    """
    if not (REAL / name).is_dir():
        pytest.fail(f"{REAL / name} is missing: the real run dirs are part of the test data")
    into.mkdir(parents=True, exist_ok=True)
    run = Path(shutil.copytree(REAL / name, into / "L0-lora-ddp-qwen"))
    pinned = json.loads((REAL / TYPEERROR / "provenance.json").read_text())["verl"]
    provenance = json.loads((run / "provenance.json").read_text())
    provenance["verl"] = provenance["repos"]["verl"] = pinned
    (run / "provenance.json").write_text(json.dumps(provenance))
    return run


@pytest.mark.parametrize(
    ("base", "outcome"),
    [(TYPEERROR, "pre-existing"), (PASSED, "new"), (APEX, "changed"), (None, "unknown")],
    ids=["same-failure-on-base", "base-passed", "base-failed-differently", "no-base-result"],
)
def test_the_four_outcomes(tmp_path: Path, base: str | None, outcome: str) -> None:
    here = judge_run_dir(_copy(TYPEERROR, tmp_path / "pr"))
    there = judge_run_dir(_copy(base, tmp_path / "base")) if base else None
    result = compare(here, there)
    assert result is not None and result["outcome"] == outcome, result


def test_runs_of_another_image_or_verl_are_not_compared(tmp_path: Path) -> None:
    here = judge_run_dir(_copy(TYPEERROR, tmp_path / "pr"))
    base_dir = _copy(TYPEERROR, tmp_path / "base")
    provenance = json.loads((base_dir / "provenance.json").read_text())
    provenance["verl"]["full_commit"] = "0" * 40
    (base_dir / "provenance.json").write_text(json.dumps(provenance))
    result = compare(here, judge_run_dir(base_dir))
    assert result == {"outcome": "unknown", "reason": "the merge-base run differs in verl commit"}


def test_report_with_a_baseline_says_which_failures_are_the_prs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _copy(TYPEERROR, tmp_path / "pr")
    _copy(TYPEERROR, tmp_path / "base")
    summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    args = ["report", str(tmp_path / "pr"), "--baseline", str(tmp_path / "base"), "--no-comment", "--no-check"]
    code = main([*args, "--summary", str(summary), "--junit", str(junit)], env={})
    assert code == 0  # the only failure is already on the merge base: not counted (the default)
    assert "already failing on the merge base" in summary.read_text()
    assert "not counted against the change" in capsys.readouterr().out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["versus_merge_base"] == "pre-existing"
    assert main([*args, "--pre-existing-fails"], env={}) == 1  # the site's setting: they fail the check


def test_the_check_is_neutral_when_every_failure_is_pre_existing(tmp_path: Path) -> None:
    here = judge_run_dir(_copy(TYPEERROR, tmp_path / "pr"))
    base = judge_run_dir(_copy(TYPEERROR, tmp_path / "base"))
    from dataclasses import replace

    v = replace(here, comparison=compare(here, base))
    payload = check_run([v], Context(sha="a" * 40))
    assert payload["conclusion"] == "neutral" and "already on the merge base" in payload["output"]["title"]
    assert check_run([v], Context(sha="a" * 40, pre_existing_fails=True))["conclusion"] == "failure"
    new = replace(here, comparison=compare(here, judge_run_dir(_copy(PASSED, tmp_path / "b2"))))
    assert check_run([new], Context(sha="a" * 40))["conclusion"] == "failure"


def test_compare_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    here, base = _copy(TYPEERROR, tmp_path / "pr"), _copy(PASSED, tmp_path / "base")
    assert main(["compare", str(here), str(base)], env={}) == 0
    out = capsys.readouterr().out
    assert "L0-lora-ddp-qwen: new - the merge base passed this cell" in out and "TypeError" in out


def test_base_run_cache_keys_copies_plain_files_and_refuses_other_keys(tmp_path: Path) -> None:
    from verl_e2e.report import basecache

    run = _copy(TYPEERROR, tmp_path / "base")
    (run / "stolen").symlink_to("/etc/hostname")
    merge_base = _tested(run)
    fields = {"cell_id": "L0-lora-ddp-qwen", "merge_base": merge_base, "environment": "verl-e2e:abc", "runner": "gpu-2"}
    stored = basecache.store(tmp_path / "cache", fields, run)
    assert stored is not None
    assert not (stored / "stolen").exists() and (stored / "run.log").is_file()
    assert basecache.lookup(tmp_path / "cache", fields) == stored
    assert basecache.lookup(tmp_path / "cache", fields | {"environment": "verl-e2e:other"}) is None
    out = basecache.fetch(tmp_path / "cache", fields, tmp_path / "runs-base" / "L0-lora-ddp-qwen")
    assert out is not None and judge_run_dir(out).failure_class == "model_build"
    with pytest.raises(ValueError, match="merge_base"):
        basecache.key(fields | {"merge_base": ""})


def test_base_run_command_takes_the_cached_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from verl_e2e.report import basecache

    pr_run = _copy(TYPEERROR, tmp_path / "runs")
    plan = tmp_path / "plan.json"
    cell = json.loads((pr_run / "cell.json").read_text())
    merge_base = _tested(pr_run)  # the shared runs all tested Bridge 067f987: it stands in for the merge base
    plan.write_text(json.dumps({"cells": [cell], "context": {"merge_base": merge_base}}))
    verl = json.loads((pr_run / "provenance.json").read_text())["verl"]
    fields = {
        "cell_id": cell["id"],
        "merge_base": merge_base,
        "environment": verl["full_commit"],
        "runner": ",".join(cell["runs_on"]),
    }
    args = [
        "base-run",
        str(plan),
        "--cell-id",
        cell["id"],
        "--like",
        str(pr_run),
        "--out",
        str(tmp_path / "runs-base" / cell["id"]),
        "--cache",
        str(tmp_path / "cache"),
        "--bridge",
        str(tmp_path),
    ]
    assert main(args, env={}) == 0 and "no result on the merge base" in capsys.readouterr().out
    basecache.store(tmp_path / "cache", fields, _copy(TYPEERROR, tmp_path / "old-base"))
    assert main(args, env={}) == 0 and "from the cache" in capsys.readouterr().out
    base = judge_run_dir(tmp_path / "runs-base" / cell["id"])
    assert compare(judge_run_dir(pr_run), base) == {
        "outcome": "pre-existing",
        "reason": "the merge base fails the same way",
        "base": f"base: Fail, model_build: {base.exception}",
    }


def test_a_base_run_that_tested_another_commit_is_neither_kept_nor_used(tmp_path: Path) -> None:
    """A runner that is not wiped may hold an older runs-base/<cell> or cache entry: it counts only if
    its own provenance shows the merge base."""
    from verl_e2e.report import basecache

    run = _copy(TYPEERROR, tmp_path / "stale")
    other = "c" * 40
    fields = {"cell_id": "L0-lora-ddp-qwen", "merge_base": other, "environment": "verl-e2e:abc", "runner": "gpu-2"}
    assert basecache.store(tmp_path / "cache", fields, run) is None
    assert basecache.lookup(tmp_path / "cache", fields) is None
    here = judge_run_dir(_copy(TYPEERROR, tmp_path / "here"))
    result = compare(here, judge_run_dir(run), merge_base=other)
    assert result is not None and result["outcome"] == "unknown"
    assert f"not the merge base {other[:12]}" in result["reason"]


def test_an_old_merge_base_does_not_excuse_a_failure(tmp_path: Path) -> None:
    """A PR branched from an old broken commit fails the same way as that commit, but it never met the
    base branch's tip: the failure counts against it, with a rebase hint."""
    from verl_e2e.report.regression import counts_against_the_pr

    here = judge_run_dir(_copy(TYPEERROR, tmp_path / "here"))
    base = judge_run_dir(_copy(TYPEERROR, tmp_path / "base"))
    merge_base = _tested(tmp_path / "base" / "L0-lora-ddp-qwen")
    same = compare(here, base, merge_base=merge_base, base_tip=merge_base)
    assert same is not None and same["outcome"] == "pre-existing"
    behind = compare(here, base, merge_base=merge_base, base_tip="d" * 40)
    assert behind is not None and behind["outcome"] == "behind" and "rebase" in behind["reason"]
    from dataclasses import replace

    assert counts_against_the_pr(replace(here, comparison=behind), pre_existing_fails=False)
    assert not counts_against_the_pr(replace(here, comparison=same), pre_existing_fails=False)
