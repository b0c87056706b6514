"""A helper Bridge calls only where no cell goes (callsites.py, gated.uncalled): from a branch of a
function recorded cells ran without ever taking it (an init method verl never picks), or from a
function verl calls only under a setting no level sets. Such a change runs in no cell, and the plan
says so instead of running Level 0. Built on a real git repository and recorded-cell doubles in the
shape `data/runtime.json` gives (functions, lines, blob ids)."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import callsites, gated, kindconds, unrun
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.select import select

UTILS = "src/megatron/bridge/peft/utils.py"
SOURCE = """\
import torch


def init_kaiming(val):
    def init_(t):
        return torch.nn.init.kaiming_uniform_(t, a=val)

    return init_


class Adapter:
    def _get_init_fn(self, method):
        if method == "xavier":
            fn = torch.nn.init.xavier_normal_
        elif method == "kaiming":
            fn = init_kaiming(5)
        else:
            fn = None
        return fn

    def split(self, w):
        if self.tp_size > 1:
            return init_kaiming(1)
        return w
"""
TAKEN = {1, 4, 8, 11, 12, 13, 14, 17, 18, 20, 21, 23}  # what a cell with method="xavier" at TP=1 ran


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(tmp_path), *ident, "commit", "-qm", "base"], check=True)
    return tmp_path


def _ran(source: str, taken: set[int], cells: int = 3) -> list[Ran]:
    functions = frozenset({"Adapter._get_init_fn", "Adapter.split"})
    return [
        Ran(
            0,
            "lora-ddp",
            f"fam{i}",
            "b",
            "v",
            {UTILS: functions},
            {UTILS: frozenset(taken)},
            {UTILS: blob_id(source.encode())},
        )
        for i in range(cells)
    ]


def _change() -> ChangedFile:
    return ChangedFile(
        UTILS,
        diff_lines=("-        return x", "+        return y"),
        module_level=False,
        functions=("init_kaiming.init_",),
    )


def _callers(
    repo: Path, source: str, ran: list[Ran], change: ChangedFile | None = None
) -> tuple[callsites.Caller, ...] | None:
    return callsites.callers(
        repo,
        "HEAD",
        change or _change(),
        read=lambda p: (repo / p).read_bytes() if (repo / p).exists() else None,
        ran=ran,
        gates=set(),
        verl=set(),
    )


def test_a_helper_named_only_on_branches_no_cell_took_runs_in_no_cell(tmp_path: Path, matrix: Matrix) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    repo = _repo(tmp_path, {UTILS: source})
    found = _callers(repo, source, _ran(source, TAKEN - {23}))
    assert found is not None and [(c.line, c.how) for c in found] == [(16, "untaken")]
    change = replace(_change(), callers=tuple((c.path, c.line, c.function, c.how) for c in found))
    why = gated.uncalled(matrix, change)
    assert why is not None and "Adapter._get_init_fn (utils.py:16" in why
    assert select(matrix, [change]).levels == ()


@pytest.mark.parametrize(
    ("taken", "cells", "why"),
    [
        (TAKEN | {16}, 3, "a cell took the branch"),
        (TAKEN, 2, "too few cells recorded their lines"),
    ],
)
def test_a_branch_a_cell_took_or_too_few_records_leave_the_change_planned(
    tmp_path: Path, taken: set[int], cells: int, why: str
) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    repo = _repo(tmp_path, {UTILS: source})
    assert _callers(repo, source, _ran(source, taken, cells)) is None, why


def test_a_helper_called_only_under_a_layout_condition_runs_where_that_holds(tmp_path: Path, matrix: Matrix) -> None:
    """`split` calls the helper only when tp_size > 1, and the other call is on a branch no cell took:
    the change runs in Level 2's TP cell and in no Level 0 cell (probes-16: a helper Bridge calls only
    from the PP > 1 branch of the tied-embedding broadcast)."""
    repo = _repo(tmp_path, {UTILS: SOURCE})
    found = _callers(repo, SOURCE, _ran(SOURCE, TAKEN))
    assert found is not None and [(c.line, c.how) for c in found] == [(16, "untaken"), (23, "layout")]
    (branch,) = found[1].branches
    assert [c.test for c in branch.conditions] == ["self.tp_size > 1"]
    change = replace(
        _change(),
        callers=tuple((c.path, c.line, c.function, c.how) for c in found),
        caller_branches=found[1].branches,
    )
    assert gated.uncalled(matrix, change) is None  # a call that runs somewhere: not "no cell runs it"
    sel = select(matrix, [change], ran=_ran(SOURCE, TAKEN))
    assert sel.levels == (0, 2), sel.levels
    why = " ".join(r.why for r in sel.reasons[2])
    assert "Bridge's call of the changed code under `if self.tp_size > 1`" in why and "at TP > 1" in why


@pytest.mark.parametrize(
    "other",
    [
        "from megatron.bridge.peft.utils import init_kaiming\n\nINIT = init_kaiming(2)\n",  # module code
        "from megatron.bridge.peft.utils import init_kaiming as k\n",  # an alias hides its uses
        # looked up by name, in a function module code calls (no cell ran it: its callers decide)
        "def pick(m):\n    return getattr(m, 'init_kaiming')\n\n\nPICKED = pick(None)\n",
    ],
)
def test_any_other_mention_leaves_the_change_planned(tmp_path: Path, other: str) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    repo = _repo(tmp_path, {UTILS: source, "src/megatron/bridge/other.py": other})
    assert _callers(repo, source, _ran(source, TAKEN - {23})) is None


def test_an_import_and_an_isinstance_check_call_nothing(tmp_path: Path) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    other = (
        "from megatron.bridge.peft.utils import init_kaiming\n\n\ndef f(x):\n    return isinstance(x, init_kaiming)\n"
    )
    repo = _repo(tmp_path, {UTILS: source, "src/megatron/bridge/other.py": other})
    found = _callers(repo, source, _ran(source, TAKEN - {23}))
    assert found is not None and [c.line for c in found] == [16]


def test_a_decorated_definition_may_be_called_by_what_registers_it(tmp_path: Path) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    decorated = source.replace("def init_kaiming(val):", "@INITS.register('kaiming')\ndef init_kaiming(val):")
    shifted = {n + 1 if n >= 4 else n for n in TAKEN - {23}}  # the same cells, one line down
    assert _callers(_repo(tmp_path / "a", {UTILS: source}), source, _ran(source, TAKEN - {23})) is not None
    repo = _repo(tmp_path / "b", {UTILS: decorated})
    assert _callers(repo, decorated, _ran(decorated, shifted)) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # a branch on the kind of model: the MTP family's Level 4 cell takes what no recorded cell did
        ('        elif method == "kaiming":\n', '        elif method == "kaiming" and self.config.mtp_num_layers:\n'),
        # an early exit before it, on the same
        (
            '        if method == "xavier":\n',
            '        if not self.config.vision_config:\n            return None\n        if method == "xavier":\n',
        ),
    ],
)
def test_a_mention_under_a_model_kind_condition_is_left_to_level_4(tmp_path: Path, before: str, after: str) -> None:
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    changed = source.replace(before, after)
    shift = changed.count("\n") - source.count("\n")
    taken = {n + shift if n > 14 else n for n in TAKEN - {23}}
    repo = _repo(tmp_path, {UTILS: changed})
    assert _callers(repo, changed, _ran(changed, taken)) is None


BLOB = "0aa0496a39" + "0" * 30


def _untaken(base_lines: tuple[int, ...], cells: int, **more: object) -> ChangedFile:
    change = ChangedFile(
        UTILS,
        diff_lines=("-            fn = nn.Dropout(p)", "+            fn = nn.Dropout(p, inplace=True)"),
        scopes=("Adapter.__init__",),
        module_level=False,
        functions=("Adapter.__init__",),
        added_at=base_lines,
        base_lines=base_lines,
        old_blob=BLOB[:10],
    )
    return replace(change, **more)  # type: ignore[arg-type]


def _cells(taken: set[int], cells: int, path: str = UTILS) -> list[Ran]:
    functions = frozenset({"Adapter.__init__"})
    return [
        Ran(0, "lora-ddp", f"fam{i}", "b", "v", {path: functions}, {path: frozenset(taken)}, {path: BLOB})
        for i in range(cells)
    ]


def test_a_changed_line_cells_ran_around_and_never_took_runs_in_no_cell(matrix: Matrix) -> None:
    """`if dropout > 0.0:` where every cell trains LoRA without dropout: Level 0 runs `__init__`, not it."""
    change = _untaken((86,), 3)
    assert unrun.untaken_branch(change, _cells({84, 85, 88}, 3)) is not None
    plan = select(matrix, [change], ran=_cells({84, 85, 88}, 3))
    assert plan.levels == () and any(f"{UTILS}:86" in n for n in plan.unexecuted)


@pytest.mark.parametrize(
    ("taken", "cells", "more"),
    [
        ({84, 85, 86}, 3, {}),  # a cell took it
        ({84, 85}, 2, {}),  # too few cells with line records
        ({84, 85}, 3, {"unrecorded_conditions": True}),  # under `if cfg.mtp_num_layers:`: Level 4's MTP cell
        ({84, 85}, 3, {"path": "src/megatron/bridge/models/qwen/qwen2_bridge.py"}),  # a family's own code
    ],
)
def test_a_line_some_cell_may_take_is_planned(taken: set[int], cells: int, more: dict[str, object]) -> None:
    change = _untaken((86,), cells, **more)
    assert unrun.untaken_branch(change, _cells(taken, cells, change.path)) is None


def test_a_line_under_a_type_check_of_what_a_caller_hands_over_is_no_setting_every_cell_shares() -> None:
    """`if isinstance(key, tuple):` in a checkpoint key filter: four recorded cells never met a tuple key,
    but another checkpoint format or library version may; the line is planned as the function is."""
    import ast

    source = (
        "def adapter_key_filter(self, key):\n"
        "    if isinstance(key, tuple):\n"
        "        return key[1].requires_grad\n"
        "    return key in self.params_to_save\n"
        "def wrap(self, m):\n"
        "    if isinstance(m, (torch.nn.Linear, Adapter)):\n"
        "        return True\n"
        "def forward(self, x):\n"
        "    if self.dropout > 0.0:\n"
        "        return False\n"
    )
    tree = ast.parse(source)
    assert kindconds.unrecorded_condition(tree, 3, True)
    assert not kindconds.unrecorded_condition(tree, 6, True)  # a module's class: the LoRA targets verl sets
    assert not kindconds.unrecorded_condition(tree, 9, True)  # a setting every cell shares (verl's LoRA has none)
    assert not kindconds.unrecorded_condition(tree, 3)  # a call site under it: the helper stays uncalled


def test_a_readme_naming_the_helper_calls_nothing(tmp_path: Path) -> None:
    """probes-28: Bridge's models/README.md shows `bridge.save_hf_pretrained(...)` in an example; words in
    documentation run in no cell, so they leave the calls in the code to decide."""
    source = SOURCE.replace("            return init_kaiming(1)\n", "            return None\n")
    readme = "src/megatron/bridge/README.md"
    repo = _repo(tmp_path, {UTILS: source, readme: "Call `init_kaiming(5)` for a Kaiming init.\n"})
    found = _callers(repo, source, _ran(source, TAKEN - {23}))
    assert found is not None and [(c.line, c.how) for c in found] == [(16, "untaken")]
    (tmp_path / "src/megatron/bridge/recipe.yaml").write_text("init: init_kaiming\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "y"], check=True
    )
    assert _callers(repo, source, _ran(source, TAKEN - {23})) is None  # a config file may name it to call it


PROVIDER = "src/megatron/bridge/models/mamba/mamba_provider.py"
OLD_PROVIDER = """\
from dataclasses import dataclass


@dataclass
class OldProvider(Base):
    spec: "OldProvider | None" = None

    def __post_init__(self):
        self.spec = None
"""


def _post_init_change() -> ChangedFile:
    return ChangedFile(
        PROVIDER,
        diff_lines=("        self.spec = None", "        self.spec = 1"),
        functions=("OldProvider.__post_init__",),
        module_level=False,
    )


def _provider_callers(tmp_path: Path, extra: dict[str, str], ran_methods: frozenset[str]) -> object:
    package = "src/megatron/bridge/models/mamba/__init__.py"
    files = {PROVIDER: OLD_PROVIDER, package: 'from .mamba_provider import OldProvider\n\n__all__ = ["OldProvider"]\n'}
    repo = _repo(tmp_path, files | extra)
    ran = [
        Ran(0, "lora-ddp", f"f{i}", "b", "v", {PROVIDER: frozenset({"OldProvider", *ran_methods})}) for i in range(3)
    ]
    return _callers(repo, OLD_PROVIDER, ran, _post_init_change())


def test_a_class_nothing_builds_runs_its_set_up_in_no_cell(tmp_path: Path, matrix: Matrix) -> None:
    """probes-29: the deprecated MambaModelProvider is imported and exported, and its own fields name it,
    but nothing builds it; a change to its `__post_init__` runs in no cell."""
    found = _provider_callers(tmp_path, {}, frozenset())
    assert found == ()
    change = replace(_post_init_change(), callers=())
    assert "nothing in Bridge's sources builds OldProvider," in (gated.uncalled(matrix, change) or "")


@pytest.mark.parametrize(
    ("extra", "ran_methods"),
    [
        ({"src/megatron/bridge/models/x.py": "from .mamba.mamba_provider import OldProvider\n\nDEFAULT = OldProvider()\n"}, frozenset()),
        ({}, frozenset({"OldProvider.__post_init__"})),  # a recorded cell built it
    ],
)  # fmt: skip
def test_a_class_something_may_build_is_left_to_the_rules(
    tmp_path: Path, extra: dict[str, str], ran_methods: frozenset[str]
) -> None:
    assert _provider_callers(tmp_path, extra, ran_methods) is None


def test_a_conditional_expression_counts_only_around_its_own_line() -> None:
    """The walk for conditional expressions enters only the nodes that hold the line: one on the line (or
    spanning it) is a condition of it, one elsewhere in the same class or function is not."""
    import ast

    tree = ast.parse(
        "class Model:\n"
        "    def forward(self, x):\n"
        "        y = self.mtp(x) if self.config.mtp_num_layers else x\n"
        "        z = (\n"
        "            self.vision(y)\n"
        "            if self.vision is not None\n"
        "            else y\n"
        "        )\n"
        "        return z + 1\n"
        "    def other(self, x):\n"
        "        return x\n"
    )
    assert kindconds.unrecorded_condition(tree, 3)  # on the line itself
    assert kindconds.unrecorded_condition(tree, 5)  # inside a conditional expression spanning lines 4-8
    assert not kindconds.unrecorded_condition(tree, 9)  # after both: under neither
    assert not kindconds.unrecorded_condition(tree, 11)  # another method of the same class
