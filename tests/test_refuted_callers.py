"""A Bridge call of the change under a condition that reads like a layout one (`if task.requires_expert_splits:`
names experts, so layout.py takes it for MoE-only) which recorded MoE cells ran around at every weight sync
and never took (refuted.refute_callers, probes-16): the call is untaken, the change runs in no cell, and
the plan names its lines instead of running Level 4. A cell whose layout cannot hold the condition (a
dense model) refutes nothing. Built on a real git repository and recorded-cell doubles in
`data/runtime.json`'s shape (functions, lines, blob ids)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import callsites
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.refuted import refute_callers
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.select import select

from .recorded_cells import recorded
from .test_uncalled_helpers import _repo

PEFT_BRIDGE = "src/megatron/bridge/models/conversion/peft_bridge.py"
SOURCE = """\
class PeftBridge:
    def materialize(self, task):
        if task.requires_expert_splits:
            return self._grouped(task)
        return task.weight

    def _grouped(self, task):
        return task.weight.split(2)
"""
RAN = {"PeftBridge.materialize"}
TAKEN = {1, 2, 3, 5}  # line 4, the call, never ran


def _cells(family: str) -> list[Ran]:
    return recorded(PEFT_BRIDGE, SOURCE, RAN, TAKEN, family=family, cells=3)


def _change() -> ChangedFile:
    return ChangedFile(
        PEFT_BRIDGE,
        diff_lines=("        return task.weight.split(2)", "        return task.weight.split(3)"),
        added_at=(8,),
        module_level=False,
        functions=("PeftBridge._grouped",),
    )


def _with_callers(tmp_path: Path, ran: list[Ran]) -> ChangedFile:
    repo = _repo(tmp_path, {PEFT_BRIDGE: SOURCE})
    read = lambda p: (repo / p).read_bytes() if (repo / p).exists() else None  # noqa: E731
    found = callsites.callers(repo, "HEAD", _change(), read=read, ran=ran, gates=set(), verl=set())
    assert isinstance(found, tuple) and [(c.line, c.how) for c in found] == [(4, "layout")], found
    return replace(
        _change(),
        callers=tuple((c.path, c.line, c.function, c.how) for c in found),
        caller_branches=tuple(b for c in found for b in c.branches),
        caller_skipped=tuple((c.path, c.line, c.skipped) for c in found if c.skipped),
    )


def test_a_moe_cell_that_ran_around_the_call_refutes_its_moe_reading(tmp_path: Path, matrix: Matrix) -> None:
    ran = _cells("qwen3_moe")
    change = _with_callers(tmp_path, ran)
    assert change.caller_skipped and change.caller_skipped[0][2][0] == "L0-lora-ddp-qwen3_moe"
    assert refute_callers(matrix, change, ran).callers == ((PEFT_BRIDGE, 4, "PeftBridge.materialize", "untaken"),)
    plan = select(matrix, [change], ran=ran)
    assert plan.levels == (), plan.reasons
    assert any(f"{PEFT_BRIDGE}:8" in line for line in plan.unexecuted), plan.unexecuted


def test_dense_cells_that_skipped_the_call_leave_it_to_the_moe_levels(tmp_path: Path, matrix: Matrix) -> None:
    ran = _cells("qwen")
    change = _with_callers(tmp_path, ran)
    assert refute_callers(matrix, change, ran) == change
    assert 4 in select(matrix, [change], ran=ran).levels


CONVERT = """\
def convert(weights):
    if all(w.ndim != 3 for w in weights):
        return {w.name: w for w in weights}
    names = order([w.name for w in weights])
    return dict(zip(names, weights))


def order(names):
    return sorted(names)
"""


def test_a_call_after_a_guard_on_a_tensors_rank_may_run(tmp_path: Path) -> None:
    """probes-20, -22, -24: the HF adapter's packed-expert path runs after `if all(w.ndim != 3 ...): return`;
    the saving cells' per-expert adapters always returned there, a packed-expert family's would not."""
    ran = [
        r
        for fam in ("qwen", "llama", "qwen3_moe")
        for r in recorded(PEFT_BRIDGE, CONVERT, {"convert"}, {1, 2, 3}, family=fam, level=1, variant="save-resume")
    ]
    repo = _repo(tmp_path, {PEFT_BRIDGE: CONVERT})
    read = lambda p: (repo / p).read_bytes() if (repo / p).exists() else None  # noqa: E731
    change = ChangedFile(
        PEFT_BRIDGE,
        diff_lines=("    return sorted(names)", "    return list(names)"),
        added_at=(9,),
        module_level=False,
        functions=("order",),
    )
    assert callsites.callers(repo, "HEAD", change, read=read, ran=ran, gates=set(), verl=set()) is None
    plain = CONVERT.replace("w.ndim != 3", "w.name != 'x'")
    repo2 = _repo(tmp_path / "plain", {PEFT_BRIDGE: plain})
    ran2 = [replace(r, blobs={PEFT_BRIDGE: blob_id(plain.encode())}) for r in ran]
    read2 = lambda p: (repo2 / p).read_bytes() if (repo2 / p).exists() else None  # noqa: E731
    found = callsites.callers(repo2, "HEAD", change, read=read2, ran=ran2, gates=set(), verl=set())
    assert isinstance(found, tuple) and [c.how for c in found] == ["untaken"], found
