"""The first real cells above Level 0 beyond llama, re-judged: what each level proves held on a real run.

The archives in fixtures/level-runs/ are run dirs written by run-cell on one H200 (verl 1dda039, Bridge
067f987, tools/offline_node.sh with tools/parallel_runs.sh, nine cells at once, 2026-12-04, evening):
Level 1 on a tiny Gemma 3 and a tiny Qwen3-MoE, Level 4's MTP cell on tiny DeepSeek-V3 and GLM-4.5, its
VLM cell on a tiny Qwen3-VL, and Level 3 (Megatron-FSDP) on the tiny Qwen2 with LoRA (it stopped) and then
full-parameter, with Level 1 on the tiny Qwen3-VL, in a second run on the same node. Level 4's VLM cells are
the sixteenth batch's (one H100, 2026-12-05): a 64-pixel picture with every prompt, on tiny Qwen3-VL, Qwen2.5-VL
and Qwen3-VL-MoE, three at once.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from verl_e2e.judge.judging import judge_run_dir

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests/fixtures/level-runs"
PASSING = {  # archive -> (level, family, checks that must be Pass beside the two every cell gets)
    "l1-gemma3": (1, "gemma3", ("saves", "resume")),
    "l1-qwen3_moe": (1, "qwen3_moe", ("saves", "resume")),
    "l4mtp-deepseek_v3": (4, "deepseek_v3", ()),
    "l4mtp-glm45": (4, "glm45", ()),
    "l4vlm-qwen_vl": (4, "qwen_vl", ()),  # with pictures (the twelfth batch's text-only pass it replaced)
    "l4vlm-qwen25_vl": (4, "qwen25_vl", ()),
    "l4vlm-qwen3_vl_moe": (4, "qwen3_vl_moe", ()),
    "l1-qwen_vl": (1, "qwen_vl", ("saves", "resume")),
    "l3-qwen": (3, "qwen", ()),  # full-parameter, as the variant now runs
    "l4mtp-hy_v3": (4, "hy_v3", ("mtp_trained",)),  # merged adapters, the MTP key num_nextn_predict_layers
    # the nineteenth batch (one H100, 2026-12-06): save and resume through the Mamba mixer's state
    "l1-nemotronh": (1, "nemotronh", ("saves", "resume")),
    # the mamba family's Level 0 on the tiny Nemotron-H: a Pass, but not of its own code (below)
    "l0-mamba": (0, "mamba", ()),
}


def _unpack(name: str, into: Path) -> Path:
    spec = importlib.util.spec_from_file_location("family_table", ROOT / "tools/family_table.py")
    assert spec and spec.loader
    tool: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    run: Path = tool.unpack(RUNS / f"{name}.tar.xz", into)
    return run


@pytest.mark.parametrize("name", sorted(PASSING))
def test_each_kept_level_run_passes_what_its_level_checks(name: str, tmp_path: Path) -> None:
    level, family, own = PASSING[name]
    v = judge_run_dir(_unpack(name, tmp_path))
    assert (v.result, v.level, v.family) == ("Pass", level, family), v.headline
    checks = {c.name: c.result for c in v.checks}
    for check in ("update_nonzero", "rollout_matches_trainer", *own):
        assert checks.get(check) == "Pass", (check, checks)


VISION = {  # archive -> (file, what of it only a batch with pictures runs)
    "l4vlm-qwen_vl": ("modelling_qwen3_vl/vision_model.py", "Qwen3VLVisionModel.forward"),
    "l4vlm-qwen3_vl_moe": ("modelling_qwen3_vl/vision_model.py", "Qwen3VLVisionModel.forward"),
    # Qwen2.5-VL's tower is transformers' own; Bridge's forward hands it the pixels under `if pixel_values`
    "l4vlm-qwen25_vl": ("modeling_qwen25_vl.py", "Qwen25VLModel.forward"),
}


@pytest.mark.parametrize("name", sorted(VISION))
def test_the_vlm_cells_pictures_went_through_bridges_vision_path(name: str, tmp_path: Path) -> None:
    """What makes the VLM cell more than a text cell: Bridge's own code took the pictures in the update's
    forward (the run's function and line records; a text-only batch leaves the image branch untaken)."""
    path, function = VISION[name]
    records = json.loads((_unpack(name, tmp_path) / "bridge-functions.json").read_text())
    ran = {f["qualname"] for f in records["functions"] if f["file"].endswith(f"models/qwen_vl/{path}")}
    assert function in ran, sorted(ran)
    if name == "l4vlm-qwen25_vl":  # Bridge 067f987: `image_embeds = self.get_image_features(pixel_values, ...)`
        spans = records["lines"]["run"]["src/megatron/bridge/models/qwen_vl/modeling_qwen25_vl.py"]
        assert any(a <= 191 <= b for a, b in spans), spans


def _with_mtp_check(run: Path) -> None:
    """These cells were planned before the MTP cell listed `mtp_trained`; add it as today's plan does."""
    cell = json.loads((run / "cell.json").read_text())
    cell["checks"] = [*cell["checks"], "mtp_trained"]
    (run / "cell.json").write_text(json.dumps(cell))


@pytest.mark.parametrize("name", ["l4mtp-deepseek_v3", "l4mtp-glm45"])
def test_the_mtp_cell_passes_only_with_the_mtp_loss_verl_logged(name: str, tmp_path: Path) -> None:
    run = _unpack(name, tmp_path)
    _with_mtp_check(run)
    v = judge_run_dir(run)
    mtp = next(c for c in v.checks if c.name == "mtp_trained")
    assert (v.result, mtp.result) == ("Pass", "Pass") and "mtp_1_loss" in mtp.detail, mtp.detail


def test_an_mtp_cell_whose_mtp_layers_gave_no_loss_fails_and_says_so(tmp_path: Path) -> None:
    """What a provider that stopped building the MTP layers looks like: the same run without verl's
    mtp_losses/* metrics (the main loss and both optimizers still moved)."""
    run = _unpack("l4mtp-deepseek_v3", tmp_path)
    _with_mtp_check(run)
    for log in run.glob("*.log"):
        text = log.read_text(errors="replace")
        log.write_text(re.sub(r" - actor/mtp_losses/[^:\s]*:\S*", "", text))
    v = judge_run_dir(run)
    mtp = next(c for c in v.checks if c.name == "mtp_trained")
    assert (v.result, v.failure_class, mtp.result) == ("Fail", "mtp_untrained", "Fail"), v.headline
    assert "no actor/mtp_losses" in mtp.detail


def test_lora_under_megatron_fsdp_stops_where_the_level_3_limitation_says(tmp_path: Path) -> None:
    """Why Level 3 runs full-parameter: the same cell with LoRA stopped at verl's first weight sync, on the
    adapters' DTensors Bridge's adapter export hands over ungathered. The variant's limitation quotes it."""
    v = judge_run_dir(_unpack("l3-qwen-lora", tmp_path))
    phrase = "aten.copy_.default got mixed torch.Tensor and DTensor"
    assert (v.result, v.failure_class, v.level) == ("Fail", "runtime", 3) and phrase in v.headline, v.headline
    from verl_e2e.config.matrix import load_matrix

    variant = next(v for v in load_matrix(None).levels[3].variants if v.name == "megatron-fsdp")
    said = " ".join(variant.limitations)
    assert phrase in said and "level-runs/l3-qwen-lora.tar.xz" in said
    assert variant.env["LORA_RANK"] == "0"


def test_the_mamba_familys_cell_runs_no_method_of_its_own_directory(tmp_path: Path) -> None:
    """models/mamba/ holds backward-compatible wrappers of models/hybrid/ that no bridge builds through:
    the mamba family's cell (Nemotron-H, as the only model with Mamba layers) ran hybrid/'s provider and
    nemotronh/'s bridge, and of mamba/ only module and class-body code. So the kept run is not counted as
    the family's own pass, and its record is what tells selection that a mamba/ method runs in no cell."""
    records = json.loads((_unpack("l0-mamba", tmp_path) / "bridge-functions.json").read_text())
    ran = {(f["file"].split("/models/")[-1].split("/")[0], f["qualname"]) for f in records["functions"]}
    own = {q for d, q in ran if d == "mamba"}
    assert own and all("." not in q for q in own), sorted(own)  # `<module>` and class bodies only
    assert ("hybrid", "HybridModelProvider.provide") in ran and ("nemotronh", "NemotronHBridge.provider_bridge") in ran
