"""Three readings added after the fifteenth blind probe set:
- a method of a class the recorded cells built but never called, which nothing in Bridge reaches as an
  attribute, runs in no cell (callsites.py), like a top-level helper nothing calls;
- a statement that stores a value moved to the other side of a branch header swaps which branch stores
  which value (aspects.permuted): `gate` exported as `up` while git shows both lines unchanged;
- a removed clause of a test takes the Level 5 aspects of the block it decides on, as an added one does
  (conditions.guarded_lines on the base side): dropping `shape[0] != ...` before a `.t()` transposes
  square weights.
Built on real git repositories and recorded-cell doubles in `data/runtime.json`'s shape."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e.config.aspects import permuted
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import callsites, gated, runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.conditions import guarded_lines
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.select import select

from .test_uncalled_helpers import _repo

MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
SOURCE = """\
from abc import ABC
from typing import Generic, TypeVar

W = TypeVar("W")


class Mapping(ABC, Generic[W]):
    def __init__(self, name):
        self.name = name

    @property
    def etp_rank(self):
        return self._etp_rank

    def load(self, w):
        return w
"""
OTHER = "src/megatron/bridge/training/initialize.py"
LOCAL = "def setup(groups):\n    etp_rank = groups.rank()\n    return etp_rank\n"  # another thing of the name


def _ran(functions: set[str], cells: int = 3) -> list[Ran]:
    return [
        Ran(
            0, "lora-ddp", f"fam{i}", "b", "v", {MAPPING: frozenset(functions)}, {}, {MAPPING: blob_id(SOURCE.encode())}
        )
        for i in range(cells)
    ]


def _change(function: str = "Mapping.etp_rank") -> ChangedFile:
    return ChangedFile(
        MAPPING,
        diff_lines=("-        return self._etp_rank", "+        return get_rank(self._etp_group)"),
        module_level=False,
        functions=(function,),
    )


def _callers(repo: Path, ran: list[Ran], change: ChangedFile | None = None) -> tuple[callsites.Caller, ...] | None:
    return callsites.callers(
        repo,
        "HEAD",
        change or _change(),
        read=lambda p: (repo / p).read_bytes() if (repo / p).exists() else None,
        ran=ran,
        gates=set(),
        verl={"Mapping"},  # verl imports the class, never the property
    )


BUILT = {"Mapping.__init__", "Mapping.load"}


def test_a_property_of_a_built_class_nothing_reads_runs_in_no_cell(tmp_path: Path, matrix: Matrix) -> None:
    repo = _repo(tmp_path, {MAPPING: SOURCE, OTHER: LOCAL})
    found = _callers(repo, _ran(BUILT))
    assert found == ()  # the local `etp_rank = ...` elsewhere is no read of the property
    change = replace(_change(), callers=())
    why = gated.uncalled(matrix, change)
    assert why is not None and "calls Mapping.etp_rank" in why
    assert select(matrix, [change]).levels == ()


@pytest.mark.parametrize(
    ("files", "ran", "why"),
    [
        (
            {OTHER: "def f(m):\n    return m.etp_rank + 1\n\n\nF = f(None)\n"},
            _ran(BUILT),
            "read as an attribute in a function no record covers, which module code calls",
        ),
        (
            {OTHER: "def f(m):\n    return getattr(m, 'etp_rank')\n\n\nF = f(None)\n"},
            _ran(BUILT),
            "looked up by name in the same",
        ),
        ({}, _ran(BUILT | {"Mapping.etp_rank"}), "a recorded cell ran it"),
        ({}, _ran(BUILT, cells=2), "too few records built the class"),
    ],
)
def test_a_method_any_cell_may_reach_is_left_planned(
    tmp_path: Path, files: dict[str, str], ran: list[Ran], why: str
) -> None:
    repo = _repo(tmp_path, {MAPPING: SOURCE, **files})
    assert _callers(repo, ran) is None, why


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            SOURCE.replace("class Mapping(ABC, Generic[W]):", "class Mapping(nn.Module):"),
            "torch calls a Module's methods",
        ),
        (SOURCE.replace("    @property\n", "    @cached\n"), "a decorator may register it"),
    ],
)
def test_a_method_a_framework_may_call_is_left_planned(tmp_path: Path, source: str, why: str) -> None:
    repo = _repo(tmp_path, {MAPPING: source})
    assert _callers(repo, _ran(BUILT)) is None, why


def test_a_dunder_method_is_left_planned(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {MAPPING: SOURCE})
    assert _callers(repo, _ran({"Mapping.load"}), _change("Mapping.__init__")) is None


GATE, UP = "                    per_base[base_name] = gate_weight", "                elif self._is_up(base_name):"


def test_a_store_moved_across_a_branch_header_is_a_swap() -> None:
    """As git shows `per_base[...] = gate_weight` moved from under `if is_gate` to under `elif is_up`."""
    any_word = re.compile(r"\w")
    assert permuted(any_word, [GATE, UP], [UP, GATE]) is not None
    body = "                    x = 1"
    assert permuted(any_word, [UP, body], [UP, body]) is None  # a block moved whole keeps its header above
    assert permuted(any_word, ["    logger.info('a')", UP], [UP, "    logger.info('a')"]) is None  # stores nothing


BASE = b"""def hf_to_megatron(hf, target):
    if (
        hf.ndim == 2
        and hf.shape[0] != target.shape[0]
        and hf.shape[1] == target.shape[0]
    ):
        hf = hf.t().contiguous()
    return hf
"""


def test_a_removed_clause_takes_the_weight_layout_of_its_block(matrix: Matrix) -> None:
    assert guarded_lines(BASE, [4]) == ("        hf = hf.t().contiguous()",)
    change = ChangedFile(
        MAPPING,
        diff_lines=("-        and hf.shape[0] != target.shape[0]",),
        scopes=("hf_to_megatron",),
        module_level=False,
        functions=("RowParallelMapping.hf_to_megatron",),
        base_lines=(1148,),
        guarded=guarded_lines(BASE, [4]),
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 5 in plan.levels and any("weight-layout" in r.rule for r in plan.reasons[5]), plan.reasons
    unguarded = select(matrix, [replace(change, guarded=())], surface=surface.shipped(), ran=runtime.shipped())
    assert 5 not in unguarded.levels


FAMILY = "src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py"
HOOKED = """\
class NemotronHBridge(MegatronModelBridge):
    def get_hf_tokenizer_kwargs(self):
        return {"use_fast": True}
"""
IMPORTER = "src/megatron/bridge/models/conversion/auto_bridge.py"
IMPORT_CKPT = """\
class AutoBridge(Generic[M]):
    def import_ckpt(self, p):
        return self.bridge.get_hf_tokenizer_kwargs()


class MIMOBridge(AutoBridge):
    def convert(self, p):
        return self.bridge.get_hf_tokenizer_kwargs()
"""


def _hook_records(names: set[str]) -> list[Ran]:
    """Three cells of other families: they imported the family's bridge (its class body) and ran `names`."""
    return [
        Ran(0, "lora-ddp", f"fam{i}", "b", "v", {FAMILY: frozenset({"NemotronHBridge"}), IMPORTER: frozenset(names)})
        for i in range(3)
    ]


def _hook_callers(repo: Path, ran: list[Ran]) -> tuple[callsites.Caller, ...] | None:
    change = ChangedFile(
        FAMILY, diff_lines=("-x", "+y"), module_level=False, functions=("NemotronHBridge.get_hf_tokenizer_kwargs",)
    )
    read = lambda p: (repo / p).read_bytes() if (repo / p).exists() else None  # noqa: E731
    return callsites.callers(repo, "HEAD", change, read=read, ran=ran, gates=set(), verl={"AutoBridge"})


def test_a_bridge_hook_read_only_by_checkpoint_conversion_runs_in_no_cell(tmp_path: Path) -> None:
    """probes-29: Bridge reads a family bridge's `get_hf_tokenizer_kwargs` only in checkpoint import and in
    the MIMO bridge's conversion (a subclass of AutoBridge, Bridge's own class, whose methods nothing calls
    by protocol), which nothing verl reaches calls: a change to Nemotron-H's hook runs in no cell."""
    repo = _repo(tmp_path, {FAMILY: HOOKED, IMPORTER: IMPORT_CKPT})
    found = _hook_callers(repo, _hook_records({"AutoBridge.from_hf_pretrained"}))
    assert found is not None
    assert [(c.function, c.how) for c in found] == [
        ("AutoBridge.import_ckpt", "unreached"),
        ("MIMOBridge.convert", "unreached"),
    ]
    assert _hook_callers(repo, _hook_records({"AutoBridge.from_hf_pretrained", "AutoBridge.import_ckpt"})) is None
