"""Two things line records say that function records did not (probe sets 11-31).

A helper called only from the right side of `self.tp_size == 1 or helper(module)` runs only at TP > 1:
every column and row export of `param_mapping.py` short-circuits so before asking `_module_uses_fsdp`,
and a change to that helper is Level 2's, not the Megatron-FSDP cell's (TP = 1). And a change inside a
function no recorded cell called, in a file whose very version recorded cells ran other lines of, keeps
the rules' levels but is said in the plan: "changed lines no recorded cell ran". Built on a real git
repository and recorded-cell doubles (tests/recorded_cells.py) in `data/runtime.json`'s shape."""

from __future__ import annotations

import ast
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.recorded_cells import recorded
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import branches, callsites, kindconds
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
SOURCE = """\
def _uses_fsdp(module):
    return any(isinstance(p, DTensor) for p in module.parameters())


class Column:
    def export(self, w, module):
        if self.tp_size == 1 or _uses_fsdp(module):
            return w
        return gather(w)
"""
EXPORT_RAN = {1, 5, 6, 7, 8}  # a TP = 1 cell: the `if` and its body, never the helper's body (line 2)


def _repo(tmp_path: Path, source: str) -> Path:
    (tmp_path / MAPPING).parent.mkdir(parents=True)
    (tmp_path / MAPPING).write_text(source, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(tmp_path), *ident, "commit", "-qm", "base"], check=True)
    return tmp_path


def _change(source: str = SOURCE) -> ChangedFile:
    return ChangedFile(
        MAPPING,
        diff_lines=(
            "-    return any(isinstance(p, DTensor) for p in module.parameters())",
            "+    return any(isinstance(p, torch.Tensor) for p in module.parameters())",
        ),
        module_level=False,
        functions=("_uses_fsdp",),
        base_lines=(2,),
        old_blob=recorded(MAPPING, source, (), ())[0].blobs[MAPPING],
    )


def _callers(repo: Path, source: str) -> tuple[callsites.Caller, ...] | None:
    return callsites.callers(
        repo,
        "HEAD",
        _change(source),
        read=lambda p: (repo / p).read_bytes() if (repo / p).exists() else None,
        ran=recorded(MAPPING, source, ["Column.export"], EXPORT_RAN, cells=3),
        gates=set(),
        verl=set(),
    )


@pytest.mark.parametrize(
    ("op", "layout_test", "holds"),
    [("or", "self.tp_size == 1", False), ("and", "self.pp_size > 1", True)],
)
def test_the_layout_operand_before_a_call_is_the_calls_condition(op: str, layout_test: str, holds: bool) -> None:
    tree = ast.parse(f"def f(self, m):\n    if {layout_test} {op} helper(m):\n        return m\n")
    (cond,) = branches.short_circuit(tree, 2, lambda n: getattr(n, "id", None) == "helper")
    assert (cond.test, cond.holds, cond.kind) == (layout_test, holds, "operand")


@pytest.mark.parametrize(
    "test",
    [
        "helper(m) or self.tp_size == 1",  # the call decides first: it runs on every layout
        "m is None or helper(m)",  # the operand before it reads no layout
    ],
)
def test_a_call_no_layout_operand_precedes_has_no_such_condition(test: str) -> None:
    tree = ast.parse(f"def f(self, m):\n    if {test}:\n        return m\n")
    assert branches.short_circuit(tree, 2, lambda n: getattr(n, "id", None) == "helper") == ()


def test_a_helper_asked_only_after_a_tp_test_runs_at_level_2(tmp_path: Path, matrix: Matrix) -> None:
    """probes-11 `fsdp-helper-treats-every-weight-as-dtensor`: the plan ran Level 3 for the word DTensor,
    whose cell (TP = 1) never calls the helper."""
    found = _callers(_repo(tmp_path, SOURCE), SOURCE)
    assert found is not None and [(c.line, c.how) for c in found] == [(7, "layout")]
    (branch,) = found[0].branches
    assert [(c.test, c.holds) for c in branch.conditions] == [("self.tp_size == 1", False)]
    change = replace(
        _change(), callers=tuple((c.path, c.line, c.function, c.how) for c in found), caller_branches=found[0].branches
    )
    sel = select(matrix, [change], ran=recorded(MAPPING, SOURCE, ["Column.export"], EXPORT_RAN, cells=3))
    assert 2 in sel.levels and 3 not in sel.levels, sel.levels
    assert "the right side of `self.tp_size == 1 or ...`" in " ".join(r.why for r in sel.reasons[2])


def test_the_same_helper_asked_first_is_left_to_the_records(tmp_path: Path) -> None:
    source = SOURCE.replace("self.tp_size == 1 or _uses_fsdp(module)", "_uses_fsdp(module) or self.tp_size == 1")
    assert _callers(_repo(tmp_path, source), source) is None  # the `if` line ran: the call may have


PEFT = "src/megatron/bridge/peft/utils.py"
PEFT_SOURCE = """\
def pad(x, n):
    return x


def unpad(x, n):
    if n <= 0:
        return x
    return x[:-n]
"""


def _unpad_change(**more: object) -> ChangedFile:
    change = ChangedFile(
        PEFT,
        diff_lines=("-    return x[:-n]", "+    return x[n:]"),
        module_level=False,
        functions=("unpad",),
        base_lines=(8,),
        old_blob=recorded(PEFT, PEFT_SOURCE, (), ())[0].blobs[PEFT],
    )
    return replace(change, **more)  # type: ignore[arg-type]


def _notes(matrix: Matrix, change: ChangedFile, ran: list[object]) -> list[str]:
    sel = select(matrix, [change], ran=ran)  # type: ignore[arg-type]
    return [u for u in sel.unexecuted if "no recorded cell ran" in u]


def test_lines_in_a_function_no_recorded_cell_called_are_said_and_run_nowhere(matrix: Matrix) -> None:
    """probes-26 `moe-adapter-unpad-keeps-leading-padding`: cells imported the file and ran `pad`, none
    called `unpad`. Shared code every recorded family ran around and never called: the PEFT path rule's
    Level 0 would not call it either, so the plan runs nothing for it and names the lines."""
    ran = recorded(PEFT, PEFT_SOURCE, ["pad"], {1, 2, 5})
    sel = select(matrix, [_unpad_change()], ran=ran)
    assert sel.levels == () and select(matrix, [_unpad_change()]).levels  # without records: the rules run
    (note,) = [u for u in sel.unexecuted if u.startswith(f"changed lines no cell executes: {PEFT}:")]
    assert "none of the 1 recorded cells that ran this file called the code around them" in note


@pytest.mark.parametrize(
    ("ran_functions", "ran_lines", "more", "why"),
    [
        (["pad", "unpad"], {1, 2, 5, 6, 7, 8}, {}, "a cell ran the line"),
        (["pad"], None, {}, "no record has this file's lines"),
        (["pad"], {1, 2, 5}, {"module_level": True}, "module code: the import ran it or not, the rules say"),
    ],
)
def test_what_a_cell_ran_or_no_record_covers_is_not_said(
    matrix: Matrix, ran_functions: list[str], ran_lines: set[int] | None, more: dict[str, object], why: str
) -> None:
    ran = recorded(PEFT, PEFT_SOURCE, ran_functions, ran_lines or ())
    if ran_lines is None:
        ran = [replace(r, lines={}) for r in ran]
    assert _notes(matrix, _unpad_change(**more), ran) == [], why


def test_family_code_of_a_family_no_record_covers_is_not_said(matrix: Matrix) -> None:
    """A family without records may call what the recorded families never did: its own cell decides."""
    path = "src/megatron/bridge/models/nemotronh/nemotron_h_provider.py"
    assert matrix.families["nemotronh"].blocked("all") is None
    change = replace(_unpad_change(), path=path)
    ran = recorded(path, PEFT_SOURCE, ["pad"], {1, 2, 5})
    assert _notes(matrix, change, ran) == []
    assert _notes(matrix, change, [replace(r, family="nemotronh") for r in ran]) != []


GATED = """\
def merge(provider, q, z, k):
    out = []
    for i in range(3):
        if getattr(provider, "attention_output_gate", False):
            out += [q, z, k]
        else:
            out += [q, k]
    return out
"""


def test_the_tests_holding_a_line_are_read_as_attributes() -> None:
    tree = ast.parse(GATED)
    assert kindconds.holding_tests(tree, 5) == ["provider.attention_output_gate"]
    assert kindconds.holding_tests(tree, 7) == []  # an else runs where the kind is absent: no code of it
    nested = ast.parse("def f(self, x):\n    if self.mtp:\n        return x if self.vision else -x\n")
    assert kindconds.holding_tests(nested, 3) == ["self.mtp", "self.vision"]


def _gated_change(**more: object) -> ChangedFile:
    change = ChangedFile(
        MAPPING,
        diff_lines=("-            out += [q, z, k]", "+            out += [q, q, k]"),
        module_level=False,
        functions=("merge",),
        base_lines=(5,),
        old_blob=recorded(MAPPING, GATED, (), ())[0].blobs[MAPPING],
    )
    return replace(change, **more)  # type: ignore[arg-type]


def test_a_line_only_gated_attention_runs_goes_to_the_gated_family(matrix: Matrix) -> None:
    """probes-22/24 `gated-qkv-...`: recorded cells (none with gated attention) ran `merge` and never took
    line 5. Without the test's words the plan said no cell runs it; the test names a kind of model, so
    its Level 4 runs on the family of that kind (Qwen3.5-VL) and the untaken branch proves nothing."""
    ran = recorded(MAPPING, GATED, ["merge"], {1, 2, 3, 4, 6, 7, 8}, cells=3)
    assert select(matrix, [_gated_change()], ran=ran).levels == ()  # a setting every recorded cell shares
    sel = select(matrix, [_gated_change(conditions=("provider.attention_output_gate",))], ran=ran)
    assert 4 in sel.levels and "qwen35_vl" in sel.targets[4], (sel.levels, sel.targets)
    assert any("test the changed lines run under" in r.why for r in sel.reasons[4])
