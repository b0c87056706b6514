"""A cell fitted to the machine that runs it, without hand edits: --num-gpus, --hydra, the preflight."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verl_e2e.cli.main import main
from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.run.adapt import adapt_cell
from verl_e2e.run.runcell import gpu_request

from .rundirs import cell_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "containers"))
import preflight

ALL_THERE = {
    name: f"/site/{name}/__init__.py" for name in [*preflight.REQUIRED, "vllm", "modelopt", *preflight.OPTIONAL]
}


def test_num_gpus_rewrites_every_phase_and_says_so(matrix: Matrix) -> None:
    cell = cell_for(matrix, 1)
    one = adapt_cell(cell, num_gpus=1, hydra=["data.dataloader_num_workers=0"])
    assert one.gpus == 1 and all(p.env["NUM_GPUS"] == "1" for p in one.phases)
    assert all(p.args[-1] == "data.dataloader_num_workers=0" for p in one.phases)
    assert f"ran on 1 GPU(s) instead of the plan's {cell.gpus}" in one.limitations
    assert adapt_cell(cell) == cell


def test_num_gpus_must_fit_the_cells_model_parallel_size(matrix: Matrix) -> None:
    cell = cell_for(matrix, 2)  # TP=2 x PP=2
    with pytest.raises(UsageError, match="multiple of 4"):
        adapt_cell(cell, num_gpus=2)


@pytest.mark.parametrize("bad", ["no equals sign at all!", "x=1\ny=2", "; rm -rf /"])
def test_hydra_overrides_are_validated(matrix: Matrix, bad: str) -> None:
    with pytest.raises(UsageError, match="not a Hydra override"):
        adapt_cell(cell_for(matrix, 0), hydra=[bad])


def test_named_devices_must_match_the_cells_gpu_count(matrix: Matrix) -> None:
    cell = cell_for(matrix, 0)
    with pytest.raises(UsageError, match="--num-gpus 1"):
        gpu_request(cell, "0", available=1)
    assert gpu_request(adapt_cell(cell, num_gpus=1), "0", available=1) == ["0"]


def test_preflight_turns_what_is_missing_into_overrides_and_limitations() -> None:
    found = dict(ALL_THERE, fused_weight_gradient_mlp_cuda=None, flash_attn=None)
    overrides, limitations, notes, blocking = preflight.decide({"found": found, "engine": "vllm"})
    assert blocking is None
    assert "++critic.megatron.override_transformer_config.gradient_accumulation_fusion=False" in overrides
    assert "++actor_rollout_ref.ref.megatron.override_transformer_config.attention_backend=auto" in overrides
    assert "global_profiler.tool=null" not in overrides  # nvtx is there
    assert len(limitations) == 2 and len(notes) == 2


def test_a_gated_deltanet_model_without_flashinfer_prefills_on_triton() -> None:
    gdn = "++actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.gdn_prefill_backend=triton"
    found = dict(ALL_THERE, fla="/site/fla/__init__.py", flashinfer=None)
    overrides, limitations, notes, blocking = preflight.decide({"found": found, "engine": "vllm"}, needs=preflight.FLA)
    assert blocking is None and gdn in overrides
    assert any("Triton" in limitation for limitation in limitations)
    assert any(note.startswith("flashinfer missing") for note in notes)
    assert gdn not in preflight.decide({"found": found, "engine": "vllm"})[0]  # a model without GDN layers
    with_fi = dict(found, flashinfer="/site/flashinfer/__init__.py")
    assert gdn not in preflight.decide({"found": with_fi, "engine": "vllm"}, needs=preflight.FLA)[0]
    assert gdn not in preflight.decide({"found": found, "engine": "sglang"}, needs=preflight.FLA)[0]


def test_preflight_blocks_what_verl_cannot_run_without() -> None:
    found = dict(ALL_THERE, vllm=None)
    *_, blocking = preflight.decide({"found": found, "engine": "vllm"})
    assert blocking is not None and "vLLM" in blocking
    found = dict(ALL_THERE, modelopt=None)
    assert preflight.decide({"found": found, "engine": "vllm"})[3] is None  # no checkpoints, not needed
    *_, blocking = preflight.decide({"found": found, "engine": "vllm"}, checkpointing=True)
    assert blocking is not None and "nvidia-modelopt" in blocking


def test_preflight_names_two_cudnn_copies() -> None:
    info = {
        "found": ALL_THERE,
        "engine": "vllm",
        "cudnn": {"bundled": ["/site/nvidia/cudnn/lib/libcudnn.so.9.19.0"], "system": ["/usr/lib/libcudnn.so.9.14.0"]},
    }
    notes = preflight.decide(info)[2]
    assert any("two cuDNN copies" in n and "9.19.0" in n and "9.14.0" in n for n in notes)


def test_checkpointing_cells_are_recognised(matrix: Matrix) -> None:
    assert preflight.checkpoints(cell_for(matrix, 1).to_json())
    assert not preflight.checkpoints(cell_for(matrix, 0).to_json())


def test_lookup_reads_the_real_environment_without_importing() -> None:
    info = preflight.lookup("", "vllm")
    assert "error" not in info and info["engine"] == "vllm"
    assert set(info["found"]) == {
        *preflight.REQUIRED,
        *preflight.ROLLOUT,
        *preflight.CHECKPOINTING,
        *preflight.MAMBA,
        *preflight.FLA,
        *preflight.OPTIONAL,
        *preflight.OPTIONAL_ENV,
    }
    assert info["found"]["hydra"]  # hydra-core is a dev dependency: found, by lookup alone


def test_run_cell_help_documents_the_site_flags() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "verl_e2e", "run-cell", "--help"], capture_output=True, text=True, check=True
    )
    for flag in ("--num-gpus", "--hydra", "--megatron-lm", "--no-preflight", "--import-check"):
        assert flag in proc.stdout


def test_a_bad_num_gpus_is_one_clear_line(tmp_path: Path, matrix: Matrix, capsys: pytest.CaptureFixture[str]) -> None:
    cell = tmp_path / "cell.json"
    cell.write_text(__import__("json").dumps(cell_for(matrix, 2).to_json()))
    bridge = tmp_path / "bridge" / "src" / "megatron" / "bridge"
    bridge.mkdir(parents=True)
    code = main(
        [
            "run-cell",
            str(cell),
            "--bridge",
            str(tmp_path / "bridge"),
            "--out",
            str(tmp_path / "o"),
            "--backend",
            "local",
            "--verl",
            str(tmp_path),
            "--num-gpus",
            "3",
        ],
        env={},
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "multiple of 4" in err[0]


def test_a_runner_that_owns_gpus_hands_them_out_by_id(matrix: Matrix) -> None:
    cell = cell_for(matrix, 0)  # 2 GPUs
    assert gpu_request(cell, None, available=8, runner_devices="4,5,6,7") == ["4", "5"]
    with pytest.raises(UsageError, match="this runner owns 1"):
        gpu_request(cell, None, available=8, runner_devices="3")
    assert gpu_request(cell, None, available=8) == 2  # no ownership declared: by count


def test_a_model_with_mamba_layers_needs_mamba_ssm_before_ray_starts(tmp_path: Path) -> None:
    """Megatron-Core's Mamba mixer raised "MambaSSM is not installed" three minutes into real Level 0 cells
    of four hybrid families: the preflight reads the checkpoint's config and stops the cell at once."""
    hybrid = tmp_path / "nemotronh"
    hybrid.mkdir()
    (hybrid / "config.json").write_text(json.dumps({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*"}))
    nested = tmp_path / "falcon"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"mamba_d_ssm": 64}, "model_type": "x"}))
    dense = tmp_path / "qwen"
    dense.mkdir()
    (dense / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    assert preflight.model_needs(str(hybrid)) == preflight.model_needs(str(nested)) == preflight.MAMBA
    assert preflight.model_needs(str(dense)) == {} and preflight.model_needs("Qwen/Qwen2.5-0.5B") == {}
    found = dict(ALL_THERE, mamba_ssm=None)
    *_, blocking = preflight.decide({"found": found, "engine": "vllm"}, needs=preflight.model_needs(str(hybrid)))
    assert blocking is not None and "mamba-ssm" in blocking and "for the cell's model" in blocking
    assert preflight.decide({"found": found, "engine": "vllm"}, needs={})[3] is None


def test_a_model_with_gated_deltanet_layers_needs_flash_linear_attention(tmp_path: Path) -> None:
    """Megatron-Core's gated delta net raises an ImportError at build without `fla`; Qwen3-Next keeps its
    type at the top, Qwen3.5's VLM under text_config with linear-attention layer types."""
    nxt = tmp_path / "qwen3_next"
    nxt.mkdir()
    (nxt / "config.json").write_text(json.dumps({"model_type": "qwen3_next", "hidden_size": 64}))
    vlm = tmp_path / "qwen35"
    vlm.mkdir()
    text = {"model_type": "x", "layer_types": ["linear_attention", "full_attention"]}
    (vlm / "config.json").write_text(json.dumps({"model_type": "y", "text_config": text}))
    assert preflight.model_needs(str(nxt)) == preflight.model_needs(str(vlm)) == preflight.FLA
    found = dict(ALL_THERE, fla=None)
    *_, blocking = preflight.decide({"found": found, "engine": "vllm"}, needs=preflight.model_needs(str(nxt)))
    assert blocking is not None and "flash-linear-attention" in blocking
    found["fla"] = "/site/fla/__init__.py"
    assert preflight.decide({"found": found, "engine": "vllm"}, needs=preflight.model_needs(str(nxt)))[3] is None


def test_every_import_check_process_carries_the_cells_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker check starts a Ray cluster of its own and leaves it with os._exit; the cell's sweep finds
    what it started by the token in each process's environment, so the token must reach that cluster."""
    seen: list[dict] = []

    def fake_python(code: str, args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
        """Stands in for the child interpreter: records its environment, answers a resolved import."""
        seen.append(env)
        line = 'VERL_E2E_IMPORT {"origin": "/b/src/megatron/bridge/__init__.py"}'
        return subprocess.CompletedProcess([], 0, stdout=line + "\n", stderr="")

    monkeypatch.setattr(preflight, "_python", fake_python)
    records, error = preflight.check_imports("/b/src", "location", 5, extra_env={"VERL_E2E_CELL_TOKEN": "abc"})
    assert error is None and set(records) == {"driver", "ray_worker"}
    assert [e.get("VERL_E2E_CELL_TOKEN") for e in seen] == ["abc", "abc"]
    assert all(e["PYTHONPATH"] == "/b/src" for e in seen)
