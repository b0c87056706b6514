"""tools/make_tiny_model.py: the shrink rules on config dicts (always), and three real builds that load back
and run (only where torch and transformers are installed: CI has neither by default, the GPU node has both)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from .conftest import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tiny_model", ROOT / "tools/make_tiny_model.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_model"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


mtm = _load()
shrink, builder = sys.modules["tiny_shrink"], sys.modules["tiny_processor"]  # its helpers, on the tool's path


# --- pure rules: no torch ---------------------------------------------------------------------------------


def test_dense_defaults_shrink_to_two_narrow_layers_and_the_tokenizer_vocabulary() -> None:
    llama = {
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131072,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "pad_token_id": None,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    }
    over, notes = mtm.shrink_overrides(llama, 1024, eos=2, pad=0)
    assert over == {
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": 2048,
        "bos_token_id": None,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    assert notes == []


def test_multi_head_stays_multi_head_and_an_unset_kv_count_is_written_out() -> None:
    assert mtm.shrink_overrides({"num_attention_heads": 32, "num_key_value_heads": 32}, 1024)[0] == {
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    }
    assert mtm.shrink_overrides({"num_attention_heads": 48, "num_key_value_heads": None}, 1024)[0] == {
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    }
    assert mtm.shrink_overrides({"num_attention_heads": 16, "num_key_value_heads": 1}, 1024)[0] == {
        "num_attention_heads": 4
    }


def test_deepseek_moe_keeps_one_dense_layer_one_group_and_the_mla_head_shapes() -> None:
    deepseek = {
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "first_k_dense_replace": 3,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "head_dim": 64,
    }
    over, _ = mtm.shrink_overrides(deepseek, 1024)
    assert over["n_routed_experts"] == 8 and over["num_experts_per_tok"] == 2
    assert over["n_group"] == 1 and over["topk_group"] == 1
    assert over["first_k_dense_replace"] == 1 and over["num_hidden_layers"] == 2
    assert over["moe_intermediate_size"] == 128 and over["q_lora_rank"] == 128
    for kept in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_shared_experts"):
        assert kept not in over


def test_a_periodic_layer_pattern_keeps_one_whole_period() -> None:
    pattern = (["linear_attention"] * 3 + ["full_attention"]) * 12
    over, _ = mtm.shrink_overrides({"num_hidden_layers": 48, "layer_types": pattern}, 1024)
    assert over == {"num_hidden_layers": 4, "layer_types": pattern[:4]}
    gemma3 = (["sliding_attention"] * 5 + ["full_attention"]) * 4 + ["sliding_attention"] * 2
    assert mtm.shrink_overrides({"num_hidden_layers": 26, "layer_types": gemma3}, 1024)[0]["num_hidden_layers"] == 6


def test_a_leading_block_of_dense_layers_shrinks_to_one() -> None:
    mlp = ["dense"] * 3 + ["sparse"] * 75
    attn = ["deepseek_sparse_attention"] * 78
    over, _ = mtm.shrink_overrides(
        {"num_hidden_layers": 78, "mlp_layer_types": mlp, "layer_types": attn, "first_k_dense_replace": 3}, 1024
    )
    assert over["mlp_layer_types"] == ["dense", "sparse"]
    assert over["layer_types"] == attn[:2]
    assert over["first_k_dense_replace"] == 1 and over["num_hidden_layers"] == 2


def test_a_hybrid_pattern_string_and_a_pattern_too_long_are_cut_with_a_note() -> None:
    over, notes = mtm.shrink_overrides({"num_hidden_layers": 12, "hybrid_override_pattern": "MMMMMMMMM*-E"}, 1024)
    assert over == {"num_hidden_layers": 4, "hybrid_override_pattern": "M*-E"}
    assert notes == []
    over, notes = mtm.shrink_overrides({"num_hidden_layers": 12, "hybrid_override_pattern": "M-M-M-M-M-*E"}, 1024)
    assert over == {"num_hidden_layers": 8, "hybrid_override_pattern": "M-M-M-M-"}
    assert notes == ["num_hidden_layers: the layer pattern needs 12 layers, cut to 8"]


def test_vlm_sub_configs_shrink_with_a_narrower_tower_that_still_feeds_the_lm() -> None:
    vl = {
        "image_token_id": 151655,
        "vision_start_token_id": 151652,
        "text_config": {
            "vocab_size": 151936,
            "hidden_size": 2048,
            "num_hidden_layers": 28,
            "intermediate_size": 6144,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5e6},
        },
        "vision_config": {
            "depth": 27,
            "hidden_size": 1152,
            "out_hidden_size": 2048,
            "num_heads": 16,
            "intermediate_size": 4304,
            "deepstack_visual_indexes": [8, 16, 24],
            "patch_size": 16,
        },
    }
    over, _ = mtm.shrink_overrides(vl, 1024, mrope=[24, 20, 20])
    vision = over["vision_config"]
    assert vision == {
        "depth": 2,
        "hidden_size": 128,
        "out_hidden_size": 256,
        "num_heads": 2,
        "intermediate_size": 256,
        "deepstack_visual_indexes": [0, 1],
    }
    text = over["text_config"]
    assert text["hidden_size"] == 256 and text["num_hidden_layers"] == 2
    # M-RoPE's split follows the head: 64 / 2 = 32 rotary pairs, in the proportions of [24, 20, 20]
    assert text["rope_parameters"] == {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [12, 10, 10]}
    # multimodal token ids past the new vocabulary move into its padded tail, one id each
    assert {over["image_token_id"], over["vision_start_token_id"]} == {1023, 1022}


def test_mrope_sections_follow_a_partial_rotary_head() -> None:
    text = {
        "vocab_size": 248320,
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 8,
        "head_dim": 256,
        "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25},
    }
    over, _ = mtm.shrink_overrides({"text_config": text}, 1024, mrope=[11, 11, 10])
    assert over["text_config"]["rope_parameters"]["mrope_section"] == [3, 3, 2]  # 64 * 0.25 / 2 = 8
    assert shrink.scale_sections([16, 24, 24], 16) == [4, 6, 6]


def test_per_layer_settings_keyed_by_layer_keep_the_layers_that_remain_and_shrink_too() -> None:
    layer_types = (["sliding_attention"] * 5 + ["full_attention"]) * 5
    gemma4 = {
        "num_hidden_layers": 30,
        "layer_types": layer_types,
        "head_dim": 256,
        "per_layer_config": {str(i): {"head_dim": 512} for i in (5, 11, 17, 23, 29)},
    }
    over, _ = mtm.shrink_overrides(gemma4, 1024)
    assert over["num_hidden_layers"] == 6
    assert over["per_layer_config"] == {"5": {"head_dim": 64}}
    merged = mtm.deep_merge(gemma4, over)
    assert merged["per_layer_config"] == {"5": {"head_dim": 64}}  # replaced whole, not merged key by key


def test_mamba_mixer_heads_and_groups_stay_consistent() -> None:
    falcon = {
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "mamba_n_heads": 128,
        "mamba_d_head": 8,
        "mamba_d_ssm": 1024,
        "mamba_n_groups": 4,
    }
    over, _ = mtm.shrink_overrides(falcon, 1024)
    assert over["mamba_n_heads"] == 8 and over["mamba_n_groups"] == 1
    assert over["mamba_d_ssm"] == 8 * 8


def test_moe_and_mtp_switches_land_in_the_language_model_config() -> None:
    gemma4 = {
        "num_hidden_layers": 30,
        "vocab_size": 262144,
        "num_experts": None,
        "top_k_experts": None,
        "moe_intermediate_size": None,
        "enable_moe_block": False,
    }
    assert mtm.moe_overrides(gemma4) == {
        "num_experts": 8,
        "top_k_experts": 2,
        "moe_intermediate_size": 128,
        "enable_moe_block": True,
    }
    assert mtm.mtp_overrides({"num_hidden_layers": 61, "vocab_size": 1, "num_nextn_predict_layers": 0}) == {
        "num_nextn_predict_layers": 1
    }
    qwen35_vl = {"text_config": {"num_hidden_layers": 24, "vocab_size": 1}, "vision_config": {"depth": 12}}
    assert mtm.mtp_overrides(qwen35_vl) == {"mtp_num_hidden_layers": 1, "text_config": {"mtp_num_hidden_layers": 1}}
    # a config with no count key, in DeepSeek-V3's MTP checkpoint format: DeepSeek's key, which Hy3's bridge
    # reads for its MTP mappings (with the other key Megatron built an MTP layer the bridge could not load)
    assert mtm.mtp_overrides({"num_hidden_layers": 80, "vocab_size": 1}, "HYV3ForCausalLM") == {
        "num_nextn_predict_layers": 1
    }


def test_families_come_from_matrix_yaml_and_provider_only_ones_borrow_an_architecture() -> None:
    families = mtm.load_families(yaml.safe_load((ROOT / "matrix.yaml").read_text()))
    assert families["qwen3_moe"].architectures == ("Qwen3MoeForCausalLM",)
    assert families["qwen35_vl_moe"].kinds == ("moe", "mtp", "vlm")
    assert families["mamba"].borrowed_from == "nemotronh"
    assert families["mamba"].architectures == ("NemotronHForCausalLM",)
    assert mtm.padded_vocab(985) == 1024 and mtm.padded_vocab(1024) == 1024


def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mtm.main([str(tmp_path), "--tokenizer", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no tokenizer_config.json" in err[0]
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    assert mtm.main([str(tmp_path), "--tokenizer", str(tmp_path / "tok"), "--family", "qwen3moe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "make_tiny_model: unknown family 'qwen3moe' (matrix.yaml has "
        f"{len(yaml.safe_load((ROOT / 'matrix.yaml').read_text())['families'])}); did you mean 'qwen3_moe'?"
    ]


# --- real builds: torch and transformers ------------------------------------------------------------------


def tiny_tokenizer(out: Path) -> Path:
    """A 300-token byte-level BPE tokenizer with the Qwen2 chat tokens, written to `out` (the builder's
    --tokenizer: the node passes the tiny Qwen2's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["Tom has 3 apples and buys 4 more.", "How many pens are there in total?"] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    torch = pytest.importorskip("torch", reason="torch is not installed: the tiny-model builds run on the GPU node")
    pytest.importorskip("transformers", reason="transformers is not installed: the tiny-model builds need it")
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tiny")
    tiny_tokenizer(root / "tokenizer")
    report = root / "report.json"
    rc = mtm.main(
        [
            str(root / "out"),
            "--tokenizer",
            str(root / "tokenizer"),
            "--report",
            str(report),
            "--family",
            "qwen",
            "--family",
            "qwen3_moe",
            "--family",
            "deepseek_v3",
            *("--family", "deepseek", "--family", "glm", "--family", "minimax_m2", "--family", "ministral3"),
            *("--family", "hy_v3", "--family", "glm_vl", "--family", "qwen25_vl", "--family", "qwen_vl"),
            *("--family", "glm45", "--family", "glm_moe_dsa", "--family", "mimo_v2_flash", "--family", "deepseek_v4"),
            *("--family", "gemma_vl", "--family", "gemma4", "--family", "gemma4_vl", "--family", "minimax_m3"),
            *("--family", "step37", "--family", "qwen3_vl_moe", "--family", "exaone45", "--family", "ernie_vl"),
        ]
    )
    doc = json.loads(report.read_text())
    assert rc == 0, doc
    return root / "out", {r["family"]: r for r in doc["families"]}


@pytest.mark.parametrize(
    ("family", "architecture", "layers", "low", "high"),
    [
        ("qwen", "Qwen2ForCausalLM", 2, 500_000, 4_000_000),
        ("qwen3_moe", "Qwen3MoeForCausalLM", 2, 1_000_000, 6_000_000),
        ("deepseek_v3", "DeepseekV3ForCausalLM", 2, 2_000_000, 12_000_000),
    ],
)
def test_a_built_family_loads_back_and_runs_eight_tokens(
    built: tuple[Path, dict[str, Any]], family: str, architecture: str, layers: int, low: int, high: int
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    out, rows = built
    row = rows[family]
    assert row["ok"], row["error"]
    assert low <= row["params"] <= high
    assert row["mb"] < 30
    config = json.loads((out / family / "config.json").read_text())
    assert config["architectures"] == [architecture]
    assert config["num_hidden_layers"] == layers
    assert (out / family / "tokenizer.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out / family)
    assert type(model).__name__ == architecture
    with torch.no_grad():
        logits = model(input_ids=torch.randint(0, 250, (1, 8))).logits
    assert logits.shape == (1, 8, config["vocab_size"])
    assert torch.isfinite(logits.float()).all()


def test_mtp_weights_follow_the_checkpoint_naming(built: tuple[Path, dict[str, Any]]) -> None:
    from safetensors import safe_open

    out, rows = built
    assert rows["deepseek_v3"]["overrides"]["num_nextn_predict_layers"] == 1
    with safe_open(str(out / "deepseek_v3" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    for part in ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.norm.weight", "mlp.gate.weight"):
        assert f"model.layers.2.{part}" in names  # layers.{num_hidden_layers}: the MTP layer, as DeepSeek-V3 ships it


@pytest.mark.parametrize(
    ("family", "path", "value"),
    [
        ("deepseek", ("n_group",), 1),  # vLLM's grouped top-k routing needs both
        ("deepseek", ("topk_group",), 1),
        ("glm", ("first_k_dense_replace",), 1),
        ("minimax_m2", ("rotary_dim",), 32),
        ("minimax_m2", ("scoring_func",), "sigmoid"),
        ("hy_v3", ("first_k_dense_replace",), 1),
        ("glm_vl", ("text_config", "head_dim"), 64),
        ("glm45", ("head_dim",), 64),
        ("deepseek_v3", ("topk_method",), "noaux_tc"),  # vLLM builds the router's correction bias only then
        ("glm_vl", ("text_config", "use_qk_norm"), False),
        ("glm_moe_dsa", ("indexer_rope_interleave",), False),
        ("mimo_v2_flash", ("swa_rope_theta",), 10000.0),
        ("deepseek_v4", ("rope_parameters", "compress", "factor"), 16.0),
        ("ministral3", ("text_config", "model_type"), "ministral3"),
        ("ministral3", ("text_config", "rope_parameters", "llama_4_scaling_beta"), 0.1),
        # the release's remote-code names, restating the tiny model's own pattern (1: sliding window, MoE)
        ("mimo_v2_flash", ("hybrid_layer_pattern",), [0, 1]),
        ("mimo_v2_flash", ("moe_layer_freq",), [0, 1]),
        ("mimo_v2_flash", ("swa_num_key_value_heads",), 2),
        ("mimo_v2_flash", ("sliding_window_size",), 128),
        (
            "minimax_m3",
            ("vision_config", "img_token_compression_config"),
            {"spatial_merge_size": 2, "temporal_patch_size": 2},
        ),
        # Bridge always reads Gemma 4's global head size as 512 (transformers keeps no global_head_dim)
        ("gemma4", ("per_layer_config",), {"5": {"head_dim": 512}}),
        ("gemma4_vl", ("text_config", "per_layer_config"), {"5": {"head_dim": 512}}),
        ("gemma4_vl", ("vision_config", "hidden_size"), 128),  # a tower, where the class's default has none
        # the ninth batch's stops (H200, 2026-12-04), each a key vLLM or Bridge read off the release's config
        ("mimo_v2_flash", ("scoring_func",), "sigmoid"),
        ("minimax_m2", ("use_routing_bias",), True),
        ("glm_moe_dsa", ("topk_method",), "noaux_tc"),
        ("qwen3_vl_moe", ("text_config", "norm_topk_prob"), True),
        ("minimax_m3", ("text_config", "hidden_act"), "swigluoai"),  # written past transformers' forced "silu"
        ("step37", ("vision_config", "width"), 128),  # Bridge sizes the align projector from width * 4
        ("step37", ("vision_config", "layers"), 2),
    ],
)
def test_keys_the_released_configs_carry_and_vllm_or_bridge_read(
    built: tuple[Path, dict[str, Any]], family: str, path: tuple[str, ...], value: Any
) -> None:
    """Each key's absence stopped a real Level 0 cell of the family in vLLM or Bridge (2026-12-03)."""
    out, rows = built
    assert rows[family]["ok"], rows[family]
    node: Any = json.loads((out / family / "config.json").read_text())
    for key in path:
        node = node[key]
    assert node == value


@pytest.mark.parametrize(
    ("family", "tokens"),
    [
        ("deepseek_v3", ("<\uff5cend\u2581of\u2581sentence\uff5c>", "<\uff5cAssistant\uff5c>")),
        ("deepseek", ("<\uff5cend\u2581of\u2581sentence\uff5c>",)),
        ("glm45", ("<|observation|>", "<|user|>")),
        ("minimax_m2", ("[e~[",)),
    ],
)
def test_the_tokenizer_has_the_turn_tokens_verl_requires_of_the_model_type(
    built: tuple[Path, dict[str, Any]], family: str, tokens: tuple[str, ...]
) -> None:
    """verl's chat-turn builder for the model type looks these up and stops without them (a tiny DeepSeek
    stopped in verl's agent loop on the H200, 2026-12-03); a family verl builds Qwen-style gets none."""
    from transformers import AutoTokenizer

    out, rows = built
    assert rows[family]["ok"], rows[family]
    tok = AutoTokenizer.from_pretrained(out / family)
    config = json.loads((out / family / "config.json").read_text())
    ids = [tok.convert_tokens_to_ids(t) for t in tokens]
    assert all(i is not None and i != tok.unk_token_id for i in ids), ids
    assert max(ids) < config["vocab_size"]  # inside the embedding rows
    assert tok.decode(ids) == "".join(tokens)
    plain = AutoTokenizer.from_pretrained(out / "qwen")
    assert tokens[0] not in plain.get_vocab()


def test_qwen25_vl_keeps_the_rotary_half_bridge_splits_by_the_release(built: tuple[Path, dict[str, Any]]) -> None:
    """Bridge's Qwen2.5-VL provider splits every head's rotary half as (16, 24, 24) whatever the config says:
    the tiny model's heads must be 128 wide, and its own M-RoPE split must say so (H200 run, 2026-12-03)."""
    out, rows = built
    assert rows["qwen25_vl"]["ok"], rows["qwen25_vl"]
    text = json.loads((out / "qwen25_vl" / "config.json").read_text())["text_config"]
    head = text["hidden_size"] // text["num_attention_heads"]
    assert head == 128 and sum(text["rope_parameters"]["mrope_section"]) * 2 == head
    assert text["num_attention_heads"] % text["num_key_value_heads"] == 0


def test_the_processor_is_cut_to_the_vision_towers_patches(built: tuple[Path, dict[str, Any]]) -> None:
    """A processor at its class defaults cut 14-pixel patches for Qwen3-VL's 16-pixel tower in vLLM."""
    from transformers import AutoConfig

    out, rows = built
    assert rows["qwen_vl"]["ok"], rows["qwen_vl"]
    config = AutoConfig.from_pretrained(out / "qwen_vl")
    sizes = builder.vision_geometry(config)
    assert sizes == {
        "patch_size": config.vision_config.patch_size,
        "temporal_patch_size": config.vision_config.temporal_patch_size,
        "merge_size": config.vision_config.spatial_merge_size,
    }
    assert sizes["patch_size"] == 16
    assert builder.vision_geometry(AutoConfig.from_pretrained(out / "qwen")) == {}


def test_the_feature_extractor_makes_the_mel_bins_the_audio_tower_takes() -> None:
    """Whisper's extractor at its defaults made 80 bins for Qwen2-Audio's 128-bin tower in vLLM ("expected
    input[10, 80, 3000] to have 128 channels", eighth batch)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2AudioConfig(audio_config={"num_mel_bins": 128})
    assert builder.audio_geometry(config) == {"feature_size": 128}
    assert builder.audio_geometry(transformers.Qwen2Config()) == {}


def test_the_tokens_vllms_processors_look_up_are_in_the_vocabulary(built: tuple[Path, dict[str, Any]]) -> None:
    """vLLM looks the processor's image token and Gemma 3's newline runs up in the vocabulary (KeyError
    without them: EXAONE 4.5 and Gemma 3 cells, H200, 2026-12-04); a half-written model is never left."""
    pytest.importorskip("PIL")
    from transformers import AutoProcessor

    out, rows = built
    exaone = AutoProcessor.from_pretrained(out / "exaone45")
    vocab = exaone.tokenizer.get_vocab()
    config = json.loads((out / "exaone45" / "config.json").read_text())
    assert vocab[exaone.image_token] == config["image_token_id"]  # not the ordinary token 67 the default named
    gemma = AutoProcessor.from_pretrained(out / "gemma_vl").tokenizer.get_vocab()
    assert all(n in gemma for n in ("\n", "\n\n", "\n\n\n", "\n\n\n\n"))
    assert rows["ernie_vl"]["ok"], rows["ernie_vl"]  # its video processor no longer needs the release's font
    assert (out / "ernie_vl" / "processor_config.json").is_file()


def test_a_processor_that_reads_named_tokens_off_the_tokenizer_is_written(built: tuple[Path, dict[str, Any]]) -> None:
    """Gemma 3's processor reads `boi_token` off the tokenizer: the tiny tokenizer names the tokens it adds
    (eighth batch: no processor, so vLLM would not load the model)."""
    pytest.importorskip("PIL")
    from transformers import AutoProcessor

    out, rows = built
    assert rows["gemma_vl"]["ok"], rows["gemma_vl"]
    processor = AutoProcessor.from_pretrained(out / "gemma_vl")
    config = json.loads((out / "gemma_vl" / "config.json").read_text())
    assert processor.tokenizer.image_token_id == config["image_token_index"]
    assert processor.tokenizer.boi_token_id == config["boi_token_index"]


def test_a_sparse_attention_indexer_keeps_the_head_count_vllms_kernel_takes() -> None:
    """GLM-5's indexer runs in vLLM through DeepGEMM's MQA-logits kernel, which asserts 32 or 64 heads:
    the 4-head indexer an earlier shrink wrote stopped glm_moe_dsa on the H200 (2026-12-04)."""
    glm5 = {"num_attention_heads": 64, "num_key_value_heads": 64, "index_n_heads": 32, "index_head_dim": 128}
    over, _ = mtm.shrink_overrides(glm5, 1024)
    assert over["num_attention_heads"] == 4 and "index_n_heads" not in over


def test_ernie_vl_gets_the_top_level_keys_vllm_reads_from_its_nested_config() -> None:
    """vLLM 0.24's ERNIE-4.5-VL reads the release's top-level names; transformers nests them."""
    from types import SimpleNamespace

    import tiny_release  # on sys.path once make_tiny_model.py is loaded

    class Config(SimpleNamespace):  # stands in for PretrainedConfig: attributes plus to_dict()
        def to_dict(self) -> dict[str, object]:
            return {k: v.to_dict() if isinstance(v, Config) else v for k, v in vars(self).items()}

    vision = Config(spatial_merge_size=2, temporal_merge_size=2, hidden_size=128, intermediate_size=256)
    text = Config(
        hidden_size=256,
        vocab_size=1024,
        num_hidden_layers=3,
        image_token_id=7,
        moe_num_experts=8,
        moe_intermediate_size=[64, 32],
        mlp_layer_types=["dense", "sparse", "sparse"],
    )
    config = Config(vision_config=vision, text_config=text, image_token_id=1021)
    notes = tiny_release.add_release_keys("Ernie4_5_VLMoeForConditionalGeneration", config)
    # the release's flat layout: the text model's keys at the top, where vLLM's text model reads them
    # (vocab_size stopped the twelfth batch's cell); a key the top already has keeps its own value
    assert (config.vocab_size, config.num_hidden_layers, config.image_token_id) == (1024, 3, 1021)
    # its experts as [text, vision] pairs, MoE from the first sparse layer to the last layer
    # (transformers keeps the widths as a pair already: they stay as they are, not nested; the twelfth
    # batch's second cell met [[128, 128], [128, 128]] in vLLM's shared-expert width)
    assert (config.moe_num_experts, config.moe_intermediate_size) == ([8, 8], [64, 32])
    assert (config.moe_layer_start_index, config.moe_layer_end_index) == ([1, 1], [2, 2])
    assert (config.spatial_conv_size, config.temporal_conv_size, config.pixel_hidden_size) == (2, 2, 128)
    assert (config.im_patch_id, config.hidden_size, config.use_temporal_conv) == (1021, 256, True) and notes
    # the tower, as vLLM's reads it: the release's width and MLP ratio (the eleventh batch's stops)
    assert (vision.embed_dim, vision.mlp_ratio) == (128, 2.0)


def test_minimax_m3_gets_the_image_frame_tokens_its_vllm_processor_looks_up() -> None:
    import tiny_tokens

    class Tokenizer:
        def __init__(self) -> None:
            self.vocab = {"]<]image[>[": 1023}

        def get_vocab(self) -> dict[str, int]:
            return self.vocab

        def add_tokens(self, tokens: list[str]) -> None:
            self.vocab |= {t: len(self.vocab) + 1000 for t in tokens}

    tok, notes = Tokenizer(), []
    tiny_tokens.add_vocab_tokens("minimax_m3_vl", tok, notes)
    assert {"]<]start of image[>[", "]<]end of image[>["} <= set(tok.vocab) and notes


def test_hy_v3_gets_the_expert_width_under_the_name_vllm_reads() -> None:
    from types import SimpleNamespace

    import tiny_release

    config = SimpleNamespace(moe_intermediate_size=128)
    tiny_release.add_release_keys("HYV3ForCausalLM", config)
    assert config.expert_hidden_dim == 128


def test_step37_declares_the_per_head_gate_bridge_maps_from_the_release() -> None:
    """Bridge sizes Step-3.7's QKV with the head-wise gate only when the config says so (the release does)."""
    from types import SimpleNamespace

    import tiny_release

    vision = SimpleNamespace(hidden_size=128, num_hidden_layers=2, num_attention_heads=2)
    config = SimpleNamespace(vision_config=vision, text_config=SimpleNamespace())
    tiny_release.add_release_keys("Step3p7ForConditionalGeneration", config)
    assert config.text_config.use_head_wise_attn_gate is True and config.vision_config.width == 128


def test_gemma3_vlm_tower_has_as_many_patches_per_side_as_the_projector_pools_to() -> None:
    """vLLM's Gemma 3 projector pools patches per side to sqrt(mm_tokens_per_image); 224 px in 14 px
    patches give the 16 that 256 tokens need (a kernel of 1), where 16 px patches gave a kernel of 0."""
    defaults = {"text_config": {"num_hidden_layers": 34}, "vision_config": {"image_size": 224, "patch_size": 16}}
    over, _ = mtm.shrink_overrides(defaults, 1024, architecture="Gemma3ForConditionalGeneration")
    patches = 224 // over["vision_config"]["patch_size"]
    assert patches // int(256**0.5) == 1


def test_falcon_h1_normalises_after_the_gate_as_megatron_cores_mixer_asserts() -> None:
    """Megatron-Core's Mamba mixer asserts `not norm_before_gate`; transformers' FalconH1Config defaults it on
    (the eighteenth batch's Falcon-H1 cell stopped there, H100, 2026-12-06)."""
    over, _ = mtm.shrink_overrides(
        {"num_hidden_layers": 24, "hidden_size": 1024, "mamba_norm_before_gate": True},
        1024,
        architecture="FalconH1ForCausalLM",
    )
    assert over["mamba_norm_before_gate"] is False


def test_nemotronh_level_0_model_is_the_dense_hybrid_with_a_block_of_each_kind() -> None:
    """The family's model (Nemotron-H) mixes Mamba, MLP and attention blocks and no MoE: transformers'
    default list holds an MoE block, whose experts vLLM 0.24 with LoRA names under `base_layer` (eighteenth
    batch: KeyError 'layers.1.mixer.experts.0.up_proj.weight' at the first weight sync)."""
    defaults = {"layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"], "hidden_size": 2688}
    over, _ = mtm.shrink_overrides(defaults, 1024, architecture="NemotronHForCausalLM")
    kinds = over["layers_block_type"]
    assert "moe" not in kinds and {"linear_attention", "full_attention", "mlp"} <= set(kinds)


def test_the_release_names_vllm_and_bridge_read_are_in_the_built_configs(built: tuple[Path, dict[str, Any]]) -> None:
    """What stopped the tenth batch's cells in the tiny configs (H200, 2026-12-04), read off the built models."""
    from transformers import AutoTokenizer

    out, _ = built
    glm = AutoTokenizer.from_pretrained(out / "glm_vl")
    assert len(glm.encode("<|begin_of_video|><|video|><|end_of_video|>", add_special_tokens=False)) == 3
    config = {f: json.loads((out / f / "config.json").read_text()) for f in ("gemma_vl", "ernie_vl", "hy_v3", "step37")}
    vision = config["gemma_vl"]["vision_config"]
    assert (vision["image_size"] // vision["patch_size"]) // int(config["gemma_vl"]["mm_tokens_per_image"] ** 0.5) >= 1
    assert config["ernie_vl"]["spatial_conv_size"] == config["ernie_vl"]["vision_config"]["spatial_merge_size"]
    assert config["hy_v3"]["expert_hidden_dim"] == config["hy_v3"]["moe_intermediate_size"]
    assert config["step37"]["text_config"]["use_head_wise_attn_gate"] is True
    # the eleventh batch's (2026-12-04, evening): ERNIE-4.5-VL's tower as vLLM reads it, Gemma 3's tower
    # tensors in the release's namespace
    ernie = config["ernie_vl"]["vision_config"]
    assert (
        ernie["embed_dim"] == ernie["hidden_size"]
        and ernie["embed_dim"] * ernie["mlp_ratio"] == ernie["intermediate_size"]
    )
    from safetensors import safe_open

    with safe_open(out / "gemma_vl" / "model.safetensors", "pt") as weights:
        tower = [k for k in weights.keys() if k.startswith("vision_tower.")]  # noqa: SIM118 - safe_open has no __iter__
    assert tower and all(k.startswith("vision_tower.vision_model.") for k in tower)
    # the second run's: ERNIE-4.5-VL's `use_temporal_conv`, GLM-4.5V's `<|observation|>` (verl requires it)
    assert config["ernie_vl"]["use_temporal_conv"] is True
    assert "<|observation|>" in glm.get_vocab()
