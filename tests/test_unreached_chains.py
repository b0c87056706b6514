"""A change whose only callers sit in functions no recorded cell ran is reached exactly where those
functions' own callers are (callsites._Reader._through): a registry look-up called only from ModelOpt's
export plan, itself called only from an export verl never makes, runs in no cell, and the plan names
the lines instead of running Level 0. So does a model bridge's hook (`megatron_to_hf_config`) that
AutoBridge calls only from a constructor verl never uses, whatever other bridges' overrides call
through `super()`. A chain that reaches a function verl names, a line a cell took, a layout condition
or more than MAX_DEPTH functions keeps the change planned. Built on real git repositories and
recorded-cell doubles in `data/runtime.json`'s shape (functions, lines, blob ids)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import callsites, gated
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.select import select

from .test_uncalled_helpers import _repo

BRIDGE = "src/megatron/bridge/models/conversion/"
REGISTRY = BRIDGE + "mapping_registry.py"
PLAN = BRIDGE + "modelopt_utils.py"
AUTO = BRIDGE + "auto_bridge.py"
REGISTRY_SRC = """\
class Registry:
    def __init__(self, mappings):
        self.mappings = mappings

    def megatron_lookup(self, name):
        return self.mappings.get(name)

    def hf_lookup(self, name):
        for m in self.mappings.values():
            if m.hf == name:
                return m
        return None
"""
PLAN_SRC = """\
def build_plan(bridge, names):
    registry = None

    def export(name):
        nonlocal registry
        registry = registry or bridge.registry()
        return registry.hf_lookup(name)

    return [export(n) for n in names]
"""
AUTO_SRC = """\
from typing import Generic, TypeVar

M = TypeVar("M")


class AutoBridge(Generic[M]):
    def load(self, model):
        if model is None:
            return None
        return model

    def export_modelopt(self, names):
        from megatron.bridge.models.conversion.modelopt_utils import build_plan

        return build_plan(self, names)
"""
REGISTRY_RAN = {"Registry.__init__", "Registry.megatron_lookup"}


def _cells(files: dict[str, tuple[str, set[str], set[int]]], cells: int = 3) -> list[Ran]:
    """Recorded cells that ran `functions` and `lines` of each file at its given source."""
    return [
        Ran(
            0,
            "lora-ddp",
            f"fam{i}",
            "b",
            "v",
            {p: frozenset(fs) for p, (_, fs, _) in files.items()},
            {p: frozenset(ls) for p, (_, _, ls) in files.items()},
            {p: blob_id(src.encode()) for p, (src, _, _) in files.items()},
        )
        for i in range(cells)
    ]


def _lookup_change() -> ChangedFile:
    return ChangedFile(
        REGISTRY,
        diff_lines=("            if m.hf == name:", "            if m.hf in name:"),
        added_at=(10,),
        module_level=False,
        functions=("Registry.hf_lookup",),
    )


def _callers(repo: Path, change: ChangedFile, ran: list[Ran], verl: set[str] | None = None) -> object:
    return callsites.callers(
        repo,
        "HEAD",
        change,
        read=lambda p: (repo / p).read_bytes() if (repo / p).exists() else None,
        ran=ran,
        gates=set(),
        verl=verl if verl is not None else {"AutoBridge"},
    )


def _lookup_cells(auto: str = AUTO_SRC, auto_ran: set[str] | None = None, taken: set[int] | None = None) -> list[Ran]:
    return _cells(
        {
            REGISTRY: (REGISTRY_SRC, REGISTRY_RAN, {1, 2, 3, 5, 6}),
            AUTO: (auto, auto_ran or {"AutoBridge.load"}, taken or {1, 3, 6, 7, 8, 10}),
        }
    )


def test_a_lookup_called_only_through_an_export_nothing_makes_runs_in_no_cell(tmp_path: Path, matrix: Matrix) -> None:
    repo = _repo(tmp_path, {REGISTRY: REGISTRY_SRC, PLAN: PLAN_SRC, AUTO: AUTO_SRC})
    found = _callers(repo, _lookup_change(), _lookup_cells())
    assert isinstance(found, tuple) and [(c.path, c.line, c.function, c.how) for c in found] == [
        (PLAN, 7, "build_plan.export", "unreached")
    ]
    change = replace(_lookup_change(), callers=tuple((c.path, c.line, c.function, c.how) for c in found))
    why = gated.uncalled(matrix, change)
    assert why is not None and "build_plan.export (modelopt_utils.py:7: code no recorded cell ran" in why
    assert select(matrix, [change]).levels == ()


def test_a_chain_to_a_function_verl_names_may_run(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {REGISTRY: REGISTRY_SRC, PLAN: PLAN_SRC, AUTO: AUTO_SRC})
    assert _callers(repo, _lookup_change(), _lookup_cells(), verl={"AutoBridge", "export_modelopt"}) is None


@pytest.mark.parametrize(
    ("call", "taken", "how"),
    [
        ("        return self.export_modelopt([model])\n", {1, 3, 6, 7, 8, 10}, None),  # a line the cells took
        (
            "        if self.pp_size > 1:\n            return self.export_modelopt([model])\n",
            {1, 3, 6, 7, 8, 10, 11},
            "layout",
        ),
    ],
)
def test_a_chain_into_a_function_cells_ran_is_decided_by_that_line(
    tmp_path: Path, call: str, taken: set[int], how: str | None
) -> None:
    """`load` ran in every cell: a call it took may run the change; a call under PP > 1 runs it where
    that holds (the layout rules), which the chain hands back with its branch."""
    auto = AUTO_SRC.replace("        return model\n", call + "        return model\n", 1)
    repo = _repo(tmp_path, {REGISTRY: REGISTRY_SRC, PLAN: PLAN_SRC, AUTO: auto})
    found = _callers(repo, _lookup_change(), _lookup_cells(auto, taken=taken))
    if how is None:
        assert found is None
    else:
        assert isinstance(found, tuple) and [(c.function, c.how) for c in found] == [("AutoBridge.load", how)]
        assert [c.test for b in found[0].branches for c in b.conditions] == ["self.pp_size > 1"]


def test_a_chain_longer_than_the_depth_may_run(tmp_path: Path) -> None:
    """f1 <- f2 <- ... : no cell ran any of them; up to MAX_DEPTH links the chain is followed."""

    def chain(links: int) -> str:
        out = "def f0(r):\n    return r.hf_lookup('x')\n"
        for i in range(1, links):
            out += f"\n\ndef f{i}(r):\n    return f{i - 1}(r)\n"
        return out

    cells = _lookup_cells()
    short = _repo(tmp_path / "a", {REGISTRY: REGISTRY_SRC, PLAN: chain(callsites.MAX_DEPTH)})
    found = _callers(short, _lookup_change(), cells)
    assert isinstance(found, tuple) and [c.how for c in found] == ["unreached"]
    long = _repo(tmp_path / "b", {REGISTRY: REGISTRY_SRC, PLAN: chain(callsites.MAX_DEPTH + 1)})
    assert _callers(long, _lookup_change(), cells) is None


MODEL_BRIDGE = BRIDGE + "model_bridge.py"
BASE_SRC = """\
class MegatronModelBridge:
    @classmethod
    def to_hf_config(cls, provider):
        return {"hidden": provider.hidden}

    def provider_bridge(self, config):
        return config
"""
FAMILY = "src/megatron/bridge/models/fam/fam_bridge.py"
FAMILY_SRC = """\
from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge


@MegatronModelBridge.register_bridge(source="FamForCausalLM")
class FamBridge(MegatronModelBridge):
    @classmethod
    def to_hf_config(cls, provider):
        cfg = super().to_hf_config(provider)
        cfg["layers"] = provider.layers
        return cfg

    def provider_bridge(self, config):
        return config
"""
OTHER_FAMILY = "src/megatron/bridge/models/other/other_bridge.py"
OTHER_SRC = FAMILY_SRC.replace("Fam", "Other")
AUTO_HOOK_SRC = """\
class AutoBridge:
    @classmethod
    def from_auto(cls, bridge, provider):
        return bridge.to_hf_config(provider)

    def to_provider(self, config):
        return self.bridge.provider_bridge(config)
"""


def _hook_change() -> ChangedFile:
    return ChangedFile(
        FAMILY,
        diff_lines=('        cfg["layers"] = provider.layers', '        cfg["layers"] = provider.mtp_layers'),
        added_at=(9,),
        module_level=False,
        functions=("FamBridge.to_hf_config",),
    )


@pytest.mark.parametrize(("base", "planned"), [("MegatronModelBridge", False), ("nn.Module", True)])
def test_a_bridge_hook_only_an_unused_constructor_calls_runs_in_no_cell(
    tmp_path: Path, matrix: Matrix, base: str, planned: bool
) -> None:
    """One family cell built FamBridge (its provider_bridge ran) and never its `to_hf_config`; the
    only call is AutoBridge.from_auto, which no cell ran and verl does not name; the other bridge's
    override reaches the base through `super()`, which is the same hook. A class on another base
    (torch calls a Module's methods by protocol) keeps the change planned."""
    family = FAMILY_SRC.replace("class FamBridge(MegatronModelBridge):", f"class FamBridge({base}):")
    files = {MODEL_BRIDGE: BASE_SRC, FAMILY: family, OTHER_FAMILY: OTHER_SRC, AUTO: AUTO_HOOK_SRC}
    repo = _repo(tmp_path, files)
    ran = _cells(
        {
            FAMILY: (family, {"FamBridge", "FamBridge.provider_bridge"}, {1, 4, 5, 6, 12, 13}),
            AUTO: (AUTO_HOOK_SRC, {"AutoBridge", "AutoBridge.to_provider"}, {1, 2, 6, 7}),
        },
        cells=1,
    )
    found = _callers(repo, _hook_change(), ran)
    if planned:
        assert found is None
        return
    assert isinstance(found, tuple) and [(c.path, c.function, c.how) for c in found] == [
        (AUTO, "AutoBridge.from_auto", "unreached")
    ]
    change = replace(_hook_change(), callers=tuple((c.path, c.line, c.function, c.how) for c in found))
    assert select(matrix, [change]).levels == ()


def test_the_bridge_bases_own_hook_is_judged_as_its_overrides_are(tmp_path: Path, matrix: Matrix) -> None:
    """The base's `to_hf_config` (every cell built MegatronModelBridge, none ran the hook) is reached only
    through AutoBridge.from_auto, as the families' overrides are (probes-18: the bf16 dtype it writes)."""
    files = {MODEL_BRIDGE: BASE_SRC, FAMILY: FAMILY_SRC, OTHER_FAMILY: OTHER_SRC, AUTO: AUTO_HOOK_SRC}
    repo = _repo(tmp_path, files)
    ran = _cells(
        {
            MODEL_BRIDGE: (BASE_SRC, {"MegatronModelBridge", "MegatronModelBridge.provider_bridge"}, {1, 2, 6, 7}),
            AUTO: (AUTO_HOOK_SRC, {"AutoBridge", "AutoBridge.to_provider"}, {1, 2, 6, 7}),
        }
    )
    change = ChangedFile(
        MODEL_BRIDGE,
        diff_lines=('        return {"hidden": provider.hidden}', '        return {"hidden": provider.ffn}'),
        added_at=(4,),
        module_level=False,
        functions=("MegatronModelBridge.to_hf_config",),
    )
    found = _callers(repo, change, ran)
    assert isinstance(found, tuple) and [(c.function, c.how) for c in found] == [("AutoBridge.from_auto", "unreached")]
    listed = replace(change, callers=tuple((c.path, c.line, c.function, c.how) for c in found))
    assert select(matrix, [listed]).levels == ()
