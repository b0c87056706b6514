"""Weights Bridge's HF import could not find: read from the log, stated, and failed when the PR named them."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_e2e.judge import parallel
from verl_e2e.judge.evidence import parse_bytes
from verl_e2e.judge.parallel import parse_file
from verl_e2e.judge.weights import check, from_change, limitation
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import changed_names, files_from_diff, with_diff

# the two warning forms Bridge 067f987's model_bridge.py prints (a Ray worker's prefix and logging's own)
SINGLE = "\x1b[36m(WorkerDict pid=7498)\x1b[0m WARNING:2026-12-02 07:22:01,420:WARNING: Can't find {} in hf_keys\n"
MANY = "(WorkerDict pid=7498) WARNING: Can't find the following HF parameters in hf_keys: ['{}', '{}']\n"
CHANGE = {"names": {"src/megatron/bridge/models/qwen/qwen2_bridge.py": ["model.layers.*.mlp.down_proj.weights"]}}


def test_both_warning_forms_are_read_once_each() -> None:
    log = (
        SINGLE.format("model.layers.0.mlp.down_proj.weights")
        + "step:1 - actor/pg_loss:0.1\n"
        + MANY.format("model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight")
        + SINGLE.format("model.layers.0.mlp.down_proj.weights")  # the export pass repeats the import's warning
    ).encode()
    ev = parse_bytes(log)
    assert ev.skipped_weights == [
        "model.layers.0.mlp.down_proj.weights",
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight",
    ]


def test_a_log_split_across_workers_keeps_every_skipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)  # split even a small log into byte ranges
    filler = "".join(f"step:{i} - actor/pg_loss:0.{i}\n" for i in range(1, 40_000)).encode()
    log = tmp_path / "run.log"
    log.write_bytes(SINGLE.format("lm_head.weight").encode() + filler + SINGLE.format("a.b.weight").encode())
    assert parse_file(log, workers=3).skipped_weights == ["lm_head.weight", "a.b.weight"]


def test_a_wildcard_matches_one_name_part_only() -> None:
    assert from_change(["model.layers.0.mlp.down_proj.weights"], CHANGE)
    assert not from_change(["model.layers.0.mlp.down_proj.weight"], CHANGE)  # not the name the PR wrote
    assert not from_change(["model.layers.0.extra.mlp.down_proj.weights"], CHANGE)  # * is one part, not a path
    assert not from_change(["model.layers.0.mlp.down_proj.weights"], None)  # no plan context: nothing to blame


def test_a_gap_the_change_did_not_name_is_a_limitation_not_a_failure() -> None:
    assert check(["lm_head.weight"], CHANGE) is None
    assert "lm_head.weight" in (limitation(["lm_head.weight"]) or "")
    assert limitation([]) is None
    failed = check(["lm_head.weight", "model.layers.1.mlp.down_proj.weights"], CHANGE)
    assert failed is not None and failed.result == "Fail"
    assert "`model.layers.1.mlp.down_proj.weights`" in failed.detail and "qwen2_bridge.py" in failed.detail


def test_the_plan_records_the_names_on_added_lines_only() -> None:
    diff = (
        "diff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n@@ -1,2 +1,2 @@\n"
        ' x = {\n-    "a.weight": "model.old.weight",\n+    "a.weight": "model.new.weight",  # \'not.a name\'\n'
    )
    files = with_diff(files_from_diff(parse_unified_diff(diff)), parse_unified_diff(diff))
    assert changed_names(files) == {"src/m.py": ["a.weight", "model.new.weight"]}
