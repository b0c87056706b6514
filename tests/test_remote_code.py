"""A family whose checkpoint is its own code (matrix.yaml `remote_code`: transformers has no class for the
architecture, the config's auto_map names the checkpoint's files) gets cells verl can load: verl's
default `trust_remote_code: false` stops such a checkpoint at its config, before any Bridge code runs,
which would be a Fail of the harness, not of the PR. Every phase of its cells passes the flag to the
three places verl reads it, and the cell says so."""

from __future__ import annotations

from verl_e2e.config.matrix import load_matrix
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.cells import TRUST_REMOTE_CODE

# verl 1dda039's Megatron trainer config: the model's flag goes to AutoBridge, transformers and vLLM; the
# critic and the dataset's tokenizer read their own
KEYS = ("actor_rollout_ref.model.trust_remote_code", "critic.model.trust_remote_code", "data.trust_remote_code")


def test_the_overrides_name_the_three_settings_verl_reads() -> None:
    assert sorted(TRUST_REMOTE_CODE) == sorted(f"{k}=True" for k in KEYS)


def test_a_remote_code_familys_cells_trust_it_and_say_why() -> None:
    matrix = load_matrix()
    plan = make_plan(PlanRequest(levels=[0, 1], families=("bailing", "qwen")), matrix)
    by_family: dict[str, list] = {}
    for cell in plan.cells:
        by_family.setdefault(cell.family, []).append(cell)
    assert by_family["bailing"] and by_family["qwen"]
    for cell in by_family["bailing"]:
        for phase in cell.phases:
            assert all(o in phase.args for o in TRUST_REMOTE_CODE), (cell.id, phase.name)
        assert any("trust_remote_code" in x and "BailingMoeV2ForCausalLM" in x for x in cell.limitations)
    for cell in by_family["qwen"]:  # a transformers class: the checkpoint's code, if any, never runs
        assert not any(o in p.args for p in cell.phases for o in TRUST_REMOTE_CODE)
        assert not any("trust_remote_code" in x for x in cell.limitations)


def test_the_families_without_a_transformers_class_are_the_ones_recorded() -> None:
    """The nine families README names as having no transformers class (no offline tiny model either)."""
    recorded = sorted(n for n, f in load_matrix().families.items() if f.remote_code)
    assert recorded == [
        "bailing",
        "kimi",
        "kimi_vl",
        "llama_nemotron",
        "mimo",
        "nemotron_omni",
        "nemotron_vl",
        "sarvam",
        "stepfun",
    ]
