"""The CLI as users and workflows drive it: subprocesses for the contract, in-process for edge cases."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import ROOT

PLAN_KEYS = {
    "schema_version",
    "gpu_budget",
    "deferred",
    "requested",
    "levels",
    "families",
    "reasons",
    "skipped",
    "ignored",
    "cosmetic",
    "unmatched",
    "off_surface",
    "uncovered",
    "warnings",
    "cells",
    "gpu_minutes",
    "matrix",
    "context",
}
CELL_KEYS = {
    "id",
    "level",
    "variant",
    "family",
    "model",
    "dummy_config",
    "gpus",
    "runs_on",
    "timeout_minutes",
    "minutes",
    "phases",
    "checks",
    "limitations",
    "bridge_tests",
}


def test_help_lists_commands(subproc) -> None:
    result = subproc("--help")
    assert result.code == 0
    for command in ("plan", "validate", "families"):
        assert command in result.out


def test_example_plan_text(subproc) -> None:
    result = subproc("plan", "--example")
    assert result.code == 0, result.err
    assert "Selected levels:" in result.out and "Skipped levels:" in result.out
    assert "L4-expert-parallel-olmoe" in result.out
    assert "/verl-e2e level=1" in result.out


def test_json_contract_from_stdin(subproc) -> None:
    changes = "M\tsrc/megatron/bridge/models/conversion/model_bridge.py\nM\tdocs/a.md\n"
    result = subproc("plan", "--changed-files", "-", "--format", "json", stdin=changes)
    assert result.code == 0, result.err
    plan = json.loads(result.out)
    assert set(plan) == PLAN_KEYS
    assert plan["levels"] == [0, 1] and plan["families"] == ["qwen"]
    assert plan["reasons"]["1"][0]["rule"] == "hf-export"
    assert set(plan["skipped"]) == {"2", "3", "4", "5"}
    assert plan["ignored"] == {"docs": ["docs/a.md"]}
    assert all(set(c) == CELL_KEYS for c in plan["cells"])
    assert plan["gpu_minutes"] == sum(c["gpus"] * c["minutes"] for c in plan["cells"])
    assert [e["id"] for e in plan["matrix"]["include"]] == [c["id"] for c in plan["cells"]]


def test_json_is_byte_for_byte_stable(subproc, tmp_path: Path) -> None:
    changes = tmp_path / "c.txt"
    changes.write_text("M\tsrc/megatron/bridge/peft/lora.py\nA\tsrc/megatron/bridge/models/olmoe/olmoe_provider.py\n")
    first = subproc("plan", "--changed-files", str(changes), "--format", "json").out
    changes.write_text("A\tsrc/megatron/bridge/models/olmoe/olmoe_provider.py\nM\tsrc/megatron/bridge/peft/lora.py\n")
    assert subproc("plan", "--changed-files", str(changes), "--format", "json").out == first


def test_github_format_writes_outputs_and_summary(cli, tmp_path: Path) -> None:
    out, summary, plan_file = tmp_path / "out", tmp_path / "summary.md", tmp_path / "plan.json"
    out.write_text("earlier=1\n")
    env = {"GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary)}
    result = cli("plan", "--example", "--format", "github", "--out", str(plan_file), env=env)
    assert result.code == 0, result.err
    text = out.read_text()
    assert text.startswith("earlier=1\n")  # appended, never overwritten
    values = _parse_github_output(text)
    assert values["levels"] == "[0,4]" and values["has_cells"] == "true"  # paths only: Level 2 needs the diff
    matrix = json.loads(values["matrix"])
    assert {e["id"] for e in matrix["include"]} >= {"L0-lora-ddp-olmoe", "L4-expert-parallel-olmoe"}
    assert "## verl-e2e plan" in summary.read_text() and "| Cell | Level |" in summary.read_text()
    assert json.loads(plan_file.read_text())["levels"] == [0, 4]


def test_github_format_with_no_cells(cli, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = cli("plan", "--example", "docs-only", "--format", "github", env={"GITHUB_OUTPUT": str(out)})
    assert result.code == 0
    values = _parse_github_output(out.read_text())
    assert values == {
        "levels": "[]",
        "matrix": '{"include":[]}',
        "has_cells": "false",
        "verl_ref": "1dda039b9c6311889a9c9a26040677e1254814f9",  # the pinned verl commit, for the image job
        "merge_base": "",  # an example has no checkout
    }


def _parse_github_output(text: str) -> dict[str, str]:
    """Read the `name<<DELIM ... DELIM` blocks the way the Actions runner does."""
    values, lines, i = {}, text.splitlines(), 0
    while i < len(lines):
        if "<<" in lines[i]:
            name, delim = lines[i].split("<<", 1)
            end = lines.index(delim, i + 1)
            values[name] = "\n".join(lines[i + 1 : end])
            i = end
        i += 1
    return values


def test_repo_mode_end_to_end(subproc, tmp_path: Path) -> None:
    repo = tmp_path / "bridge"
    (repo / "src/megatron/bridge/models/qwen_vl").mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("config", "user.email", "ci@example.com")
    run("config", "user.name", "CI")
    (repo / "src/megatron/bridge/models/qwen_vl/qwen3_vl_provider.py").write_text("num_query_groups = 1\n")
    # as in Bridge, the family's package imports its provider (a module nothing names loads in no cell)
    (repo / "src/megatron/bridge/models/qwen_vl/__init__.py").write_text(
        "from megatron.bridge.models.qwen_vl.qwen3_vl_provider import num_query_groups\n"
    )
    run("add", "-A")
    run("commit", "-qm", "base")
    (repo / "src/megatron/bridge/models/qwen_vl/qwen3_vl_provider.py").write_text("num_query_groups = 2\n")
    run("commit", "-qam", "change")
    result = subproc("plan", "--repo", str(repo), "--base", "HEAD~1", "--format", "json")
    assert result.code == 0, result.err
    plan = json.loads(result.out)
    assert plan["families"] == ["qwen_vl"] and plan["levels"] == [0, 2, 4]
    assert {r["rule"] for r in plan["reasons"]["2"]} == {"aspect:parallel-layout"}
    assert plan["context"]["source"] == "git" and len(plan["context"]["head"]) == 40


BAD_INPUT = [
    (("plan", "--levels", "7", "--example"), "unknown level '7'"),
    (("plan", "--levels", "0,two"), "unknown level 'two'"),
    (("plan",), "nothing to plan"),
    (("plan", "--changed-files", "/nonexistent/changes.txt"), "cannot read it"),
    (("plan", "--levels", "0", "--family", "qwne"), "did you mean 'qwen'"),
    (("plan", "--repo", "/nonexistent"), "needs --base"),
    (("plan", "--repo", "/nonexistent", "--base", "main"), "no such directory"),
    (("plan", "--repo", str(ROOT / "ci"), "--base", "no-such-rev-xyz"), "is not a commit"),
    (("plan", "--example", "--changed-files", "x"), "both given"),
    (("plan", "--base", "main", "--example"), "need --repo"),
    (("plan", "--format", "yaml", "--example"), "invalid choice: 'yaml'"),
    (("plan", "--example", "--matrix", "/nonexistent.yaml"), "cannot read the matrix"),
    (("bogus",), "invalid choice: 'bogus'"),
    (("validate", "/nonexistent.yaml"), "cannot read it"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT)
def test_bad_input_exits_2_with_one_line(subproc, argv: tuple[str, ...], message: str) -> None:
    result = subproc(*argv)
    assert result.code == 2, (result.out, result.err)
    assert message in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err


def test_malformed_changed_files_line(subproc) -> None:
    result = subproc("plan", "--changed-files", "-", stdin="M\tsrc/a.py\nQ\tb.py\n")
    assert result.code == 2 and "line 2: unknown status 'Q'" in result.err


def test_invalid_matrix_exits_2(subproc, tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text((ROOT / "matrix.yaml").read_text().replace("timeout_minutes: 45", "timeout_minutes: soon", 1))
    result = subproc("plan", "--example", "--matrix", str(bad))
    assert result.code == 2 and "expected integer" in result.err and "Traceback" not in result.err
    listed = subproc("validate", str(bad))
    assert listed.code == 2 and "$.levels.0.variants.lora-ddp.timeout_minutes" in listed.err


def test_validate_shipped_and_families(subproc) -> None:
    assert subproc("validate").code == 0
    families = subproc("families")
    assert families.code == 0 and "qwen_vl" in families.out and "(dummy)" in families.out


EVIDENCE_KEYS = {
    "max_step",
    "step_lines",
    "progress_final",
    "saves",
    "resumed_from",
    "from_scratch",
    "exception",
    "failure_class",
    "nan_or_inf_in_metrics",
    "zero_grad_norm",
}


def test_evidence_json_for_a_bare_log(subproc, tmp_path: Path) -> None:
    from . import verl_log as V

    log = tmp_path / "manual.log"
    log.write_text(V.run(2, save_freq=1) + V.worker_traceback("KeyError", "'old_log_probs'"))
    result = subproc("evidence", str(log), "--format", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert set(data) >= EVIDENCE_KEYS
    assert (data["max_step"], data["saves"], data["exception"]["type"]) == (2, [1, 2], "KeyError")
    text = subproc("evidence", "-", stdin=log.read_text())
    assert text.code == 0 and "KeyError: 'old_log_probs'" in text.out and "failure class" in text.out


def test_judge_exit_codes_and_files(subproc, tmp_path: Path, matrix) -> None:
    from . import verl_log as V
    from .rundirs import cell_for, write_run_dir

    good = write_run_dir(
        tmp_path / "good",
        cell_for(matrix, 0),
        {"run": V.run(1)},
        bridge_tests={"status": "pass", "command": "pytest", "summary": "1 passed"},
    )
    bad = write_run_dir(
        tmp_path / "bad",
        cell_for(matrix, 0, "llama"),
        {"run": V.run(1) + V.worker_traceback("KeyError", "'x'")},
    )
    ok = subproc("judge", str(good))
    assert ok.code == 0, ok.err
    assert "Result: Pass" in ok.out and (good / "junit.xml").is_file()
    both = subproc("judge", str(good), str(bad), "--format", "json")
    assert both.code == 1
    assert [v["result"] for v in json.loads(both.out)] == ["Pass", "Fail"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("evidence", "/nonexistent.log"), "no such file"),
        (("judge", "/nonexistent-run-dir"), "not a directory"),
        (("judge", str(ROOT / "tests")), "no readable cell.json"),
    ],
)
def test_evidence_and_judge_bad_input(subproc, argv: tuple[str, ...], message: str) -> None:
    result = subproc(*argv)
    assert result.code == 2 and message in result.err and "Traceback" not in result.err
