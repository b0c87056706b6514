"""Every kept real GPU run dir, re-judged: the verdict a careful reader gives.

Two sources, both real verl 1dda039 runs on one H200: the five first runs in
../shared/reference/real-runs/ (read in place, copied to tmp only because judging writes its
records), and our own in tests/fixtures/real-runs/ (see its README for how each was made).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict, render_text
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import changed_names, files_from_diff, with_diff
from verl_e2e.report.comment import Context, render

from .conftest import SHARED

OURS = Path(__file__).parent / "fixtures" / "real-runs"
THEIRS = SHARED / "reference" / "real-runs"
DELIVERABLE_VALUES = {"Pass", "Fail", "Skipped", "Not requested"}


def _judge(src: Path, tmp_path: Path) -> Verdict:
    if not src.is_dir():
        pytest.fail(f"{src} is missing: the real run dirs are part of the test data")
    run = tmp_path / src.name
    shutil.copytree(src, run)
    for written in ("verdict.json", "evidence.json", "junit.xml"):
        (run / written).unlink(missing_ok=True)  # judged afresh, not read back
    verdict = judge_run_dir(run)
    assert {d.result for d in verdict.deliverables} <= DELIVERABLE_VALUES
    return verdict


def test_01_missing_nvtx_is_blocked_before_any_model_was_built(tmp_path: Path) -> None:
    v = _judge(THEIRS / "01-blocked-missing-nvtx", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert any("No module named 'nvtx'" in k for k in v.key_lines)
    assert "checkpoint" not in " ".join(v.follow_ups)


def test_02_gradient_accumulation_fusion_names_apex(tmp_path: Path) -> None:
    v = _judge(THEIRS / "02-gradient-accumulation-fusion-needs-apex", tmp_path)
    assert v.result in ("Blocked", "Fail") and v.failure_class == "setup", v.headline
    text = v.headline + " ".join(v.follow_ups)
    assert "gradient_accumulation_fusion" in text and "APEX" in text


def test_03_unwrap_model_typeerror_fails_in_model_build(tmp_path: Path) -> None:
    v = _judge(THEIRS / "03-verl-vs-mcore-unwrap-model-typeerror", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    assert any(k.startswith("TypeError: isinstance() arg 2 must be a type") for k in v.key_lines)


def test_04_names_the_attention_backend(tmp_path: Path) -> None:
    v = _judge(THEIRS / "04-mcore-0.19-te-no-attention-backend", tmp_path)
    assert v.failure_class == "setup", v.headline
    assert "No dot product attention backend" in v.headline
    assert any("attention_backend=auto" in f for f in v.follow_ups)


def test_05_passes(tmp_path: Path) -> None:
    v = _judge(THEIRS / "05-pass-level0-mcore-0.19-attention-auto", tmp_path)
    assert v.result == "Pass", v.headline


def test_our_level0_passes_with_step_and_worker_import(tmp_path: Path) -> None:
    v = _judge(OURS / "06-pass-level0-one-gpu", tmp_path)
    assert v.result == "Pass", v.headline
    assert {"VANILLA_MBRIDGE=False", "Training Progress: 1/1", "training/global_step:1"} <= set(v.key_lines)
    imported = next(d for d in v.deliverables if d.name == "Local Bridge import in verl")
    assert imported.result == "Pass" and "/Megatron-Bridge/src/megatron/bridge/" in imported.detail
    assert "ran on 1 GPU(s) instead of the plan's 2" in v.limitations
    # the Command line reproduces the run: working dir, the cell's variables, the wrapper's arguments
    assert v.command is not None and v.command.startswith("cd /tmp/node/verl && env ")
    assert "NUM_GPUS=1" in v.command and "gradient_accumulation_fusion=False" in v.command


def test_our_level1_passes_with_save_resume_and_tracker(tmp_path: Path) -> None:
    v = _judge(OURS / "07-pass-level1-save-resume-one-gpu", tmp_path)
    assert v.result == "Pass", v.headline
    wanted = {"[save] saved global_step_1", "[resume] resumed from global_step_1", "[resume] training/global_step:2"}
    assert wanted <= set(v.key_lines)
    resume = next(c for c in v.checks if c.name == "resume")
    assert resume.result == "Pass" and "tracker 2" in resume.detail
    assert "Image: none (local backend" in render_text(v)


def test_our_level1_without_modelopt_is_blocked(tmp_path: Path) -> None:
    v = _judge(OURS / "08-blocked-level1-save-missing-modelopt", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "No module named 'modelopt'" in v.headline


def test_our_level0_with_the_default_settings_passes_on_the_fallback_megatron(tmp_path: Path) -> None:
    """Bridge 067f987 as a clone has it (its submodule pinned to 2a75ac1), run with no --megatron-lm:
    the compatibility record knows verl 1dda039 fails with that commit, so the cell ran the installed
    megatron-core and says so; every process recorded the Bridge functions it ran."""
    v = _judge(OURS / "09-pass-level0-defaults-megatron-fallback", tmp_path)
    assert v.result == "Pass", v.headline
    assert any(x.startswith("known incompatibility: verl 1dda039") and "2a75ac1" in x for x in v.limitations)
    assert any("megatron-core 0.19.2 installed in the environment" in x for x in v.limitations)
    records = json.loads((OURS / "09-pass-level0-defaults-megatron-fallback/bridge-functions.json").read_text())
    ran = {(f["file"], f["qualname"]) for f in records["functions"]}
    assert ("src/megatron/bridge/peft/lora.py", "LoRA.transform") in ran  # reached only by a value and a string import
    assert records["processes"]["run"] > 10  # the driver, Ray workers and their children each wrote records


def test_our_lora_keyword_mutation_fails_in_the_changed_function(tmp_path: Path) -> None:
    """tools/mutate_bridge.py lora-keyword (mutation.diff), planned from the checkout and run for real."""
    v = _judge(OURS / "10-fail-level0-mutation-lora-keyword", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "model_build")
    assert "TypeError: ParallelLinearAdapter.__init__() got an unexpected keyword argument 'dropout_pos'" in v.headline
    assert "in a function this PR changed: `transform` at `src/megatron/bridge/peft/lora.py:255`" in v.headline
    assert v.follow_ups[0].startswith("check the LoRA target modules")  # the PEFT hint, not the provider one


def test_our_level1_records_the_save_path_that_level0_never_runs(tmp_path: Path) -> None:
    """Level 1 on the defaults (fallback Megatron-Core), every process tracing: the save and resume
    phases ran Bridge's PEFT state-dict filter, which the Level 0 record (09) never shows."""
    v = _judge(OURS / "11-pass-level1-save-resume-records", tmp_path)
    assert v.result == "Pass", v.headline
    assert {"[save] saved global_step_1", "[resume] resumed from global_step_1"} <= set(v.key_lines)

    def ran(run: str) -> set[tuple[str, str]]:
        records = json.loads((OURS / run / "bridge-functions.json").read_text())
        return {(f["file"], f["qualname"]) for f in records["functions"]}

    save_filter = ("src/megatron/bridge/training/checkpointing.py", "apply_peft_adapter_filter_to_state_dict")
    assert save_filter in ran("11-pass-level1-save-resume-records")
    assert save_filter not in ran("09-pass-level0-defaults-megatron-fallback")


def test_our_tiny_moe_level0_passes_and_records_the_moe_path(tmp_path: Path) -> None:
    """The qwen3_moe family's Level 0 on tools/make_tiny_moe.py's 8-expert model (one GPU, EP=1)."""
    v = _judge(OURS / "12-pass-level0-tiny-qwen3-moe", tmp_path)
    assert v.result == "Pass", v.headline
    assert v.family == "qwen3_moe" and v.model == "local/tiny-qwen3-moe"
    assert "MoE at COMMON_EP=1: expert routing across ranks is not stressed" in v.limitations
    records = json.loads((OURS / "12-pass-level0-tiny-qwen3-moe/bridge-functions.json").read_text())
    files = {f["file"] for f in records["functions"]}
    assert "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py" in files


def test_our_save_filter_mutation_fails_at_save_in_the_changed_function(tmp_path: Path) -> None:
    """tools/mutate_bridge.py save-filter: the Level 0 record alone planned only Level 0 for it
    (plan-before.txt), which never saves; with the Level 1 record the plan selects Level 1, and that
    cell fails at the save, naming the changed line. No save is counted."""
    run = OURS / "13-fail-level1-mutation-save-filter"
    assert "Level 1  Save/resume: no changed path matched" in (run / "plan-before.txt").read_text()
    v = _judge(run, tmp_path)
    assert (v.result, v.failure_class, v.failed_phase) == ("Fail", "checkpoint_save", "save")
    assert "AttributeError: 'dict' object has no attribute 'item'" in v.headline
    assert (
        "in code this PR changed: `src/megatron/bridge/training/checkpointing.py:3356` in "
        "`apply_peft_adapter_filter_to_state_dict`" in v.headline
    )
    saves = next(c for c in v.checks if c.name == "saves")
    assert saves.result == "Fail" and "saved nothing" in saves.detail


def test_our_provider_field_mutation_fails_in_the_changed_line_with_the_mapping_hint(tmp_path: Path) -> None:
    """tools/mutate_bridge.py provider-field: Qwen2Bridge reads a config key Qwen2's HF config lacks. The
    plan selects Level 0 (plan.txt); the cell fails building the model at the changed line, and the
    advice is about the bridge's HF mapping, not the provider's parallel sizes."""
    run = OURS / "14-fail-level0-mutation-provider-field"
    assert "a real L0-lora-ddp-qwen run executed the changed code" in (run / "plan.txt").read_text()
    v = _judge(run, tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "model_build")
    assert "AttributeError: 'Qwen2Config' object has no attribute 'qkv_bias'" in v.headline
    assert (
        "in code this PR changed: `src/megatron/bridge/models/qwen/qwen2_bridge.py:53` in `provider_bridge`"
        in v.headline
    )
    assert v.follow_ups[0].startswith("check what the model bridge reads from the HF config")
    assert not any("mpu parallel sizes" in x for x in v.follow_ups)


def test_a_frame_outside_the_change_still_names_the_changed_code_the_cell_ran(tmp_path: Path) -> None:
    """Run 14's failure re-judged as if the PR had changed another function the cell ran (Bridge's HF
    config reader): the failing frame is not the PR's, so the headline says so, and the follow-ups add
    the changed function that ran before it, the next place to look."""
    run = tmp_path / "run"
    shutil.copytree(OURS / "14-fail-level0-mutation-provider-field", run)
    path = "src/megatron/bridge/models/conversion/model_bridge.py"
    changed = {"lines": {path: [[1, 1]]}, "functions": {path: ["MegatronModelBridge.hf_config_to_provider_kwargs"]}}
    (run / "changes.json").write_text(json.dumps(changed))
    v = _judge(run, tmp_path / "judged")
    assert "qwen2_bridge.py:53 in provider_bridge; not in code this PR changed" in v.headline
    assert v.follow_ups[-1] == (
        "the failing frame is outside this PR's lines, but this cell ran the changed "
        f"`MegatronModelBridge.hf_config_to_provider_kwargs` ({path})"
    )


def test_our_nan_scaling_mutation_fails_level0_though_every_phase_exited_0(tmp_path: Path) -> None:
    """tools/mutate_bridge.py nan-scaling: the adapter output divided by its own max (0/0 with the
    zero-initialised LoRA B). verl finished step 1 and exited 0 with every loss NaN; Level 0 lists no
    `no_nan` check, and the landed judge called it a Pass (verdict.json as the run left it). NaN/Inf
    losses fail any level, and with no traceback the verdict names the changed code the cell ran."""
    run = OURS / "15-fail-level0-mutation-nan-scaling"
    assert json.loads((run / "verdict.json").read_text())["result"] == "Pass"  # the judge at the time
    v = _judge(run, tmp_path)
    assert (v.result, v.failure_class, v.failed_phase) == ("Fail", "nan", "run")
    assert "step 1: actor/entropy=nan" in v.headline
    assert "changed code this cell ran: `ParallelLinearAdapter.forward` (src/megatron/bridge/peft/utils.py)" in (
        v.headline
    )
    assert next(c for c in v.checks if c.name == "no_nan").result == "Fail"
    backend = next(d for d in v.deliverables if d.name == "verl Megatron backend run")
    assert backend.result == "Fail" and "NaN/Inf" in backend.detail
    assert v.follow_ups[0].startswith("no traceback to name a frame")


def test_our_export_name_mutation_fails_once_the_plan_names_what_it_wrote(tmp_path: Path) -> None:
    """tools/mutate_bridge.py export-name: a mapping's HF name mistyped. Bridge's import skipped the two
    down_proj weights with a warning and the run passed on an initialised MLP (verdict.json as the run
    left it: the plan of the time recorded no names). Re-judged as left, the rollout-vs-trainer check
    fails it (the rollout engine read the real down_proj from disk, the trainer an initialised one);
    re-planned from mutation.diff by today's plan stage, the change names
    "model.layers.*.mlp.down_proj.weights", and the cell fails naming both."""
    run = OURS / "16-pass-level0-mutation-export-name-missed"
    assert json.loads((run / "verdict.json").read_text())["result"] == "Pass"
    as_left = _judge(run, tmp_path / "as-left")
    assert (as_left.result, as_left.failure_class) == ("Fail", "rollout_weights"), as_left.headline
    assert any("model.layers.0.mlp.down_proj.weights" in x for x in as_left.limitations)
    diff = (run / "mutation.diff").read_text()
    files = with_diff(files_from_diff(parse_unified_diff(diff)), parse_unified_diff(diff))
    changes = json.loads((run / "changes.json").read_text()) | {"names": changed_names(files)}
    replanned = tmp_path / "replanned"
    shutil.copytree(run, replanned)
    (replanned / "changes.json").write_text(json.dumps(changes))
    v = _judge(replanned, tmp_path / "judged")
    assert (v.result, v.failure_class) == ("Fail", "model_build")
    loaded = next(c for c in v.checks if c.name == "weights_loaded")
    assert "`model.layers.0.mlp.down_proj.weights`" in loaded.detail and "qwen2_bridge.py" in loaded.detail
    assert "lm_head.weight" not in loaded.detail  # skipped on the base too: not this change's doing
    assert not any("mpu parallel sizes" in x for x in v.follow_ups)


def test_our_dispatcher_mutation_passes_because_verl_sets_that_field_itself(tmp_path: Path) -> None:
    """tools/mutate_bridge.py dispatcher-type: Qwen3MoEBridge sets a dispatcher name Megatron-Core rejects,
    but verl's engine overrides moe_token_dispatcher_type on the provider ("alltoall") before building
    the model, so under verl the change has no effect: a true Pass, on the MoE family the plan chose
    from the executed-code record, and the verdict says the changed function ran."""
    run = OURS / "17-pass-level0-mutation-dispatcher-type-masked"
    assert "a real L0-lora-ddp-qwen3_moe run executed the changed code" in (run / "plan.txt").read_text()
    v = _judge(run, tmp_path)
    assert (v.result, v.family) == ("Pass", "qwen3_moe")
    assert v.coverage is not None and v.coverage["executed"] == [
        "src/megatron/bridge/models/qwen/qwen3_moe_bridge.py:Qwen3MoEBridge.provider_bridge"
    ]


def test_the_fallback_megatron_is_said_once_at_the_top_of_the_comment(tmp_path: Path) -> None:
    """Two real cells that ran the compatibility fallback: one notice under the headline, not one per cell."""
    runs = ("09-pass-level0-defaults-megatron-fallback", "11-pass-level1-save-resume-records")
    body = render([_judge(OURS / name, tmp_path) for name in runs], Context())
    assert body.count("**Megatron-Core:**") == 1
    top = body.split("| Cell |", 1)[0]
    assert "verl 1dda039 does not run with the pinned Megatron-LM 2a75ac1" in top


def test_18_an_import_time_error_fails_in_seconds_before_ray(tmp_path: Path) -> None:
    """tools/mutate_bridge.py import-error, run with tools/parallel_runs.sh: peft/utils.py imports a name
    activation_map does not have. The driver imported every Bridge module verl imports before Ray
    started: the cell stopped 26 s into its import step (its phase never ran), and the verdict names
    the PR's line; 'Local Bridge import in verl' is not a Pass."""
    run = OURS / "18-fail-level0-mutation-import-error-before-ray"
    v = _judge(run, tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    assert "failed before Ray started: ImportError: cannot import name 'str_to_torch_dtype'" in v.headline
    assert "in code this PR changed: `src/megatron/bridge/peft/utils.py:46`" in v.headline
    imported = next(d for d in v.deliverables if d.name == "Local Bridge import in verl")
    assert imported.result == "Fail"
    steps = json.loads((run / "provenance.json").read_text())["steps"]
    assert [s["name"] for s in steps][-1] == "imports" and sum(s["duration_s"] for s in steps) < 60
    assert json.loads((run / "phases.json").read_text())[0]["status"] == "not_run"


def test_19_a_missing_flashinfer_is_named_behind_vllms_engine_error(tmp_path: Path) -> None:
    """SmolLM2-135M at Level 0: vLLM 0.24's V2 model runner (Llama's default) imports FlashInfer for
    its sampler, which the node lacks; the worker's traceback is printed behind vLLM's process tag and
    logger prefix, and the engine's own error only says 'See root cause above'. Blocked, naming the
    missing module, before any model was built (the preflight now sets VLLM_USE_FLASHINFER_SAMPLER=0)."""
    v = _judge(OURS / "19-blocked-level0-smollm2-vllm-without-flashinfer", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "ModuleNotFoundError: No module named 'flashinfer'" in v.headline
    assert "Engine core initialization failed" not in v.headline
    assert any("flashinfer" in f for f in v.follow_ups)


# --- 2026-12-03: eight cells at once on one H200 (tools/parallel_runs.sh, before each cell had its own /tmp) ---


def test_20_level0_on_the_smoke_profile_passes_with_its_time_split(tmp_path: Path) -> None:
    """The tiny Qwen2's Level 0 with 256-token prompts and 64-token answers: every role built, weights
    synced, one PPO step; the optimizer hooks saw both optimizers move, the rollout agreed with the
    trainer, and the verdict says where the time went (eight cells shared the node: start-up dominates)."""
    run = OURS / "20-pass-level0-tiny-qwen2-smoke-profile"
    v = _judge(run, tmp_path)
    assert v.result == "Pass", v.headline
    checks = {c.name: c for c in v.checks}
    assert checks["update_nonzero"].result == "Pass" and "2 optimizer(s)" in checks["update_nonzero"].detail
    assert checks["rollout_matches_trainer"].result == "Pass"
    assert v.timings is not None and v.timings["phases"][0]["steps"] == 1
    assert json.loads((run / "cell.json").read_text())["phases"][0]["env"]["MAX_RESPONSE_LENGTH"] == "64"
    lines = json.loads((run / "bridge-functions.json").read_text())["lines"]["run"]
    assert len(lines) > 300 and "src/megatron/bridge/peft/lora.py" in lines  # line records, for real


def test_21_a_tiny_nemotron_passes_level0(tmp_path: Path) -> None:
    v = _judge(OURS / "21-pass-level0-tiny-nemotron", tmp_path)
    assert (v.result, v.family, v.model) == ("Pass", "nemotron", "tiny/nemotron"), v.headline


def test_22_a_zeroed_adapter_fails_level0_from_its_own_optimizer_records(tmp_path: Path) -> None:
    """tools/mutate_bridge.py adapter-scale-floor on SmolLM2-135M: the LoRA scale floor-divides to 0, verl
    trains one step and exits 0; Megatron's FusedAdam stepped the adapters with gradient norm 0."""
    run = OURS / "22-fail-level0-smollm2-mutation-adapter-scale-floor"
    v = _judge(run, tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "no_update"), v.headline
    assert "no gradient reached the trained weights" in v.headline and "FusedAdam" in v.headline
    assert "`ParallelLinearAdapter.forward` (src/megatron/bridge/peft/utils.py)" in v.headline
    steps = json.loads((run / "updates.json").read_text())["steps"]
    assert {s["class"] for s in steps} == {"FusedAdam"} and any(s["grad_norm"] == 0 for s in steps)


def test_23_level5_with_a_learning_rate_of_zero_fails_as_no_update(tmp_path: Path) -> None:
    """Level 5 on SmolLM2 for 24 steps with lr 0: gradients flow, the adapters never move, the reward stays
    within its noise. The cause comes first: the weights did not move (largest learning rate 0)."""
    v = _judge(OURS / "23-fail-level5-smollm2-learning-rate-zero", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "no_update"), v.headline
    assert "the trained weights did not move" in v.headline and "largest learning rate 0" in v.headline
    learning = next(c for c in v.checks if c.name == "learning_signal")
    assert learning.result == "Fail" and "over 24 steps" in learning.detail and "t=1.2" in learning.detail


def test_24_gemmas_critic_failure_is_the_known_break_matrix_records(tmp_path: Path) -> None:
    """verl's critic has an untied value head; Bridge's Gemma bridge maps no output_layer, so the HF weight
    import meets a None task. A model-build Fail in Bridge's code, and the follow-up names matrix.yaml's
    record that verl cannot build gemma's critic today (plans now run gemma critic-free)."""
    v = _judge(OURS / "24-fail-level0-tiny-gemma-critic-without-output-mapping", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    assert "model_bridge.py:1303 in load_weights_hf_to_megatron" in v.headline
    assert v.follow_ups[0].startswith("matrix.yaml records that verl cannot build gemma's critic today")
    assert "this cell built one (GAE)" in v.follow_ups[0]


def test_25_cells_disturbing_vllms_memory_profiling_is_the_environment(tmp_path: Path) -> None:
    """Another cell freed GPU memory while this cell's vLLM measured it: Blocked, nothing of the PR's, and
    the Level 5 check that needs steps is skipped rather than failed."""
    v = _judge(OURS / "25-blocked-level5-smollm2-vllm-memory-profiling", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "Error in memory profiling" in v.headline
    assert next(c for c in v.checks if c.name == "learning_signal").result == "Skipped"


def test_26_a_weight_of_another_shape_at_the_rollout_is_a_rollout_weights_failure(tmp_path: Path) -> None:
    """SmolLM2's Level 1 received the tiny Qwen2 cell's 256-wide tensors through verl's weight socket (both
    cells' Ray clusters had job 01000000 and shared /tmp). A PR whose export sends a wrongly shaped tensor
    fails the same way; the class says the rollout got other weights, the hint names both causes."""
    v = _judge(OURS / "26-fail-level1-smollm2-weights-of-another-cell", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "rollout_weights"), v.headline
    assert "Attempted to load weight (torch.Size([256])) into parameter (torch.Size([576]))" in v.headline
    assert "export" in v.follow_ups[0] and "own /tmp" in v.follow_ups[0]


def test_27_a_tiny_mistral_passes_level0_with_its_line_records(tmp_path: Path) -> None:
    """The fourth family with a real Pass: Mistral's bridge built actor, reference and critic, both
    optimizers moved and the rollout agreed with the trainer; its line records feed selection."""
    run = OURS / "27-pass-level0-tiny-mistral"
    v = _judge(run, tmp_path)
    assert (v.result, v.family, v.model) == ("Pass", "mistral", "tiny/mistral"), v.headline
    checks = {c.name: c for c in v.checks}
    assert checks["update_nonzero"].result == "Pass" and checks["rollout_matches_trainer"].result == "Pass"
    record = json.loads((run / "bridge-functions.json").read_text())
    assert "src/megatron/bridge/models/mistral/mistral_bridge.py" in record["lines"]["run"]


def test_28_a_node_out_of_host_memory_is_blocked_not_the_prs_failure(tmp_path: Path) -> None:
    """Nine cells shared 128 GiB; Ray's memory monitor killed a worker of six of them in the same second.
    The node's memory, whoever used it: Blocked (and transient, so run-cell retries it once)."""
    v = _judge(OURS / "28-blocked-level0-smollm2-host-memory-of-a-shared-node", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "oom"), v.headline
    assert "killed due to the node running low on memory" in v.headline
    assert any("fewer cells per node" in f for f in v.follow_ups)


def test_29_a_vlm_critic_whose_value_head_bridge_cannot_map_is_the_known_break(tmp_path: Path) -> None:
    """verl's value-model hook puts the critic's head at the top-level output_layer of Qwen3-VL; Bridge maps
    only language_model.output_layer and then dereferences the missing task. matrix.yaml records it."""
    v = _judge(OURS / "29-fail-level0-tiny-qwen3-vl-critic-value-head-unmapped", tmp_path)
    assert (v.result, v.failure_class, v.family) == ("Fail", "model_build", "qwen_vl"), v.headline
    assert "model_bridge.py:1303 in load_weights_hf_to_megatron" in v.headline
    assert v.follow_ups[0].startswith("matrix.yaml records that verl cannot build qwen_vl's critic today")


def test_30_a_mamba_model_without_mamba_ssm_is_the_environment(tmp_path: Path) -> None:
    """Megatron-Core's Mamba mixer needs the mamba-ssm package, which the node's wheel set lacks: Blocked,
    naming the package; the hybrid families (falcon_h1, nemotronh, hybrid) stopped the same way."""
    v = _judge(OURS / "30-blocked-level0-tiny-mamba-without-mamba-ssm", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "MambaSSM is not installed" in v.headline


def test_31_a_critic_free_cell_on_a_random_model_had_no_gradient_to_give(tmp_path: Path) -> None:
    """GRPO without a critic on a random tiny Gemma: every reward 0, so every advantage and the policy
    gradient were exactly 0. The update check fails it from the run's own optimizer records."""
    v = _judge(OURS / "31-fail-level0-tiny-gemma-critic-free-zero-advantage", tmp_path)
    assert (v.result, v.failure_class, v.family) == ("Fail", "no_update", "gemma"), v.headline
    assert "gradient norm 0" in v.headline
    passed = {c.name for c in v.checks if c.result == "Pass"}
    assert {"steps_completed", "rollout_matches_trainer", "exit_zero"} <= passed
    assert not any("cannot build gemma's critic" in f for f in v.follow_ups)  # it built none


def test_32_the_preflight_stops_a_mamba_model_before_ray(tmp_path: Path) -> None:
    v = _judge(OURS / "32-blocked-level0-tiny-mamba-preflight-before-ray", tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "preflight" in v.headline and "mamba_ssm" in v.headline
    assert v.timings is not None and not v.timings.get("phases")


def test_33_level5_on_smollm2_learns_and_passes(tmp_path: Path) -> None:
    """Level 5 on the pretrained SmolLM2-135M, 24 GRPO steps on two-digit sums: the batch reward rises
    far beyond its step-to-step noise and validation agrees. The device's own verdict failed it on the
    log-prob correlation (0.9872 as the policy sharpened): the calibration this run taught."""
    run = OURS / "33-pass-level5-smollm2-learning-signal"
    v = _judge(run, tmp_path)
    assert (v.result, v.family, v.model) == ("Pass", "llama", "local/smollm2-135m"), v.headline
    learning = next(c for c in v.checks if c.name == "learning_signal")
    assert learning.result == "Pass" and "over 24 steps" in learning.detail and "t=12.3" in learning.detail
    rollout = next(c for c in v.checks if c.name == "rollout_matches_trainer")
    assert rollout.result == "Pass" and "trained dense" in rollout.detail
    assert json.loads((run / "verdict.json").read_text())["result"] == "Fail"  # as the device judged it


def test_34_an_adapter_output_without_its_graph_fails_level5_as_no_update(tmp_path: Path) -> None:
    """tools/mutate_bridge.py adapter-detached: the adapter's output is added detached, so 24 steps run,
    exit 0 and sync, and no gradient ever reaches the adapters."""
    v = _judge(OURS / "34-fail-level5-smollm2-adapter-detached", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "no_update"), v.headline
    assert "`LoRALinear.forward` (src/megatron/bridge/peft/lora_layers.py)" in v.headline
    checks = {c.name: c for c in v.checks}
    assert checks["learning_signal"].result == "Fail" and checks["update_nonzero"].result == "Fail"
    assert "gradient norm 0" in checks["update_nonzero"].detail


@pytest.mark.parametrize(
    "name", ["35-pass-level0-smollm2", "36-pass-level1-smollm2-save-resume"], ids=["level0", "level1"]
)
def test_35_36_smollm2_passes_level0_and_level1(name: str, tmp_path: Path) -> None:
    """Pretrained weights through Bridge's Llama bridge: built, LoRA-wrapped, synced to vLLM (the rollout
    agrees with the trainer to KL 1.6e-3), stepped; Level 1 saved at step 1 and resumed to step 2."""
    v = _judge(OURS / name, tmp_path)
    assert (v.result, v.model) == ("Pass", "local/smollm2-135m"), v.headline
    assert all(c.result in ("Pass", "Skipped") for c in v.checks), [c for c in v.checks if c.result == "Fail"]
    if "level1" in name:
        assert [p["name"] for p in (v.timings or {})["phases"]] == ["save", "resume"]


def test_37_an_export_that_swaps_two_weights_fails_as_rollout_weights(tmp_path: Path) -> None:
    """tools/mutate_bridge.py export-swap on pretrained weights: the gated MLP's gate and up are exported
    swapped, nothing raises, the step completes; the rollout's log-probs disagree with the trainer's."""
    v = _judge(OURS / "37-fail-level0-smollm2-export-swap-rollout-weights", tmp_path)
    assert (v.result, v.failure_class) == ("Fail", "rollout_weights"), v.headline
    assert "KL 7.55" in v.headline and "`GatedMLPMapping.megatron_to_hf`" in v.headline
    assert any("weights sent to the rollout differ from the trained ones" in f for f in v.follow_ups)


def test_38_gemma2s_sliding_window_meets_verls_two_dimensional_mask(tmp_path: Path) -> None:
    """verl's forward without packed sequences hands a [batch, seq] padding mask to Bridge's Gemma 2
    attention, which ORs it with a [sq, sk] window mask: a Fail in the actor's first forward that no
    Bridge PR caused, so matrix.yaml records it and gemma2's plans say it cannot run today."""
    v = _judge(OURS / "38-fail-level0-tiny-gemma2-sliding-window-mask-2d", tmp_path)
    assert (v.result, v.failure_class, v.family) == ("Fail", "runtime", "gemma2"), v.headline
    assert "gemma2_provider.py:267" in v.headline and "must match the size" in v.headline
    from verl_e2e.config.matrix import load_matrix

    assert "gemma2_provider.py:267" in (load_matrix().families["gemma2"].cannot_run or "")


def test_39_the_image_cells_reward_path_pointed_at_the_cache_and_is_the_harness(tmp_path: Path) -> None:
    """Level 4's VLM cell with a picture per prompt on the tiny Qwen3-VL: the images went through verl's
    processor filter (all 256 kept), the actor and rollout built, vLLM generated, and the reward workers
    then looked for the task's reward function in the node's cache, where the driver had not written it
    (the made copy's path was not applied after the run-cell map; fixed in driver.translate). Blocked,
    the environment's, not a Fail the PR would be blamed for."""
    src = OURS / "39-blocked-level4-tiny-qwen3-vl-images-reward-path"
    v = _judge(src, tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "Custom module file not found" in v.headline and "no Bridge frame" in v.headline
    log = (src / "run.log").read_text()
    assert "filter dataset len: 256" in log and "data.image_key=images" in log


def test_40_a_remote_code_config_a_ray_worker_cannot_import_is_the_environment(tmp_path: Path) -> None:
    """The first tiny BailingMoeV2 cell (Bridge's registered classes, the release's `auto_map`): verl's
    trainer loaded the config through the checkpoint's own file, and the workers' actor, shipped with it,
    could not be imported on a Ray worker ("No module named 'transformers_modules'"). Blocked, named by that
    module (never a Bridge one), with what to do; no Bridge code had run, so nothing of the PR is blamed."""
    src = OURS / "40-blocked-level0-tiny-bailing-remote-config-on-ray-workers"
    v = _judge(src, tmp_path)
    assert (v.result, v.failure_class) == ("Blocked", "setup"), v.headline
    assert "failed to import on the worker" in v.headline and "no Bridge frame" in v.headline
    assert any("transformers_modules" in f and "HF_MODULES_CACHE" in f for f in v.follow_ups)
    log = (src / "run.log").read_text()
    assert "actor_rollout_ref.model.trust_remote_code=True" in log
    assert "ModuleNotFoundError: No module named 'transformers_modules'" in log
