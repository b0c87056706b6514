"""A MoE family whose experts vLLM cannot take unmerged next to LoRA (matrix.yaml `merged_lora`, from real
runs: OLMoE, DeepSeek-V2 and V3, ERNIE-4.5-MoE, GLM-4.7-Flash and gpt-oss stopped at the first weight sync with KeyError
'layers.0.mlp.experts.0.gate_proj.weight') still runs: its LoRA cells sync merged adapters and say so."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.config.matrix import load_matrix
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.cells import MERGED_LORA

from .matrix_records import with_record

WHY = "vLLM expects this model's experts under base_layer"
SEEN = "Level 0 on a tiny random model, 2026-12-03"


def _matrix(tmp_path: Path, family: str, record: dict[str, object] | None) -> Path:
    return with_record(tmp_path, family, "merged_lora", record)


def test_a_lora_cell_of_a_recorded_family_merges_its_adapters_and_says_why(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, "qwen3_moe", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(levels=[0, 1], families=("qwen3_moe", "qwen")), matrix)
    by_id = {c.id: c for c in plan.cells}
    for cid in ("L0-lora-ddp-qwen3_moe", "L1-save-resume-qwen3_moe"):
        assert all(MERGED_LORA in p.args for p in by_id[cid].phases), cid
        assert any(x.startswith("adapters merged") and WHY in x for x in by_id[cid].limitations)
    assert not any(MERGED_LORA in p.args for p in by_id["L0-lora-ddp-qwen"].phases)


def test_a_full_parameter_cell_has_no_adapters_to_merge(tmp_path: Path) -> None:
    """Level 4's custom-layers cell trains every weight (LORA_RANK 0): vLLM runs without LoRA anyway."""
    matrix = load_matrix(_matrix(tmp_path, "qwen", {"why": WHY, "seen": SEEN}))
    plan = make_plan(PlanRequest(levels=[4], families=("qwen",)), matrix)
    assert any(MERGED_LORA in p.args for c in plan.cells if c.level == 0 for p in c.phases)
    full = [c for c in plan.cells if all(p.env.get("LORA_RANK") == "0" for p in c.phases)]
    assert full, [c.id for c in plan.cells]
    for cell in full:
        assert not any(MERGED_LORA in p.args for p in cell.phases)
        assert not any(x.startswith("adapters merged") for x in cell.limitations)


def test_the_shipped_records_are_the_families_seen() -> None:
    """Each record comes from a real run that stopped; gpt_oss moved to cannot_run when its merged sync
    failed too (a Bridge merge error), and olmoe, ernie and glm have since passed merged (glm45, exaone_moe,
    glm_moe_dsa and minimax_m2 in the tenth batch, hy_v3 in the eleventh; glm_vl's record is
    the eleventh's; falcon_h1's the nineteenth's, which stopped merged on Bridge and has a cannot_run record)."""
    matrix = load_matrix()
    recorded = sorted(n for n, f in matrix.families.items() if f.merged_lora)
    assert recorded == [
        "deepseek",
        "deepseek_v3",
        "ernie",
        "exaone_moe",
        "falcon_h1",
        "glm",
        "glm45",
        "glm_moe_dsa",
        "glm_vl",
        "hy_v3",
        "mimo_v2_flash",
        "minimax_m2",
        "minimax_m3",
        "olmoe",
        "qwen_audio",
    ]
    assert "KeyError" in (matrix.families["olmoe"].merged_lora or "")
    assert matrix.families["gpt_oss"].merged_lora is None and matrix.families["gpt_oss"].cannot_run


def test_families_tags_how_a_familys_cells_run(tmp_path: Path) -> None:
    """`verl-e2e families` is where a maintainer looks up a family: merged adapters and critic-free cells
    show on its line, from the same records the cells are built from."""
    import io

    from verl_e2e.cli.main import main

    out = io.StringIO()
    assert main(["families", "--matrix", str(_matrix(tmp_path, "qwen", {"why": WHY, "seen": SEEN}))], stdout=out) == 0
    lines = {line.split()[0]: line for line in out.getvalue().splitlines() if line and not line.startswith(" ")}
    assert lines["qwen"].endswith("merged-lora") and "critic-free" in lines["gemma"]
    assert "merged-lora" not in lines["llama"] and "critic-free" not in lines["llama"]
