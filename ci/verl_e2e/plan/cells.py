"""Selection x matrix -> Cell records (one verl run each) and the GitHub matrix that fans them out.

Pure and deterministic: the same selection and matrix give the same cells, byte for byte, in the
order level, variant (as written in matrix.yaml), family.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from verl_e2e.config.matrix import Family, Matrix, ModelRef, Variant
from verl_e2e.errors import PlanError
from verl_e2e.plan.select import Selection

SKILL_BRIDGE_TESTS = (
    "tests/unit_tests/models/test_model_provider_mixin.py",
    "tests/unit_tests/models/test_param_mapping.py",
    "tests/unit_tests/training/test_integration.py",
)


@dataclass(frozen=True)
class CellPhase:
    name: str
    env: dict[str, str]
    args: list[str]
    expect: dict[str, Any]


@dataclass(frozen=True)
class Cell:
    """One verl run: a level's variant on one model family. `id` is stable across runs."""

    id: str
    level: int
    variant: str
    family: str
    model: str
    dummy_config: dict[str, Any] | None  # config overrides for verl's dummy-model path, or None
    gpus: int
    runs_on: list[str]
    timeout_minutes: int
    minutes: int
    phases: list[CellPhase]
    checks: list[str]
    limitations: list[str]
    bridge_tests: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def matrix_entry(self) -> dict[str, Any]:
        """What one GitHub matrix job needs to pick a runner; the full cell travels in plan.json."""
        return {
            "id": self.id,
            "level": self.level,
            "variant": self.variant,
            "family": self.family,
            "model": self.model,
            "gpus": self.gpus,
            "runs_on": self.runs_on,
            "timeout_minutes": self.timeout_minutes,
            "minutes": self.minutes,  # planned run time: the budget for running it again on the merge base
            # the job outlives the cell's own deadline (every phase plus setup), so the tool times out first
            "job_timeout_minutes": self.timeout_minutes * len(self.phases) + 30,
        }


def _model_env(matrix: Matrix, family: Family, ref: ModelRef, suffix: str) -> dict[str, str]:
    paths = matrix.defaults.container_paths
    env = {"MODEL_ID": ref.model, "MODEL_PATH": f"{paths['models']}/{ref.model}"}
    if ref.dummy is not None:
        env |= {
            "USE_DUMMY_MODEL": "True",
            "DUMMY_MODEL_CONFIG_PATH": f"{paths['models']}/dummy-configs/{family.name}{suffix}.json",
            "DUMMY_MODEL_PATH": f"{paths['models']}/dummy/{family.name}{suffix}",
        }
    else:
        env["USE_DUMMY_MODEL"] = "False"
    return env


def _cache_paths(value: str, paths: Mapping[str, str]) -> str:
    """`{datasets}` / `{models}` in a matrix value -> the cache's path inside the container: a level whose
    task is not GSM8K (Level 5's arithmetic) names its files without knowing where a site mounts them."""
    for name in ("datasets", "models"):
        value = value.replace("{" + name + "}", paths[name])
    return value


def _runtime_env(matrix: Matrix, gpus: int) -> dict[str, str]:
    paths = matrix.defaults.container_paths
    env = {
        "NUM_GPUS": str(gpus),
        "TRAIN_FILES": f"{paths['datasets']}/gsm8k/train.parquet",
        "VAL_FILES": f"{paths['datasets']}/gsm8k/test.parquet",
        "HF_HOME": paths["hf_home"],
    }
    if matrix.defaults.reward_model:
        env["RM_MODEL_PATH"] = f"{paths['models']}/{matrix.defaults.reward_model}"
    return env


def _limitations(
    matrix: Matrix, *, level: int, variant: Variant, family: Family, ref: ModelRef, kinds: frozenset[str]
) -> list[str]:
    out = list(matrix.levels[0].limitations)
    if level != 0:
        out += matrix.levels[level].limitations
    if "lora" in kinds and variant.applies_to == "custom":  # LoRA kept on: the variant's own words do not hold
        out.append(
            "custom layers trained with LoRA adapters (the change is to LoRA code) at TP=2 for one step; their "
            "numerics are not compared to HF"
        )
    else:
        out += variant.limitations
    if ref.dummy is not None:
        out.append(
            f"dummy model (random weights, {ref.model} architecture shrunk): proves construction and "
            "training mechanics only"
        )
    if "moe" in kinds and variant.env.get("COMMON_EP", matrix.base_env.get("COMMON_EP", "1")) == "1":
        out.append("MoE at COMMON_EP=1: expert routing across ranks is not stressed")
    if family.has("vlm") and variant.applies_to != "vlm":
        out.append("VLM on text-only GSM8K: the vision path is not exercised")
    if family.no_critic is not None:
        bonus = " (with an entropy bonus, so the adapters move while every reward is the same)" if level != 5 else ""
        out.append(f"critic-free (GRPO{bonus}): the critic is not built, because {family.no_critic}")
    if family.merged_lora is not None and (variant.env.get("LORA_RANK", "4") != "0" or "lora" in kinds):
        out.append(
            "adapters merged into the weights the rollout receives (Bridge's merged export; vLLM runs without "
            f"LoRA), because {family.merged_lora}"
        )
    if family.remote_code is not None:
        out.append(f"the checkpoint's own model code runs (trust_remote_code), because {family.remote_code}")
    if level != 5:
        out.append("no convergence claim (smoke test)")
    return list(dict.fromkeys(out))


def _cell(
    matrix: Matrix, *, level: int, variant: Variant, family: Family, kinds: frozenset[str], model: str | None
) -> Cell:
    # a change that is MoE code runs its other architecture-specific variants (QAT, custom layers) on the
    # family's MoE model too: grouped-expert quantisation or expert layers exist only there
    moe_code = "moe" in kinds and family.moe_model is not None and variant.applies_to in ("quant", "custom")
    ref = family.moe_model if moe_code and family.moe_model is not None else family.model_for(variant.applies_to)
    suffix = "-moe" if ref is family.moe_model else ""
    swapped = []
    if model is not None and model != ref.model:
        swapped = [f"model {model} (--model) instead of {family.name}'s {ref.model}: that checkpoint did not run"]
    if model is not None:
        ref = ModelRef(model)
    runner = matrix.runner_for(variant.gpus)
    assert runner is not None  # config._build refuses a matrix whose runners are too small
    lvl = matrix.levels[level]
    base = dict(matrix.base_env)
    common_args = list(matrix.levels[0].args) + (list(lvl.args) if level != 0 else []) + list(variant.args)
    variant_env = dict(variant.env)
    if "lora" in kinds and variant.applies_to == "custom":  # the change is to LoRA code: keep LoRA on
        variant_env.pop("LORA_RANK", None)
    phases = []
    paths = matrix.defaults.container_paths
    for phase in variant.phases:
        env = base | (dict(lvl.env) if level != 0 else {}) | variant_env | _model_env(matrix, family, ref, suffix)
        env |= _runtime_env(matrix, variant.gpus) | dict(phase.env)
        extra: list[str] = []
        if family.no_critic is not None and env.get("ADV_ESTIMATOR", "gae") == "gae":
            env["ADV_ESTIMATOR"] = "grpo"  # GAE needs the critic this family cannot build: no critic at all
            extra = [CRITIC_FREE_ENTROPY]
        if family.merged_lora is not None and env.get("LORA_RANK", "0") != "0":
            extra.append(MERGED_LORA)  # vLLM without LoRA takes the experts by their plain names
        if family.remote_code is not None:
            extra += TRUST_REMOTE_CODE  # verl's default (False) stops such a checkpoint at its config
        env = {k: _cache_paths(v, paths) for k, v in sorted(env.items())}
        args = [_cache_paths(a, paths) for a in common_args + list(phase.args)] + extra
        phases.append(CellPhase(phase.name, env, args, dict(phase.expect)))
    tests = [*SKILL_BRIDGE_TESTS, *family.tests, f"tests/unit_tests/models/{family.name}"]
    return Cell(
        id=f"L{level}-{variant.name}-{family.name}",
        level=level,
        variant=variant.name,
        family=family.name,
        model=ref.model,
        dummy_config=dict(ref.dummy) if ref.dummy is not None else None,
        gpus=variant.gpus,
        runs_on=list(runner[1]),
        timeout_minutes=variant.timeout_minutes,
        minutes=variant.minutes,
        phases=phases,
        checks=list(variant.checks),
        limitations=_limitations(matrix, level=level, variant=variant, family=family, ref=ref, kinds=kinds) + swapped,
        bridge_tests=list(dict.fromkeys(tests)),
    )


def _variants(matrix: Matrix, level: int, family: Family, kinds: frozenset[str]) -> list[Variant]:
    """The level's variants a change of these kinds runs on this family (none the family cannot run)."""
    return [v for v in _wanted(matrix, level, family, kinds) if family.blocked(v.applies_to) is None]


def _wanted(matrix: Matrix, level: int, family: Family, kinds: frozenset[str]) -> list[Variant]:
    return [
        v
        for v in matrix.levels[level].variants
        if v.applies_to in kinds and family.supports(v.applies_to) and not v.scheduled
    ]


def scheduled_cells(matrix: Matrix) -> list[Cell]:
    """The scheduled full run: Level 0 on every family, then each scheduled-only variant (the weekly
    multi-GPU layouts) once, on the default family (its MoE model for a MoE layout), where the site
    has a runner with that many GPUs."""
    base = matrix.levels[0].variants[0]
    cells = [
        _cell(matrix, level=0, variant=base, family=f, kinds=frozenset({"all"}), model=None)
        for _, f in sorted(matrix.families.items())
        if f.blocked(base.applies_to) is None
    ]
    default = matrix.families[matrix.defaults.family]
    for level, lvl in sorted(matrix.levels.items()):
        for v in lvl.variants:
            if v.scheduled and default.supports(v.applies_to) and matrix.runner_for(v.gpus) is not None:
                cells.append(
                    _cell(matrix, level=level, variant=v, family=default, kinds=frozenset({v.applies_to}), model=None)
                )
    return cells


def expand(matrix: Matrix, selection: Selection, model: str | None = None) -> list[Cell]:
    """Every selected (level, family) x each variant whose `applies_to` is among the target's kinds."""
    cells: list[Cell] = []
    for level in selection.levels:
        for variant in matrix.levels[level].variants:
            for fam_name, kinds in selection.targets.get(level, {}).items():
                family = matrix.families[fam_name]
                if variant in _variants(matrix, level, family, kinds):
                    cells.append(_cell(matrix, level=level, variant=variant, family=family, kinds=kinds, model=model))
    limit = matrix.defaults.max_matrix_jobs
    if len(cells) > limit:
        raise PlanError(
            f"the plan expands to {len(cells)} cells, but one GitHub matrix allows at most {limit} jobs; "
            "narrow it with --levels or --family, or split the run"
        )
    return cells


# GRPO's advantage is a reward's distance from its group's mean: a random tiny model scores 0 on every
# answer, so the policy gradient is exactly zero and the update check fails (gemma and gemma3 on the H200,
# 2026-12-03: "gradient norm 0"). An entropy term keeps a gradient through the adapters whatever the rewards.
CRITIC_FREE_ENTROPY = "actor_rollout_ref.actor.entropy_coeff=0.001"
# vLLM 0.24 names a LoRA-enabled model's expert weights under `base_layer` whenever any of its layers has
# adapters, and verl sends them plain: a MoE model whose experts vLLM does not wrap gets KeyError
# 'layers.0.mlp.experts.0.gate_proj.weight' at the first weight sync. Merged, vLLM runs without LoRA.
MERGED_LORA = "actor_rollout_ref.model.lora.merge=True"
# verl hands the model's flag to AutoBridge, transformers and vLLM; the critic and the dataset's tokenizer
# read their own
TRUST_REMOTE_CODE = [f"{key}.trust_remote_code=True" for key in ("actor_rollout_ref.model", "critic.model", "data")]

KIND_WORDS = {"moe": "MoE", "vlm": "VLM", "mtp": "MTP", "quant": "quantised", "custom": "custom-layer"}


def uncovered(matrix: Matrix, selection: Selection) -> dict[int, list[str]]:
    """Why a selected level (or one of its kinds) has no cell: it is reported, never passed silently."""
    out: dict[int, list[str]] = {lv: list(w) for lv, w in selection.unsupported.items()}
    for level in selection.levels:
        for fam_name, kinds in selection.targets.get(level, {}).items():
            family = matrix.families[fam_name]
            made = {v.applies_to for v in _variants(matrix, level, family, kinds)}
            for v in _wanted(matrix, level, family, kinds):
                why = family.blocked(v.applies_to)
                if why is not None:
                    out.setdefault(level, []).append(f"{fam_name}: cannot run in verl today: {why}")
            if not made and any(family.blocked(v.applies_to) for v in _wanted(matrix, level, family, kinds)):
                continue
            if not made:
                wanted = ", ".join(KIND_WORDS.get(k, "generic") for k in sorted(kinds))
                out.setdefault(level, []).append(
                    f"{fam_name}: Level {level} has no variant for a {wanted} change on {family.model.model}"
                )
                continue
            for kind in sorted(kinds - made - {"all"}):
                if any(v.applies_to == kind for v in matrix.levels[level].variants):
                    out.setdefault(level, []).append(
                        f"{fam_name}: its {KIND_WORDS[kind]} variant needs a {KIND_WORDS[kind]} model; "
                        f"{family.model.model} is not one (add {kind}_model to families.{fam_name})"
                    )
    return {lv: list(dict.fromkeys(w)) for lv, w in sorted(out.items()) if w}


def gpu_minutes(cells: list[Cell]) -> int:
    return sum(c.gpus * c.minutes for c in cells)


def github_matrix(cells: list[Cell]) -> str:
    """The `{"include": [...]}` JSON for `strategy.matrix`, compact and key-sorted."""
    return json.dumps({"include": [c.matrix_entry() for c in cells]}, sort_keys=True, separators=(",", ":"))


def cell_from_json(data: Mapping[str, Any]) -> Cell:
    """Inverse of `Cell.to_json` (for cell.json in a run dir)."""
    fields = dict(data)
    fields["phases"] = [CellPhase(**p) for p in data["phases"]]
    return Cell(**fields)
