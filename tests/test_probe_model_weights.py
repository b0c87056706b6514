"""The probe finds the model's own weights behind a torch optimizer (containers/probe/sitecustomize.py).

Megatron's mixed-precision optimizers step fp32 copies; the probe's torch step hooks see only those. To
fingerprint the weights the model's forward ran on, the probe notes which Megatron optimizer wraps each
torch optimizer, by wrapping `MegatronOptimizer.__init__` once `megatron.core.optimizer.optimizer` is
imported. The stand-in package below reproduces the shape of Megatron-Core's classes that matter
(`MegatronOptimizer.__init__(optimizer, config, init_state_fn)` called first by every subclass;
`DistributedOptimizer.model_float16_groups`/`model_fp32_groups`;
`Float16OptimizerWithFloat16Params.float16_groups`/`fp32_from_fp32_groups`), written to a temporary
directory and imported through the real import system, so the finder and the wrapper run as on a node.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

STAND_IN = """
class MegatronOptimizer:
    def __init__(self, optimizer, config, init_state_fn=lambda x: None):
        self.optimizer = optimizer
        self.config = config


class DistributedOptimizer(MegatronOptimizer):
    def __init__(self, optimizer, config, model_float16, model_fp32):
        super().__init__(optimizer, config)
        self.model_float16_groups = model_float16
        self.model_fp32_groups = model_fp32


class Float16OptimizerWithFloat16Params(MegatronOptimizer):
    def __init__(self, optimizer, config, float16, fp32):
        super().__init__(optimizer, config)
        self.float16_groups = float16
        self.fp32_from_fp32_groups = fp32


class FP32Optimizer(MegatronOptimizer):
    pass
"""


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    pkg = tmp_path / "megatron" / "core" / "optimizer"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "megatron", tmp_path / "megatron" / "core", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "optimizer.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("VERL_E2E_TRACE_DIR", raising=False)  # no torch hooks: only the functions under test
    finders = list(sys.meta_path)
    spec = importlib.util.spec_from_file_location("verl_e2e_probe", ROOT / "containers/probe/sitecustomize.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.meta_path[:] = finders
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        del sys.modules[name]


def _import_stand_in(probe: ModuleType) -> ModuleType:
    probe._after_import("megatron.core.optimizer.optimizer", probe._register_megatron_optimizers)
    return importlib.import_module("megatron.core.optimizer.optimizer")  # the stand-in, through the finder


def test_the_distributed_optimizers_model_weights_are_found_from_its_torch_optimizer(probe: ModuleType) -> None:
    optim = _import_stand_in(probe)
    inner, other = object(), object()
    a, b, c = object(), object(), object()
    wrapper = optim.DistributedOptimizer(inner, config=None, model_float16=[[a, b]], model_fp32=[[c]])
    assert probe._model_params(inner) == [a, b, c]
    assert probe._model_params(other) is None  # a torch optimizer no Megatron optimizer wraps
    del wrapper  # the note is a weak reference: an optimizer gone is not looked up through a reused id
    assert probe._model_params(inner) is None


def test_the_plain_mixed_precision_optimizer_and_fp32_one(probe: ModuleType) -> None:
    optim = _import_stand_in(probe)
    inner, fp32_inner = object(), object()
    a, c = object(), object()
    kept = [optim.Float16OptimizerWithFloat16Params(inner, None, float16=[[a]], fp32=[[c]])]
    kept.append(optim.FP32Optimizer(fp32_inner, None))
    assert probe._model_params(inner) == [a, c]
    assert probe._model_params(fp32_inner) is None  # it steps the model's weights themselves


def test_a_dropped_megatron_optimizer_is_not_mistaken_for_a_new_one(probe: ModuleType) -> None:
    optim = _import_stand_in(probe)
    inner = object()
    wrapper = optim.DistributedOptimizer(inner, None, [[object()]], [])
    wrapper.optimizer = object()  # the pair no longer holds: the noted torch optimizer is not this one's
    assert probe._model_params(inner) is None


def test_the_wrapped_init_still_builds_the_optimizer_as_before(probe: ModuleType) -> None:
    optim = _import_stand_in(probe)
    assert optim.MegatronOptimizer.__init__.__wrapped__ is not optim.MegatronOptimizer.__init__
    wrapper = optim.DistributedOptimizer("inner", "cfg", [], [])
    assert (wrapper.optimizer, wrapper.config, wrapper.model_float16_groups) == ("inner", "cfg", [])


# Megatron's distributed optimizer in small (real torch, CPU): the model's bf16 weights, fp32 copies the
# torch optimizer steps, the copies written back into the model after each step, and a resume that loads the
# copies from the optimizer's checkpoint and the model's weights from the model's (here: none, as with an
# inverted PEFT filter, so LoRA's second matrix stays at zero in the model)
DISTRIBUTED = """
import torch
from megatron.core.optimizer.optimizer import MegatronOptimizer


class DistributedOptimizer(MegatronOptimizer):
    def __init__(self, model_params):
        self.model_float16_groups = [list(model_params)]
        self.model_fp32_groups = [[]]
        self.main = [p.detach().float().clone().requires_grad_(False) for p in model_params]
        super().__init__(torch.optim.SGD(self.main, lr=0.1), config=None)

    def step(self):
        for model, main in zip(self.model_float16_groups[0], self.main):
            main.grad = model.grad.float()
        self.optimizer.step()
        with torch.no_grad():
            for model, main in zip(self.model_float16_groups[0], self.main):
                model.copy_(main)
"""

RESUME = """
import json, sys, torch
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

a = torch.nn.Parameter(torch.ones(4, 4, dtype=torch.bfloat16))   # LoRA's first matrix
b = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.bfloat16))  # its second, zero until trained
opt = DistributedOptimizer([a, b])
if sys.argv[1] == "resume":  # the optimizer's checkpoint holds the trained copies; the model's held nothing
    with torch.no_grad():
        opt.main[1].fill_(0.5)
(b @ a).sum().backward()
opt.step()
"""


def test_a_resumed_step_records_the_models_weights_beside_the_optimizers_copies(tmp_path: Path) -> None:
    """With real torch step hooks: the first step of a process records the model's own weights, found
    through the Megatron optimizer that wraps the torch one; where the optimizer's copies came back and the
    model's weights did not, the two fingerprints differ."""
    from .test_driver_isolation import _torch_python

    python = _torch_python()
    if python is None:
        pytest.skip("torch is not installed here: `pip install torch==2.13.0` (CPU) or set VERL_E2E_TORCH_PYTHON")
    site = tmp_path / "site"
    pkg = site / "megatron" / "core" / "optimizer"
    pkg.mkdir(parents=True)
    for d in (site / "megatron", site / "megatron" / "core", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "optimizer.py").write_text(STAND_IN)
    (pkg / "distrib_optimizer.py").write_text(DISTRIBUTED)
    for phase in ("save", "resume"):
        trace = tmp_path / "trace" / phase
        path = f"{ROOT / 'containers' / 'probe'}:{site}"
        env = {**os.environ, "PYTHONPATH": path, "VERL_E2E_TRACE_DIR": str(trace)}
        done = subprocess.run([python, "-c", RESUME, phase], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
    spec = importlib.util.spec_from_file_location("functions", ROOT / "containers" / "functions.py")
    assert spec and spec.loader
    functions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(functions)
    assert functions.merge_updates(tmp_path / "trace", tmp_path / "updates.json") == 2
    steps = {s["phase"]: s for s in json.loads((tmp_path / "updates.json").read_text())["steps"]}
    assert (steps["save"]["zero_before"], steps["save"]["model_zero_before"]) == (1, 1)  # a fresh start: both
    assert (steps["resume"]["zero_before"], steps["resume"]["model_zero_before"]) == (0, 1)  # copies back, model not
    assert steps["resume"]["sum_before"] == pytest.approx(16 + 8.0)
