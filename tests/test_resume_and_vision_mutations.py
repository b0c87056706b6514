"""The seventeenth batch's real runs (one H100, 2026-12-06), re-judged from their run dirs.

`tests/fixtures/mutation-runs/` keeps six runs of `tools/parallel_runs.sh` on Bridge 067f987 (verl 1dda039,
Megatron-Core 0.19.2, the tiny models of `tools/make_tiny_model.py`):
- `l1-qwen`: Level 1 on the tiny Qwen2, unmodified: the first real weight fingerprints of a save and a resume;
- `l1-qwen-adapter-filter-inverted`: the same cell with `tools/mutate_bridge.py adapter-filter-inverted` (the
  PEFT checkpoint filter keeps the frozen weights instead of the adapters). The old probe fingerprinted only
  the optimizer's fp32 copies, which the optimizer's own checkpoint restores exactly, so the run passed;
- `l1-qwen-b18` and `l1-qwen-adapter-filter-inverted-b18`: the same two cells in the eighteenth batch (one
  H100, 2026-12-06), with the probe that also fingerprints the model at each process's first step: the
  plain run passes and the mutation fails Level 1 as a checkpoint load;
- `l4vlm-qwen25_vl-vision-embeds-dropped` and `l4vlm-qwen_vl-deepstack-dropped`: Level 4's VLM cell with a
  picture per prompt against two vision-path mutations, both caught by the rollout-vs-trainer check.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.restore import restored

from .rundirs import unpack_kept


def _unpack(name: str, into: Path) -> Path:
    return unpack_kept("mutation-runs", name, into)


def _check(verdict: Any, name: str) -> Any:
    return next(c for c in verdict.checks if c.name == name)


def test_the_plain_level_1_run_resumes_from_the_saved_adapters_exactly(tmp_path: Path) -> None:
    v = judge_run_dir(_unpack("l1-qwen", tmp_path))
    resume = _check(v, "resume")
    assert (v.result, resume.result) == ("Pass", "Pass"), resume.detail
    # two optimizers (critic, actor), each with LoRA's 8 zero-initialised matrices moved by the saving run
    assert resume.detail.count("8 tensors training had moved from zero were restored, exactly") == 2


def _resume_first_steps(updates: dict[str, Any]) -> list[dict[str, Any]]:
    firsts: dict[tuple[int, int], dict[str, Any]] = {}
    for rec in updates["steps"]:
        if rec["phase"] == "resume":
            key = (rec["pid"], rec["optimizer"])
            if key not in firsts or rec["step"] < firsts[key]["step"]:
                firsts[key] = rec
    return list(firsts.values())


def test_the_inverted_adapter_filter_passed_on_the_optimizers_copies_alone(tmp_path: Path) -> None:
    """What the run recorded: every optimizer's fp32 copy came back exactly, though the model checkpoint
    held the frozen weights and not the adapters (verl loads the model's filtered the same way, then the
    optimizer's copies; nothing copies those into the model before the next step)."""
    run = _unpack("l1-qwen-adapter-filter-inverted", tmp_path)
    updates = json.loads((run / "updates.json").read_text())
    assert all("model_zero_before" not in r for r in updates["steps"])  # the probe before this batch's fix
    ok, why = restored(updates, "save", "resume")
    assert ok is True and "in the model itself" not in why
    assert "checkpointing.py:apply_peft_adapter_filter_to_state_dict" in json.dumps(judge_run_dir(run).coverage)


@pytest.mark.parametrize(("in_model", "result"), [(8, "Fail"), (0, "Pass")])
def test_the_models_own_weights_at_the_resumed_step_decide(tmp_path: Path, in_model: int, result: str) -> None:
    """The same run as the probe now records it: the model's trained weights at each resumed process's
    first step. With the inverted filter the model kept LoRA's fresh second matrices (8 all-zero tensors per
    optimizer, as before any training); a correct load leaves none."""
    run = _unpack("l1-qwen-adapter-filter-inverted", tmp_path)
    updates = json.loads((run / "updates.json").read_text())
    for rec in _resume_first_steps(updates):
        rec["model_zero_before"], rec["model_sum_before"] = in_model, rec["sum_before"]
    (run / "updates.json").write_text(json.dumps(updates))
    v = judge_run_dir(run)
    resume = _check(v, "resume")
    assert (v.result, resume.result) == (result, result), resume.detail
    if result == "Fail":
        assert v.failure_class == "checkpoint_load"
        assert "the model's own weights at the resumed run's first step were not the saved ones" in resume.detail
        assert "8 tensors were all zero in the model, where the saved state had 0" in resume.detail
    else:
        assert "restored and in the model itself, exactly" in resume.detail


def test_the_eighteenth_batch_probe_reads_the_models_own_weights_at_each_resume(tmp_path: Path) -> None:
    """The same Level 1 cell, unmodified, with the probe that fingerprints the model as well: every
    process's first step (save and resume) recorded the model's all-zero count beside the optimizer's."""
    run = _unpack("l1-qwen-b18", tmp_path)
    updates = json.loads((run / "updates.json").read_text())
    firsts = [r for r in updates["steps"] if "model_zero_before" in r]
    assert {r["phase"] for r in firsts} == {"save", "resume"} and len(firsts) == 4
    v = judge_run_dir(run)
    resume = _check(v, "resume")
    assert (v.result, resume.result) == ("Pass", "Pass"), resume.detail
    assert resume.detail.count("restored and in the model itself, exactly") == 2


def test_the_inverted_adapter_filter_now_fails_level_1_on_the_real_run(tmp_path: Path) -> None:
    """The mutation that passed in the seventeenth batch, run again with the fixed probe: at the resumed
    step the model still held LoRA's 8 fresh all-zero matrices per optimizer, while the optimizer's fp32
    copies had none (they came back exactly), so the first resumed forward ran on untrained adapters."""
    run = _unpack("l1-qwen-adapter-filter-inverted-b18", tmp_path)
    updates = json.loads((run / "updates.json").read_text())
    resumed = _resume_first_steps(updates)
    assert [(r["model_zero_before"], r["zero_before"]) for r in resumed] == [(8, 0), (8, 0)]
    v = judge_run_dir(run)
    resume = _check(v, "resume")
    assert (v.result, v.failure_class, resume.result) == ("Fail", "checkpoint_load", "Fail")
    assert "8 tensors were all zero in the model, where the saved state had 0" in resume.detail
    assert "checkpointing.py:apply_peft_adapter_filter_to_state_dict" in json.dumps(v.coverage)


@pytest.mark.parametrize(
    ("name", "changed", "figure"),
    [
        ("l4vlm-qwen25_vl-vision-embeds-dropped", "Qwen25VLModel.forward", "KL 0.0262"),
        ("l4vlm-qwen_vl-deepstack-dropped", "Qwen3VLTransformerBlock._deepstack_process", "correlation 0.9925"),
    ],
)
def test_a_vision_forward_that_drops_its_features_fails_and_points_at_the_forward(
    tmp_path: Path, name: str, changed: str, figure: str
) -> None:
    v = judge_run_dir(_unpack(name, tmp_path))
    check = _check(v, "rollout_matches_trainer")
    assert (v.result, v.failure_class, check.result) == ("Fail", "rollout_weights", "Fail")
    assert figure in check.detail and changed in v.headline
    advice = " ".join(v.follow_ups)
    assert "model code only the trainer runs" in advice and changed in advice
    assert "check the Megatron->HF export mappings" not in advice  # no mapping changed: not the weights' fault
