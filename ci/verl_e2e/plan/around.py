"""Aspects of the code around a change, beside those of its own lines (select.py reads both): the block a
changed test decides on, the statements a changed value flows into, and the tests a changed line runs
under. A line inside `if getattr(provider, "attention_output_gate", False):` runs only on models with
gated attention, whatever words the line itself holds. Pure."""

from __future__ import annotations

from dataclasses import replace

from verl_e2e.config.aspects import Hit, find
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile

CONVERSION = "src/megatron/bridge/models/conversion/"


def hits(matrix: Matrix, file: ChangedFile, seen: set[str]) -> list[Hit]:
    """The aspects the code around the change fires that its own lines (`seen`) did not."""
    found = _switched(matrix, file, seen)
    found += _flowed(matrix, file, seen | {h.aspect.name for h in found})
    return found + _conditioned(matrix, file, seen | {h.aspect.name for h in found})


def _switched(matrix: Matrix, file: ChangedFile, seen: set[str]) -> list[Hit]:
    """Level 5 and parallel-layout aspects of the blocks a changed `if`/`while` test decides on
    (conditions.py): what the block computes, or the layout flag it sets (`disable_sequence_parallel_comm
    = True` under a turned-around `base_linear_is_parallel` test matters only under sequence parallel)."""
    if not file.guarded:
        return []
    # a weight-layout line under a changed test is as good as rewritten: it now runs for other tensors; an
    # option set there (`provider_kwargs["rotary_base"] = ...`) is as good as set: it is now set or not
    wanted = {5, 2}
    numerics = [a for a in matrix.aspects if a.levels & wanted and a.lines != "permuted" and a.name not in seen]
    hits = find(numerics, file.path, file.guarded, (), file.guarded)
    return [replace(h, where="block its changed condition decides on") for h in hits]


CONVERSION = "src/megatron/bridge/models/conversion/"


def _flowed(matrix: Matrix, file: ChangedFile, seen: set[str]) -> list[Hit]:
    """Expert-parallel aspects of the statements a changed value flows into (flows.py): a value that
    decides whether experts are renumbered across EP ranks matters only where there are several."""
    if not file.flows or not file.path.startswith(CONVERSION):
        return []  # adapter and model code name experts in values that do not decide the EP layout
    layout = [a for a in matrix.aspects if a.name == "expert-parallel" and a.name not in seen]
    hits = find(layout, file.path, file.flows, ())
    return [replace(h, where="statements its changed value flows into") for h in hits]


def _conditioned(matrix: Matrix, file: ChangedFile, seen: set[str]) -> list[Hit]:
    """Architecture aspects of the tests a changed line runs under (`ChangedFile.conditions`): a line
    that runs only for multi-latent attention or gated attention is that kind's code, for the family of
    that kind (defaults.kind_families), though it names neither (`if mla_rope_params:` under an MLA test)."""
    if not file.conditions:
        return []
    kinds = [a for a in matrix.aspects if a.architecture is not None and a.name not in seen]
    found = find(kinds, file.path, file.conditions, ())
    return [replace(h, where="test the changed lines run under") for h in found]


def of_a_kind(matrix: Matrix, file: ChangedFile) -> bool:
    """Whether a changed line runs only for a kind of model an architecture aspect names: the recorded
    cells (none of that kind, or not all) never taking it proves nothing (unrun.untaken_branch)."""
    return bool(_conditioned(matrix, file, set()))
