"""Level selection: table-driven over realistic Bridge changes, plus the request/override paths."""

from __future__ import annotations

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.plan.changes import ChangedFile, parse_name_status
from verl_e2e.plan.enrich import with_architectures
from verl_e2e.plan.select import select
from verl_e2e.plan.surface import shipped

M = "src/megatron/bridge/models"

TABLE = [
    # name, changed files, expected levels, expected families
    ("docs only", ["docs/index.md", "README.md"], [], []),
    ("tests only", ["tests/unit_tests/models/qwen/test_x.py"], [], []),
    ("recipes are off-surface", ["src/megatron/bridge/recipes/qwen/qwen3.py"], [], []),
    (
        "bridge data and step code",
        [f"{M}/glm_vl/data/collate_fn.py", f"{M}/qwen_vl/qwen3_vl_step.py"],
        [],
        [],
    ),
    ("dense provider", [f"{M}/llama/llama_bridge.py"], [0], ["llama"]),
    (
        "modeling file runs the architecture its bridge serves",
        [f"{M}/gemma_vl/modeling_gemma4_vl.py"],
        [0, 4],
        ["gemma4_vl"],
    ),
    ("MoE provider: Level 2 needs the diff", [f"{M}/olmoe/olmoe_provider.py"], [0, 4], ["olmoe"]),
    ("MoE bridge without provider", [f"{M}/gpt_oss/gpt_oss_bridge.py"], [0, 4], ["gpt_oss"]),
    # ... at Level 0: MiMo's MTP parts are in its own files, not in the Qwen2 bridge it subclasses
    ("a bridge other bridges subclass runs them too", [f"{M}/qwen/qwen2_bridge.py"], [0], ["mimo", "qwen"]),
    ("MoE bridge of a mixed directory", [f"{M}/qwen/qwen3_moe_bridge.py"], [0, 4], ["qwen3_moe"]),
    ("Qwen3 dense bridge runs Qwen3, not Qwen2.5", [f"{M}/qwen/qwen3_bridge.py"], [0], ["qwen3"]),
    ("HF export", [f"{M}/conversion/model_bridge.py"], [0, 1], ["qwen"]),
    ("param mapping", [f"{M}/conversion/param_mapping.py"], [0, 1], ["qwen"]),
    ("quantized weights", [f"{M}/conversion/quantization_utils.py"], [0, 4], ["qwen"]),
    # what a PEFT change computes (its forward, its saved state) decides Levels 1 and 5, not its folder
    ("PEFT", ["src/megatron/bridge/peft/lora.py"], [0], ["qwen"]),
    ("fused kernels", ["src/megatron/bridge/utils/fusions.py"], [0, 5], ["qwen"]),
    ("submodule bump", ["3rdparty/Megatron-LM"], [0, 1, 2], ["qwen"]),
    ("lockfile without diff is conservative", ["uv.lock"], [0], ["qwen"]),
    ("Bridge's own pyproject elsewhere", ["docker/common/fw_pyproject.toml"], [], []),
    ("FSDP integration", ["src/megatron/bridge/training/megatron_fsdp_adapter.py"], [0, 3], ["qwen"]),
    # verl imports checkpointing: on its surface, so with no rule deciding it still runs Level 0
    ("checkpointing needs the diff", ["src/megatron/bridge/training/checkpointing.py"], [0], ["qwen"]),
    ("Bridge-only training code", ["src/megatron/bridge/training/train.py"], [], []),
    (
        "two families",
        [f"{M}/llama/llama_bridge.py", f"{M}/ministral3/ministral3_bridge.py"],
        [0, 4],
        ["llama", "ministral3"],
    ),
]


@pytest.mark.parametrize(("name", "paths", "levels", "families"), TABLE, ids=[t[0] for t in TABLE])
def test_selection_table(matrix: Matrix, name: str, paths: list[str], levels: list[int], families: list[str]) -> None:
    files = with_architectures([ChangedFile(p) for p in paths], shipped())
    selection = select(matrix, files, surface=shipped())
    assert list(selection.levels) == levels
    assert list(selection.families) == families


def test_level4_runs_only_on_the_flagged_family(matrix: Matrix) -> None:
    files = [ChangedFile(f"{M}/llama/llama_bridge.py"), ChangedFile(f"{M}/ministral3/ministral3_bridge.py")]
    selection = select(matrix, files)
    assert set(selection.targets[4]) == {"ministral3"}
    assert selection.targets[4]["ministral3"] == frozenset({"vlm"})


def test_reasons_name_rule_and_paths(matrix: Matrix) -> None:
    selection = select(matrix, [ChangedFile(f"{M}/conversion/model_bridge.py")])
    (reason,) = selection.reasons[1]
    assert reason.rule == "hf-export" and reason.paths == (f"{M}/conversion/model_bridge.py",)
    assert "save/resume" not in selection.skipped  # selected levels carry no skip reason
    assert "no changed path matched its rules" in selection.skipped[5]
    assert "fused-kernels" in selection.skipped[5]


def test_levels_above_zero_imply_level0_for_the_same_family(matrix: Matrix) -> None:
    selection = select(matrix, [ChangedFile("src/megatron/bridge/utils/fusions.py")])
    assert set(selection.targets[0]) == set(selection.targets[5]) == {"qwen"}


def test_rename_counts_old_and_new_path(matrix: Matrix) -> None:
    files = parse_name_status(f"R100\t{M}/llama/x.py\tdocs/x.md\n")
    selection = select(matrix, files)
    assert selection.families == ("llama",)  # the old path under models/llama still counts


def test_diff_condition_decides_when_the_diff_is_known(matrix: Matrix) -> None:
    lock = "uv.lock"
    bump_unrelated = ChangedFile(lock, diff_lines=('name = "smart-open"', 'version = "7.1.0"'))
    bump_core = ChangedFile(lock, diff_lines=('name = "megatron-core"', 'version = "0.14.0"'))
    assert select(matrix, [bump_unrelated]).levels == ()
    assert select(matrix, [bump_core]).levels == (0,)
    ckpt = "src/megatron/bridge/training/checkpointing.py"
    assert select(matrix, [ChangedFile(ckpt, diff_lines=("def apply_peft_adapter_filter(x):",))]).levels == (
        0,
        1,
    )
    # no rule fires on this diff, but the file is on verl's surface: Level 0, never nothing
    assert select(matrix, [ChangedFile(ckpt, diff_lines=("energon_state = 1",))]).levels == (0,)
    dense = f"{M}/llama/llama_provider.py"
    assert 2 in select(matrix, [ChangedFile(dense, diff_lines=("    def finalize(self):",))]).levels
    assert 2 not in select(matrix, [ChangedFile(dense, diff_lines=("    rotary_base = 5e5",))]).levels


def test_a_lockfile_without_its_diff_is_read_from_the_declared_pins_beside_it(matrix: Matrix) -> None:
    """GitHub leaves uv.lock's diff out; beside pyproject.toml's known diff, the lock is that change's refresh."""
    lock = ChangedFile("uv.lock")  # path only, as a pull request's large lockfile arrives
    other_pin = ChangedFile("pyproject.toml", diff_lines=('    "wandb>=0.25.0",', '    "wandb==0.27.2",'))
    core_pin = ChangedFile(
        "pyproject.toml", diff_lines=('    "transformers>=5.0.0,<=5.6.0",', '    "transformers>=5.5.0,<=5.6.0",')
    )
    assert select(matrix, [other_pin, lock]).levels == ()
    assert select(matrix, [core_pin, lock]).levels == (0,)
    assert select(matrix, [lock]).levels == (0,)  # alone, nothing says what moved
    # a declaration whose diff is unknown too says nothing either
    assert select(matrix, [ChangedFile("pyproject.toml"), lock]).levels == (0,)


def test_undecided_rules_are_explained(matrix: Matrix) -> None:
    selection = select(matrix, [ChangedFile("src/megatron/bridge/training/checkpointing.py")])
    assert "checkpointing needs the diff to decide (plan with --diff or --repo)" in selection.skipped[1]


def test_cosmetic_python_changes_are_discounted(matrix: Matrix) -> None:
    selection = select(
        matrix, [ChangedFile(f"{M}/qwen_vl/modelling_qwen3_vl/model.py", diff_lines=("# c",), cosmetic=True)]
    )
    assert selection.levels == () and selection.cosmetic == (f"{M}/qwen_vl/modelling_qwen3_vl/model.py",)


def test_unknown_model_directory_warns_and_uses_default(matrix: Matrix) -> None:
    selection = select(matrix, [ChangedFile(f"{M}/brandnew/brandnew_provider.py", "A")])
    assert selection.families == ("qwen",)
    assert any("'brandnew' has no entry under families" in w for w in selection.warnings)


def test_explicit_levels_replace_selection_but_keep_families(matrix: Matrix) -> None:
    files = [ChangedFile(f"{M}/gemma_vl/gemma3_vl_bridge.py")]
    selection = select(matrix, files, requested=[2, 3])
    assert selection.levels == (0, 2, 3)
    assert selection.families == ("gemma_vl",)
    assert selection.requested == "2,3"
    assert selection.skipped[1] == "not requested"


def test_explicit_levels_without_changes_use_default_family(matrix: Matrix) -> None:
    selection = select(matrix, [], requested=[0])
    assert selection.targets == {0: {"qwen": frozenset({"all"})}}


def test_family_override(matrix: Matrix) -> None:
    selection = select(matrix, [ChangedFile("src/megatron/bridge/utils/fusions.py")], family_override=["llama"])
    assert selection.families == ("llama",) and selection.levels == (0, 5)


def test_unknown_family_override_suggests(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match=r"unknown family.*did you mean 'llama'"):
        select(matrix, [], requested=[0], family_override=["lama"])
