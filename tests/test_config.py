"""matrix.yaml: the shipped file is valid and complete; broken files are refused with a precise message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from verl_e2e.config.matrix import Matrix, load_matrix
from verl_e2e.config.schema_check import validate_document
from verl_e2e.errors import ConfigError

from .conftest import ROOT

SKILL_LEVEL0_ENV = {
    "ENGINE": "vllm",
    "USE_MBRIDGE": "True",
    "VANILLA_MBRIDGE": "False",
    "VALUE_VANILLA_MBRIDGE": "False",
    "LORA_RANK": "4",
    "USE_MEGATRON_FSDP": "False",
    "COMMON_PP": "1",
    "COMMON_VPP": "null",
    "COMMON_CP": "1",
    "COMMON_TP": "1",
    "INFER_TP": "1",
    "ALL_OFFLOAD": "False",
    "TOTAL_TRAIN_STEPS": "1",
    "SAVE_FREQ": "-1",
    "VAL_BEFORE_TRAIN": "False",
    "TEST_FREQ": "-1",
}


def test_shipped_matrix_encodes_the_skill(matrix: Matrix) -> None:
    assert SKILL_LEVEL0_ENV.items() <= dict(matrix.base_env).items()
    save, resume = next(v for v in matrix.levels[1].variants).phases
    assert (save.env["SAVE_FREQ"], save.env["TOTAL_TRAIN_STEPS"]) == ("1", "1")
    assert (resume.env["RESUME_MODE"], resume.env["TOTAL_TRAIN_STEPS"]) == ("auto", "2")
    l2 = {v.name: v for v in matrix.levels[2].variants}
    assert l2["dense"].env["COMMON_TP"] == "2" and l2["dense"].env["COMMON_PP"] == "2"
    assert l2["moe"].applies_to == "moe" and l2["moe"].env["COMMON_EP"] == "2"
    fsdp = matrix.levels[3].variants[0]
    assert fsdp.env["USE_MEGATRON_FSDP"] == "True"
    assert {a.split(".")[0].lstrip("+") for a in fsdp.args} == {"actor_rollout_ref", "critic"}
    assert all(a.endswith("gradient_accumulation_fusion=False") for a in fsdp.args) and len(fsdp.args) == 3
    assert {v.applies_to for v in matrix.levels[4].variants} >= {"moe", "vlm"}
    l5 = matrix.levels[5].variants[0]  # the skill's 20 steps or more, with validation before and during
    assert int(l5.env["TOTAL_TRAIN_STEPS"]) >= 20 and l5.env["VAL_BEFORE_TRAIN"] == "True"
    assert matrix.defaults.family in matrix.families


def test_families_cover_bridge_model_directories(matrix: Matrix) -> None:
    """Every provider-bearing directory of megatron-bridge 0.6.2's models package has a fallback family
    (megatron_mimo registers no bridge and is ignored as off-surface)."""
    provider_dirs = {
        "bailing",
        "deepseek",
        "ernie",
        "ernie_vl",
        "exaone",
        "falcon_h1",
        "gemma",
        "gemma_vl",
        "glm",
        "glm_moe_dsa",
        "glm_vl",
        "gpt_oss",
        "hy_v3",
        "hybrid",
        "kimi",
        "kimi_vl",
        "llama",
        "llama_nemotron",
        "mamba",
        "mimo",
        "mimo_v2_flash",
        "minimax_m2",
        "minimax_m3",
        "ministral3",
        "mistral",
        "nemotron",
        "nemotron_omni",
        "nemotron_vl",
        "nemotronh",
        "olmoe",
        "qwen",
        "qwen3_asr",
        "qwen_audio",
        "qwen_omni",
        "qwen_vl",
        "sarvam",
        "stepfun",
    }
    assert provider_dirs <= set(matrix.families)


def _write(tmp_path: Path, mutate: Any) -> Path:
    document = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    mutate(document)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


BROKEN = [
    (
        lambda d: d["levels"][2]["variants"]["dense"].update(gpus="two"),
        r"\$\.levels\.2\.variants\.dense\.gpus: found \"two\", expected integer",
    ),
    (
        lambda d: d["levels"][0]["variants"]["lora-ddp"].update(timout_minutes=5),
        r"unknown key 'timout_minutes' \(did you mean 'timeout_minutes'\?\)",
    ),
    (lambda d: d["families"]["qwen"].pop("model"), r"\$\.families\.qwen: missing required key 'model'"),
    (
        lambda d: d["rules"][0].update(when_no_diff="maybe"),
        r"\$\.rules\[0\]\.when_no_diff: found \"maybe\", expected one of \"match\", \"skip\"",
    ),
    (lambda d: d["levels"].pop(3), r"\$\.levels: missing required key '3'"),
    (lambda d: d["defaults"].update(family="qwne"), r"found 'qwne'.*did you mean 'qwen'"),
    (lambda d: d["rules"][0].update(paths=["src/[oops"]), r"invalid glob 'src/\[oops'"),
    (lambda d: d["rules"][0].update(diff="(unclosed"), r"rules\[0\]\.diff: invalid regular expression"),
    (
        lambda d: d["runners"].pop(4) and d["runners"].pop(8),
        r"largest runner has 2 GPUs, but a variant needs 4",
    ),
    (lambda d: d["rules"].append(dict(d["rules"][0])), r"rule name 'model-family' appears twice"),
]


@pytest.mark.parametrize(("mutate", "message"), BROKEN)
def test_broken_matrix_is_refused_with_the_key_path(tmp_path: Path, mutate: Any, message: str) -> None:
    path = _write(tmp_path, mutate)
    with pytest.raises(ConfigError, match=message) as info:
        load_matrix(path)
    assert str(path) in str(info.value)


def test_every_schema_problem_is_listed(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    document["levels"][2]["variants"]["dense"]["gpus"] = 0
    document["families"]["qwen"]["moe"] = "yes"
    document["runners"]["x"] = ["gpu"]
    problems = validate_document(
        {str(k): v for k, v in document.items()}
        | {
            "levels": {str(k): v for k, v in document["levels"].items()},
            "runners": {str(k): v for k, v in document["runners"].items()},
        },
        "m.yaml",
    )
    joined = "\n".join(problems)
    assert len(problems) == 3, joined
    assert "$.levels.2.variants.dense.gpus: found 0, expected minimum 1" in joined
    assert "$.families.qwen.moe" in joined
    assert "$.runners" in joined


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text("version: 1\nlevels: [\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+"):
        load_matrix(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the matrix"):
        load_matrix(tmp_path / "nope.yaml")
