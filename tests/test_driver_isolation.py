"""The cell driver on a shared node: it stops only what it started, imports what verl imports from
Bridge before Ray starts, and records what each optimizer step did (real processes, real imports, and
real torch where the machine has it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
import driver  # noqa: E402 - the cell driver (standard library only)
import functions  # noqa: E402
import preflight  # noqa: E402


def _sleeper(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def test_a_cell_stops_its_own_processes_and_no_one_elses() -> None:
    ours = _sleeper(dict(os.environ, VERL_E2E_CELL_TOKEN="cell-a"))
    other_cell = _sleeper(dict(os.environ, VERL_E2E_CELL_TOKEN="cell-b"))
    unrelated = _sleeper(dict(os.environ))
    try:
        time.sleep(0.3)  # the children have exec'd: their environment is readable
        assert driver.stop_own_processes("cell-a", grace=5) == 0
        assert ours.wait(timeout=10) != 0
        time.sleep(0.2)
        assert other_cell.poll() is None and unrelated.poll() is None
    finally:
        for proc in (ours, other_cell, unrelated):
            proc.kill()
            proc.wait()


def test_hydra_values_that_are_cache_paths_are_translated() -> None:
    mapping = [("/cache/datasets", "/node/cache/datasets")]
    arg = "reward.custom_reward_function.path=/cache/datasets/arith/reward.py"
    assert (
        driver.translate_arg(arg, mapping) == "reward.custom_reward_function.path=/node/cache/datasets/arith/reward.py"
    )
    assert driver.translate_arg("actor_rollout_ref.rollout.enforce_eager=True", mapping).endswith("=True")


def _trees(tmp_path: Path, bridge_init: str) -> tuple[Path, Path]:
    """A Bridge src/ tree and a verl tree whose source imports two Bridge modules."""
    pkg = tmp_path / "Megatron-Bridge" / "src" / "megatron" / "bridge"
    (pkg / "peft").mkdir(parents=True)
    (pkg / "__init__.py").write_text(bridge_init)
    (pkg / "peft" / "__init__.py").write_text("")
    (pkg / "peft" / "utils.py").write_text(
        "from megatron.bridge.utils_missing import str_to_torch_dtype  # renamed upstream\n"
    )
    (pkg / "config.py").write_text("import some_optional_dependency\n")
    verl = tmp_path / "verl" / "verl" / "workers"
    verl.mkdir(parents=True)
    (verl / "peft.py").write_text(
        textwrap.dedent(
            """
            def build():
                from megatron.bridge.peft.utils import create_peft
                import megatron.bridge.config
            """
        )
    )
    return tmp_path / "Megatron-Bridge", tmp_path / "verl"


def test_the_modules_verl_imports_from_bridge_are_read_from_verls_source(tmp_path: Path) -> None:
    _, verl = _trees(tmp_path, "")
    assert preflight.verl_bridge_modules(str(verl)) == [
        "megatron.bridge",
        "megatron.bridge.config",
        "megatron.bridge.peft.utils",
    ]


def test_an_import_time_error_in_bridge_is_found_before_ray(tmp_path: Path) -> None:
    bridge, verl = _trees(tmp_path, "")
    src = str(bridge / "src") + "/"
    results = preflight.import_modules(str(bridge / "src"), preflight.verl_bridge_modules(str(verl)), src, 60)
    assert results["megatron.bridge"] is None
    failed = preflight.blocking_import(results)
    assert failed is not None and failed[0] == "megatron.bridge.peft.utils"
    err = failed[1]
    assert err["type"] == "ModuleNotFoundError" and err["in_bridge"]
    assert err["frames"][-1]["file"].endswith("peft/utils.py") and err["frames"][-1]["line"] == 1
    # a third-party module missing (an optional dependency of a module only some paths use) is not Bridge's bug
    assert results["megatron.bridge.config"]["missing_module"] == "some_optional_dependency"


def test_an_optional_dependency_alone_does_not_stop_the_cell(tmp_path: Path) -> None:
    bridge, _ = _trees(tmp_path, "")
    src = str(bridge / "src") + "/"
    results = preflight.import_modules(str(bridge / "src"), ["megatron.bridge", "megatron.bridge.config"], src, 60)
    assert preflight.blocking_import(results) is None


def _torch_python() -> str | None:
    """A Python that has torch: this one, or VERL_E2E_TORCH_PYTHON."""
    for python in (sys.executable, os.environ.get("VERL_E2E_TORCH_PYTHON", "")):
        if python and subprocess.run([python, "-c", "import torch"], capture_output=True, check=False).returncode == 0:
            return python
    return None


def test_the_probe_records_what_each_optimizer_step_did(tmp_path: Path) -> None:
    python = _torch_python()
    if python is None:
        pytest.skip("torch is not installed here: `pip install torch==2.13.0` (CPU) or set VERL_E2E_TORCH_PYTHON")
    script = textwrap.dedent(
        """
        import torch
        trained, frozen = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        opts = [torch.optim.AdamW(trained.parameters(), lr=1e-2), torch.optim.AdamW(frozen.parameters(), lr=0.0)]
        for _ in range(3):
            (trained(torch.randn(4, 8)).sum() + frozen(torch.randn(4, 8)).sum()).backward()
            for opt in opts:
                opt.step()
                opt.zero_grad()
        """
    )
    trace = tmp_path / "trace" / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "containers" / "probe"), VERL_E2E_TRACE_DIR=str(trace))
    subprocess.run([python, "-c", script], env=env, check=True, capture_output=True)
    assert functions.merge_updates(tmp_path / "trace", tmp_path / "updates.json") == 6
    steps = json.loads((tmp_path / "updates.json").read_text())["steps"]
    moved = {s["optimizer"]: s["update_norm"] for s in steps if s["step"] == 3}
    assert moved[1] > 0 and moved[2] == 0.0
    assert {s["phase"] for s in steps} == {"run"} and all(s["grad_norm"] > 0 for s in steps)


def test_an_import_failure_before_ray_names_the_changed_line(tmp_path: Path) -> None:
    """What the driver records when a module verl imports fails (provenance: setup_failure + the import
    check's frames), judged with the PR's changed lines: a Fail that names the PR's line."""
    from verl_e2e.config.matrix import load_matrix
    from verl_e2e.judge.judging import judge_run_dir

    from .rundirs import cell_for, write_run_dir

    cell = cell_for(load_matrix(), 0)
    run = write_run_dir(tmp_path / "run", cell, {})
    provenance = json.loads((run / "provenance.json").read_text())
    where = "/node/bridges/x/src/megatron/bridge/peft/utils.py"
    reason = (
        "`import megatron.bridge.peft.utils` (verl imports it) failed before Ray started: ImportError: cannot "
        "import name 'str_to_torch_dtype' at src/megatron/bridge/peft/utils.py:46 in <module>"
    )
    provenance["setup_failure"] = {"step": "imports", "class": "model_build", "reason": reason}
    provenance["import_check"] = {
        "modules": {
            "megatron.bridge.peft.utils": {
                "type": "ImportError",
                "message": "cannot import name 'str_to_torch_dtype'",
                "in_bridge": True,
                "frames": [{"file": where, "line": 46, "function": "<module>"}],
            }
        }
    }
    (run / "provenance.json").write_text(json.dumps(provenance))
    (run / "changes.json").write_text(json.dumps({"lines": {"src/megatron/bridge/peft/utils.py": [[46, 46]]}}))
    verdict = judge_run_dir(run)
    assert (verdict.result, verdict.failure_class) == ("Fail", "model_build")
    assert "in code this PR changed: `src/megatron/bridge/peft/utils.py:46`" in verdict.headline, verdict.headline
    imported = next(d for d in verdict.deliverables if d.name == "Local Bridge import in verl")
    assert imported.result == "Fail" and "str_to_torch_dtype" in imported.detail


def test_vllm_samples_without_flashinfer_where_it_is_missing() -> None:
    """Seen on the H200 (fixture 19): vLLM 0.24's V2 model runner, the default for Llama, imports
    FlashInfer for its sampler and fails at engine start-up where FlashInfer is not installed."""
    missing = {"found": {"flashinfer": None}, "engine": "vllm"}
    env, limitations, notes = preflight.environment(missing)
    assert env == {"VLLM_USE_FLASHINFER_SAMPLER": "0"} and "flashinfer is not installed" in limitations[0]
    assert notes and "VLLM_USE_FLASHINFER_SAMPLER=0" in notes[0]
    assert preflight.environment({"found": {"flashinfer": "/site/flashinfer/__init__.py"}, "engine": "vllm"})[0] == {}
    assert preflight.environment({"found": {}, "engine": "sglang"})[0] == {}


def _python312() -> str | None:
    """A Python with `sys.monitoring` (3.12+), which the probe's records need: this one, or one pyenv keeps."""
    pyenv = sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python3"))
    for python in (sys.executable, *pyenv):
        check = "import sys; sys.exit(0 if hasattr(sys, 'monitoring') else 1)"
        if subprocess.run([python, "-c", check], capture_output=True, check=False).returncode == 0:
            return python
    return None


def test_the_probe_records_the_bridge_lines_that_ran_and_not_the_branch_that_did_not(tmp_path: Path) -> None:
    python = _python312()
    if python is None:
        pytest.skip("no Python 3.12+ here: the probe's records need sys.monitoring (pyenv install 3.12)")
    bridge = tmp_path / "Megatron-Bridge"
    pkg = bridge / "src" / "megatron" / "bridge"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mapping.py").write_text(
        textwrap.dedent(
            """\
            def gather(tp_size):
                out = [1]
                if tp_size > 1:
                    out.append(2)  # line 4: only at TP > 1
                return out
            """
        )
    )
    trace = tmp_path / "trace" / "run"
    env = dict(
        os.environ,
        PYTHONPATH=f"{ROOT / 'containers' / 'probe'}:{bridge / 'src'}",
        VERL_E2E_TRACE_DIR=str(trace),
        VERL_E2E_TRACE_ROOT=str(bridge),
    )
    script = "from megatron.bridge.mapping import gather; gather(1); gather(1)"
    subprocess.run([python, "-c", script], env=env, check=True, capture_output=True)
    assert functions.merge(tmp_path / "trace", tmp_path / "bridge-functions.json") >= 2
    data = json.loads((tmp_path / "bridge-functions.json").read_text())
    ran = data["lines"]["run"]["src/megatron/bridge/mapping.py"]
    covered = {n for first, last in ran for n in range(first, last + 1)}
    assert {2, 3, 5} <= covered and 4 not in covered, ran
    assert {"gather", "<module>"} <= {f["qualname"] for f in data["functions"]}


def test_a_cache_path_the_driver_made_a_copy_of_follows_both_mappings() -> None:
    """The run-cell map takes the cell's `/cache` to this machine's; the task the driver made for the cell
    then replaces that machine's cache dir (the reward function beside the made parquet)."""
    host = [("/cache", "/node/cache")]
    made = [("/node/cache/datasets/images", "/node/runs/.work-x/data/images")]
    arg = "reward.custom_reward_function.path=/cache/datasets/images/reward.py"
    assert driver.translate_arg(arg, host, made).endswith("=/node/runs/.work-x/data/images/reward.py")
    assert (
        driver.translate("/cache/datasets/gsm8k/train.parquet", host, made)
        == "/node/cache/datasets/gsm8k/train.parquet"
    )
    assert driver.translate("/elsewhere/x", host, made) == "/elsewhere/x"
