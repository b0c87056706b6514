"""Whose code failed and where: owners per frame, the culprit on the failing path, "in this PR's
change", advice by owner, saves that completed, and the Megatron-Core that ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_e2e.judge.evidence import parse_bytes
from verl_e2e.judge.judging import judge_run_dir

from . import verl_log as V
from .conftest import SHARED
from .rundirs import cell_for, write_run_dir

VERL = "/workspace/verl/verl"
BRIDGE = "/workspace/Megatron-Bridge/src/megatron/bridge"
MCORE = "/workspace/Megatron-Bridge/3rdparty/Megatron-LM/megatron/core"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
OUTER = (
    ("main", f"{VERL}/trainer/main_ppo.py", 42),
    ("init_model", f"{VERL}/workers/megatron_workers.py", 310),
    ("provide_distributed_model", f"{BRIDGE}/models/model_provider.py", 210),
)


def _traceback(exc: str, message: str, frames: tuple[tuple[str, str, int], ...]) -> str:
    body = "".join(f'  File "{path}", line {line}, in {func}\n    pass\n' for func, path, line in frames)
    return f"{V.WORKER}Traceback (most recent call last):\n{body}{exc}: {message}\n"


def _ev(text: str):
    return parse_bytes((V.trace() + V.TASK + "starting\n" + text).encode())


def test_a_bridge_frame_that_raised_is_the_culprit_with_its_file_and_line() -> None:
    frames = (*OUTER, ("transform", f"{BRIDGE}/peft/lora.py", 231))
    ev = _ev(
        _traceback("TypeError", "ParallelLinearAdapter.__init__() got an unexpected keyword argument 'rank'", frames)
    )
    assert ev.failure_class == "model_build" and ev.culprit is not None
    culprit = ev.culprit["culprit"]
    assert (culprit["owner"], culprit["path"], culprit["line"], culprit["function"]) == (
        "Megatron-Bridge",
        "src/megatron/bridge/peft/lora.py",
        231,
        "transform",
    )
    assert "LoRA target modules" in (ev.hint or "")  # the PEFT hint, not the provider one


def test_verl_raising_with_bridge_only_as_a_caller_reads_as_a_compatibility_problem() -> None:
    """Run 03's shape: Bridge's composed_hook calls verl's peft hook, whose unwrap_model raises."""
    frames = (
        *OUTER,
        ("composed_hook", f"{BRIDGE}/models/model_provider.py", 363),
        ("peft_info_hook", f"{VERL}/utils/megatron_peft_utils.py", 88),
        ("unwrap_model", f"{VERL}/utils/megatron_utils.py", 525),
    )
    ev = _ev(_traceback("TypeError", "isinstance() arg 2 must be a type, a tuple of types, or a union", frames))
    assert ev.culprit is not None
    assert ev.culprit["culprit"]["owner"] == "verl" and ev.culprit["culprit"]["function"] == "unwrap_model"
    assert "Megatron-Bridge" not in ev.culprit["owners"]
    assert "no Bridge frame on the failing path (Bridge's composed_hook only called into verl)" in ev.culprit["chain"]
    assert ev.hint is None  # the provider hint would send the author to the wrong code


def test_a_megatron_core_raise_under_a_bridge_call_names_the_bridge_caller() -> None:
    frames = (
        *OUTER,
        ("provide", f"{BRIDGE}/models/gpt_provider.py", 150),
        ("__init__", f"{MCORE}/transformer/transformer_config.py", 700),
        ("_check", f"{TORCH}/utils/_contextlib.py", 12),
    )
    ev = _ev(_traceback("ValueError", "num_attention_heads must be a multiple of tensor_model_parallel_size", frames))
    assert ev.culprit is not None
    assert ev.culprit["raised_in"]["owner"] == "torch"
    assert ev.culprit["culprit"]["path"] == "src/megatron/bridge/models/gpt_provider.py"
    assert "called from Megatron-Bridge's provide" in ev.culprit["chain"]
    assert "mpu parallel sizes" in (ev.hint or "")  # a Bridge provider frame is on the path


def _run(matrix, root: Path, log: str, provenance: dict | None = None, changes: dict | None = None) -> Path:
    cell = cell_for(matrix, 0)
    run = write_run_dir(root / cell.id, cell, {"run": log}, statuses={"run": "failed"})
    if provenance:
        data = json.loads((run / "provenance.json").read_text())
        (run / "provenance.json").write_text(json.dumps(data | provenance))
    if changes is not None:
        (run / "changes.json").write_text(json.dumps(changes))
    return run


def test_the_vanilla_mbridge_package_is_its_own_owner_not_bridge() -> None:
    """verl with vanilla_mbridge=True builds through the mbridge package (ISEEKYAN/mbridge): a raise there
    is neither Megatron-Bridge's nor "other" (verl issue #6936's ModelType.encoder_and_decoder)."""
    mbridge = "/usr/local/lib/python3.12/site-packages/mbridge/core"
    frames = (
        ("_build_model_optimizer", f"{VERL}/workers/megatron_workers.py", 300),
        ("get_model", f"{mbridge}/bridge.py", 120),
        ("build_model", f"{mbridge}/util.py", 83),
    )
    ev = _ev(_traceback("AttributeError", "type object 'ModelType' has no attribute 'encoder_and_decoder'", frames))
    assert ev.culprit is not None
    assert ev.culprit["owners"] == ["verl", "mbridge"]
    assert ev.culprit["chain"].startswith("raised in mbridge (mbridge/core/util.py:83 in build_model)")
    assert ev.culprit["chain"].endswith("; no Bridge frame")


def test_the_headline_says_when_the_failing_frame_is_in_lines_this_pr_changed(matrix, tmp_path: Path) -> None:
    frames = (*OUTER, ("transform", f"{BRIDGE}/peft/lora.py", 231))
    log = V.trace() + V.TASK + _traceback("TypeError", "unexpected keyword argument 'rank'", frames)
    lines = {"src/megatron/bridge/peft/lora.py": [[229, 232]]}
    changed = _run(matrix, tmp_path / "a", log, changes={"lines": lines, "functions": {}})
    verdict = judge_run_dir(changed)
    assert "in code this PR changed: `src/megatron/bridge/peft/lora.py:231` in `transform`" in verdict.headline
    other = {"lines": {"src/megatron/bridge/peft/lora.py": [[1, 9]]}, "functions": {}}
    elsewhere = judge_run_dir(_run(matrix, tmp_path / "b", log, changes=other))
    assert "at src/megatron/bridge/peft/lora.py:231 in transform; not in code this PR changed" in elsewhere.headline
    inside = {
        "lines": {"src/megatron/bridge/peft/lora.py": [[235, 235]]},
        "functions": {"src/megatron/bridge/peft/lora.py": ["LoRA.transform"]},
    }
    verdict = judge_run_dir(_run(matrix, tmp_path / "c", log, changes=inside))
    assert (
        "in a function this PR changed: `LoRA.transform` at `src/megatron/bridge/peft/lora.py:231`" in verdict.headline
    )


def test_a_verl_megatron_failure_names_both_versions_and_no_provider_advice(matrix, tmp_path: Path) -> None:
    frames = (*OUTER[:2], ("unwrap_model", f"{VERL}/utils/megatron_utils.py", 525))
    log = V.trace() + V.TASK + _traceback("TypeError", "isinstance() arg 2 must be a type", frames)
    provenance = {
        "megatron_lm": "/workspace/Megatron-Bridge/3rdparty/Megatron-LM",
        "megatron_lm_commit": "2a75ac1" + "0" * 33,
    }
    verdict = judge_run_dir(_run(matrix, tmp_path, log, provenance))
    (follow,) = verdict.follow_ups
    assert follow.startswith("reads as a verl/Megatron-Core compatibility problem, no Bridge frame on the failing path")
    assert "if the merge base passes this cell" in follow  # no Bridge frame is not proof of innocence
    assert "verl 1dda039 with the PR's 3rdparty/Megatron-LM submodule at 2a75ac100000" in follow
    assert "mpu" not in " ".join(verdict.follow_ups)


def test_a_save_that_raised_is_not_counted(matrix, tmp_path: Path) -> None:
    ckpt = "/tmp/verl-e2e-work/checkpoints/verl-test/x/global_step_1"
    frames = (
        ("fit", f"{VERL}/trainer/ppo/ray_trainer.py", 900),
        ("save_checkpoint", f"{VERL}/utils/checkpoint/megatron_checkpoint_manager.py", 400),
        ("apply_peft_adapter_filter_to_state_dict", f"{BRIDGE}/peft/utils.py", 77),
    )
    log = (
        V.run(1)
        + f"INFO:2026-12-01 10:00:00,000:Saving checkpoint to {ckpt}\n"
        + _traceback("KeyError", "'adapter'", frames)
    )
    ev = parse_bytes(log.encode())
    assert ev.failure_class == "checkpoint_save" and ev.saves == []
    done = parse_bytes((V.run(1) + f"INFO:2026-12-01 10:00:00,000:Saving checkpoint to {ckpt}\n").encode())
    assert done.saves == [1]  # a save nothing broke off still counts from its start line


def test_installed_megatron_core_is_a_stated_limitation(matrix, tmp_path: Path) -> None:
    cell = cell_for(matrix, 0)
    run = write_run_dir(tmp_path / cell.id, cell, {"run": V.run(1)})
    data = json.loads((run / "provenance.json").read_text())
    data |= {"megatron_lm": "installed", "environment": {"megatron_core": {"version": "0.19.2"}}}
    (run / "provenance.json").write_text(json.dumps(data))
    verdict = judge_run_dir(run)
    assert verdict.result == "Pass"
    assert any(
        "megatron-core 0.19.2 installed in the environment, not the PR's pinned" in x for x in verdict.limitations
    )


@pytest.mark.parametrize("name", ["03-verl-vs-mcore-unwrap-model-typeerror"])
def test_the_real_verl_megatron_incompatibility_is_not_blamed_on_bridge(name: str, tmp_path: Path) -> None:
    import shutil

    run = Path(shutil.copytree(SHARED / "reference/real-runs" / name, tmp_path / "run"))
    verdict = judge_run_dir(run)
    assert verdict.result == "Fail" and verdict.failure_class == "model_build"
    assert "raised in verl (verl/utils/megatron_utils.py:525 in unwrap_model)" in verdict.headline
    assert verdict.follow_ups[0].startswith("reads as a verl/Megatron-Core compatibility problem")


@pytest.mark.parametrize(
    ("log", "klass"),
    [
        ("46_fsdp-32b-save_checkpoint-ray-host-oom.log", "oom"),
        ("37_megatron-init_model-mbridge-broadcast_params-DistBackendError.log", "nccl"),
        ("17_fsdp-grpo-ImportError-LlamaFroCausalLM-init_model.log", "model_build"),
    ],
)
def test_an_oom_a_collective_or_an_import_is_not_read_as_a_verl_megatron_incompatibility(
    matrix, tmp_path: Path, log: str, klass: str
) -> None:
    """No Bridge frame on their paths either, but each names its own cause; the follow-up says that one."""
    text = (SHARED / "reference/verl-logs" / log).read_text(errors="replace")
    verdict = judge_run_dir(_run(matrix, tmp_path, text))
    assert verdict.failure_class == klass, verdict.headline
    assert not any("compatibility problem" in f for f in verdict.follow_ups), verdict.follow_ups
