"""Every Hydra override a cell passes is composed with verl's own configuration at the pinned commit.

verl's wrapper appends the cell's arguments to `python3 -m verl.trainer.main_ppo --config-name
ppo_megatron_trainer.yaml ...`; a key verl does not have fails there after minutes of start-up.
Here the same composition runs with hydra-core (PyPI) against `verl/trainer/config/` from
../shared/gpu/src/verl-1dda039.tgz (read in place, unpacked to tmp), so such a key fails CI instead.
Plain `key=value` overrides must name existing keys; `++key=value` may add one (the harness's own).
"""

from __future__ import annotations

import dataclasses
import sys
import tarfile
from pathlib import Path

import pytest

from verl_e2e.config.aspects import KINDS
from verl_e2e.config.matrix import LEVELS, Matrix
from verl_e2e.plan.cells import expand, scheduled_cells
from verl_e2e.plan.select import select

from .conftest import SHARED

hydra = pytest.importorskip("hydra", reason="hydra-core is a dev dependency (pip install -e '.[dev]')")
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "containers"))
import preflight  # noqa: E402 - the driver's preflight module (standard library only)

TARBALL = SHARED / "gpu" / "src" / "verl-1dda039.tgz"
# what the driver adds to every phase besides the cell's own arguments
HARNESS = [
    "reward.reward_model.enable=False",
    "trainer.default_local_dir=/tmp/verl-e2e-work/checkpoints",
    "++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH=/opt/verl-e2e/probe:/workspace/Megatron-Bridge/src",
]


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TARBALL.is_file():
        pytest.fail(f"{TARBALL} is missing: verl's source at the pinned commit is part of the shared data")
    out = tmp_path_factory.mktemp("verl")
    with tarfile.open(TARBALL) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("verl/trainer/config/") and m.isfile()]
        tar.extractall(out, members=members, filter="data")
    return out / "verl" / "trainer" / "config"


def _compose(config_dir: Path, overrides: list[str]) -> object:
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name="ppo_megatron_trainer", overrides=overrides)


def _every_cell_args(matrix: Matrix) -> dict[str, list[str]]:
    """Every variant of every level, each on a family that has a model for it (args do not depend on
    the family, only the env does; a family's `cannot_run` record is set aside here, since a variant
    whose kind family cannot run today still has arguments verl must accept)."""
    families = [matrix.defaults.family, *matrix.defaults.kind_families.values()]
    runnable = {n: dataclasses.replace(f, cannot_run=None) for n, f in matrix.families.items()}
    matrix = dataclasses.replace(matrix, families=runnable)
    selection = select(matrix, [], requested=[0, 1, 2, 3, 4, 5], family_override=families)
    every_kind = frozenset(KINDS)
    selection = dataclasses.replace(selection, targets={lv: dict.fromkeys(families, every_kind) for lv in LEVELS})
    cells = expand(matrix, selection) + [c for c in scheduled_cells(matrix) if c.level != 0]  # PR + scheduled-only
    assert {c.variant for c in cells} == {v.name for lvl in matrix.levels.values() for v in lvl.variants}
    return {f"{c.id}/{p.name}": list(p.args) for c in cells for p in c.phases}


def test_every_cells_overrides_compose_with_verls_config(matrix: Matrix, config_dir: Path) -> None:
    by_phase = _every_cell_args(matrix)
    assert any("mtp.enable_train=True" in " ".join(a) for a in by_phase.values()), "the MTP variant is planned"
    unique = {tuple(args): name for name, args in by_phase.items()}  # args -> one phase that passes them
    for args, name in sorted(unique.items(), key=lambda item: item[1]):
        try:
            _compose(config_dir, [*args, *HARNESS])
        except ConfigCompositionException as exc:
            pytest.fail(f"{name}: verl's config rejects {list(args)}: {exc}")


def test_the_preflights_overrides_compose_with_verls_config(config_dir: Path) -> None:
    fixes = [fix for _what, overrides, _limitation in preflight.OPTIONAL.values() for fix in overrides]
    cfg = _compose(config_dir, fixes)
    actor = cfg.actor_rollout_ref.actor.megatron.override_transformer_config  # type: ignore[attr-defined]
    assert actor.gradient_accumulation_fusion is False and actor.attention_backend == "auto"
    assert cfg.global_profiler.tool is None  # type: ignore[attr-defined]


def test_the_mtp_variant_turns_mtp_training_on(matrix: Matrix, config_dir: Path) -> None:
    args = next(a for n, a in _every_cell_args(matrix).items() if "-mtp-" in n or n.startswith("L4-mtp"))
    cfg = _compose(config_dir, args)
    mtp = cfg.actor_rollout_ref.model.mtp  # type: ignore[attr-defined]
    assert mtp.enable is True and mtp.enable_train is True


def test_a_critic_free_cell_builds_no_critic_and_trains_with_an_entropy_bonus(matrix: Matrix, config_dir: Path) -> None:
    """gemma's critic cannot be built (matrix.yaml `no_critic`): verl must read its cell as critic-free."""
    (cell,) = expand(matrix, select(matrix, [], requested=[0], family_override=["gemma"]))
    (phase,) = cell.phases
    cfg = _compose(config_dir, [*phase.args, f"algorithm.adv_estimator={phase.env['ADV_ESTIMATOR']}"])
    assert cfg.algorithm.adv_estimator == "grpo"  # type: ignore[attr-defined]
    assert cfg.actor_rollout_ref.actor.entropy_coeff == 0.001  # type: ignore[attr-defined]


def test_a_key_verl_does_not_have_fails(config_dir: Path) -> None:
    with pytest.raises(ConfigCompositionException):
        _compose(config_dir, ["actor_rollout_ref.model.mtp.enable_trainn=True"])


def test_a_merged_lora_cell_turns_vllm_lora_off(matrix: Matrix, config_dir: Path) -> None:
    """olmoe's experts cannot sync unmerged next to LoRA (matrix.yaml `merged_lora`): verl must read the
    cell's override as its `lora.merge` switch (the one vllm_async_server reads to start vLLM without LoRA)."""
    (cell,) = expand(matrix, select(matrix, [], requested=[0], family_override=["olmoe"]))
    (phase,) = cell.phases
    cfg = _compose(config_dir, list(phase.args))
    assert cfg.actor_rollout_ref.model.lora.merge is True  # type: ignore[attr-defined]
