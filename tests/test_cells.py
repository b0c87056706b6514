"""Cell expansion: ids, env layering, phases, runners, limitations, the GitHub matrix and its limit."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import PlanError
from verl_e2e.plan.cells import cell_from_json, expand, github_matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.contract import Plan, render_json
from verl_e2e.plan.select import select

M = "src/megatron/bridge/models"


def _cells(matrix: Matrix, paths: list[str | ChangedFile], **kw: object) -> list:
    files = [p if isinstance(p, ChangedFile) else ChangedFile(p) for p in paths]
    return expand(matrix, select(matrix, files, **kw))  # type: ignore[arg-type]


def test_cell_ids_and_order(matrix: Matrix) -> None:
    ep = ChangedFile(
        f"{M}/olmoe/olmoe_provider.py", diff_lines=("        local = self.num_moe_experts // self.ep_size",)
    )
    cells = _cells(matrix, [ep, f"{M}/conversion/model_bridge.py"])
    assert [c.id for c in cells] == [
        "L0-lora-ddp-olmoe",
        "L0-lora-ddp-qwen",
        "L1-save-resume-qwen",
        "L2-moe-olmoe",
        "L4-expert-parallel-olmoe",
    ]
    # a provider default verl overrides (it sets the EP size on every provider) reaches no cell's model
    default = ChangedFile(f"{M}/olmoe/olmoe_provider.py", diff_lines=("    expert_model_parallel_size: int = 2",))
    assert [c.id for c in _cells(matrix, [default])] == []


def test_level1_has_two_phases_in_one_cell(matrix: Matrix) -> None:
    (l1,) = [c for c in _cells(matrix, [f"{M}/conversion/model_bridge.py"]) if c.level == 1]
    save, resume = l1.phases
    assert (save.name, resume.name) == ("save", "resume")
    assert save.env["SAVE_FREQ"] == "1" and save.env["TOTAL_TRAIN_STEPS"] == "1"
    assert resume.env["RESUME_MODE"] == "auto" and resume.env["TOTAL_TRAIN_STEPS"] == "2"
    assert save.env["VANILLA_MBRIDGE"] == "False"  # inherited from Level 0
    assert resume.expect == {"steps": 2, "resumed_from": 1, "tracker": 2}
    assert "saves" in l1.checks and "resume" in l1.checks


def test_level_env_layers_over_base_and_runner_fits(matrix: Matrix) -> None:
    tp = ChangedFile(f"{M}/conversion/param_mapping.py", diff_lines=("    tp_size = tensor_model_parallel_size",))
    (l2,) = [c for c in _cells(matrix, [tp]) if c.level == 2]
    env = l2.phases[0].env
    assert (env["COMMON_TP"], env["COMMON_PP"], env["INFER_TP"], env["LORA_RANK"]) == ("2", "2", "2", "4")
    assert env["NUM_GPUS"] == str(l2.gpus) == "4"
    assert l2.runs_on == ["self-hosted", "linux", "x64", "gpu-4"]


def test_level3_passes_hydra_overrides(matrix: Matrix) -> None:
    (l3,) = [c for c in expand(matrix, select(matrix, [], requested=[3])) if c.level == 3]
    assert sum("gradient_accumulation_fusion=False" in a for a in l3.phases[0].args) == 3
    assert l3.phases[0].env["USE_MEGATRON_FSDP"] == "True"


def test_dummy_model_and_limitations(matrix: Matrix) -> None:
    cells = _cells(matrix, [f"{M}/deepseek/deepseek_v3_bridge.py"])
    l0 = cells[0]
    assert l0.dummy_config is not None and l0.phases[0].env["USE_DUMMY_MODEL"] == "True"
    assert l0.phases[0].env["DUMMY_MODEL_CONFIG_PATH"].endswith("/dummy-configs/deepseek.json")
    assert any(lim.startswith("dummy model") for lim in l0.limitations)
    assert any("COMMON_EP=1" in lim for lim in l0.limitations)
    ep = next(c for c in cells if c.variant == "expert-parallel")
    assert not any("COMMON_EP=1" in lim for lim in ep.limitations)


def test_moe_variants_use_the_family_moe_model(matrix: Matrix) -> None:
    """A generic change that touches expert code runs the MoE family the default names for MoE code
    (`defaults.kind_families.moe`); a family's own `moe_model` serves its own MoE changes."""
    moe = ChangedFile(f"{M}/conversion/model_bridge.py", diff_lines=("        if 'experts' in name:",))
    cells = _cells(matrix, [moe])
    by_id = {c.id: c for c in cells}
    assert by_id["L0-lora-ddp-qwen"].model == "Qwen/Qwen2.5-0.5B"
    assert by_id["L4-expert-parallel-qwen3_moe"].model == "Qwen/Qwen3-30B-A3B"
    own = dataclasses.replace(matrix, defaults=dataclasses.replace(matrix.defaults, kind_families={}))
    by_id = {c.id: c for c in _cells(own, [moe])}
    assert by_id["L4-expert-parallel-qwen"].model == "Qwen/Qwen3-30B-A3B"
    assert by_id["L4-expert-parallel-qwen"].phases[0].env["DUMMY_MODEL_CONFIG_PATH"].endswith("qwen-moe.json")


def test_model_override(matrix: Matrix) -> None:
    cells = expand(matrix, select(matrix, [], requested=[0]), model="Qwen/Qwen3-0.6B")
    assert cells[0].model == "Qwen/Qwen3-0.6B" and cells[0].phases[0].env["USE_DUMMY_MODEL"] == "False"


def test_github_matrix_shape(matrix: Matrix) -> None:
    cells = _cells(matrix, ["src/megatron/bridge/peft/lora.py"])
    data = json.loads(github_matrix(cells))
    # a path alone under peft/ is LoRA wrapping verl runs (Level 0); what a change computes decides Levels 1 and 5
    assert [e["id"] for e in data["include"]] == ["L0-lora-ddp-qwen"]
    assert set(data["include"][0]) == {
        "id",
        "level",
        "variant",
        "family",
        "model",
        "gpus",
        "runs_on",
        "timeout_minutes",
        "minutes",
        "job_timeout_minutes",
    }
    assert data["include"][0]["job_timeout_minutes"] > data["include"][0]["timeout_minutes"]


def test_matrix_limit_is_refused_clearly(matrix: Matrix) -> None:
    small = dataclasses.replace(matrix, defaults=dataclasses.replace(matrix.defaults, max_matrix_jobs=3))
    with pytest.raises(PlanError, match=r"expands to \d+ cells, but one GitHub matrix allows at most 3 jobs"):
        expand(small, select(small, [], requested=[0, 1, 2, 3, 4, 5], family_override=["qwen", "llama"]))


def test_every_family_at_every_level_stays_under_github_limit(matrix: Matrix) -> None:
    cells = expand(matrix, select(matrix, [], requested=[0, 1, 2, 3, 4, 5], family_override=["qwen_vl", "deepseek"]))
    assert len({c.id for c in cells}) == len(cells)


def test_cell_json_round_trip(matrix: Matrix) -> None:
    for cell in _cells(matrix, [f"{M}/olmoe/olmoe_provider.py", f"{M}/conversion/model_bridge.py"]):
        assert cell_from_json(json.loads(json.dumps(cell.to_json()))) == cell


ALL_PATHS = [
    f"{M}/olmoe/olmoe_provider.py",
    f"{M}/qwen_vl/qwen3_vl_bridge.py",
    f"{M}/llama/llama_bridge.py",
    f"{M}/conversion/param_mapping.py",
    "src/megatron/bridge/peft/lora.py",
    "3rdparty/Megatron-LM",
    "docs/a.md",
    "tests/unit_tests/x.py",
    f"{M}/brandnew/x.py",
    "src/megatron/bridge/utils/fusions.py",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(ALL_PATHS), min_size=0, max_size=10, unique=True), st.randoms())
def test_same_input_same_output_byte_for_byte(matrix: Matrix, paths: list[str], rnd: random.Random) -> None:
    shuffled = list(paths)
    rnd.shuffle(shuffled)
    a = select(matrix, [ChangedFile(p) for p in paths])
    b = select(matrix, [ChangedFile(p) for p in shuffled])
    assert render_json(Plan(a, expand(matrix, a))) == render_json(Plan(b, expand(matrix, b)))
