"""Code only the save/resume cells ran (unrun.save_only): a change there selects no level whose cells never
save, whatever layout or model-kind words it holds (probes-16: an expert branch of an adapter's sharded
state dict drew Level 4, whose cells never save). Recorded-cell doubles in the shape `data/runtime.json`
gives: a Level 1 record that ran the save path, Level 0 records that did not."""

from __future__ import annotations

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import unrun
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select

UTILS = "src/megatron/bridge/peft/utils.py"
SAVE = "ParallelLinearAdapter.sharded_state_dict"
STEP = "ParallelLinearAdapter.forward"


def _ran(level1: set[str], level0: set[str]) -> list[Ran]:
    l1 = Ran(1, "save-resume", "qwen", "b", "v", {UTILS: frozenset(level1)})
    l0 = [Ran(0, "lora-ddp", fam, "b", "v", {UTILS: frozenset(level0)}) for fam in ("qwen", "qwen3_moe")]
    return [l1, *l0]


def _change(function: str) -> ChangedFile:
    return ChangedFile(
        UTILS,
        diff_lines=("-        elif self.is_expert:", "+        elif self.is_expert and not use_expert_axis:"),
        scopes=(function,),
        module_level=False,
        functions=(function,),
    )


def test_a_change_only_save_cells_ran_keeps_to_levels_that_save(matrix: Matrix) -> None:
    ran = _ran({SAVE, STEP}, {STEP})
    never_save = unrun.save_only(matrix, _change(SAVE), ran)
    assert 1 not in never_save and {2, 4, 5} <= never_save
    sel = select(matrix, [_change(SAVE)], ran=ran)
    assert 1 in sel.levels and 4 not in sel.levels and 2 not in sel.levels, sel.levels


def test_code_the_training_cells_ran_too_is_not_save_only(matrix: Matrix) -> None:
    ran = _ran({SAVE, STEP}, {STEP})
    assert unrun.save_only(matrix, _change(STEP), ran) == set()
    assert 4 in select(matrix, [_change(STEP)], ran=ran).levels  # the expert words still draw Level 4
    assert unrun.save_only(matrix, _change(SAVE), _ran({SAVE}, {SAVE})) == set()  # a Level 0 cell saved it
    assert unrun.save_only(matrix, _change("ParallelLinearAdapter.new_method"), ran) == set()  # no record


NORM = "src/megatron/bridge/models/minimax_m2/minimax_m2_provider.py"


def _hooks_in(classes: int, elsewhere: bool = False) -> list[Ran]:
    """Level 1 records that ran `sharded_state_dict` of `classes` different adapter classes (and, with
    `elsewhere`, a Level 0 record that ran one of them too)."""
    saved = frozenset(f"Adapter{i}.sharded_state_dict" for i in range(classes)) | {STEP}
    l0 = frozenset({STEP, "Adapter0.sharded_state_dict"} if elsewhere else {STEP})
    return [Ran(1, "save-resume", "qwen", "b", "v", {UTILS: saved}), Ran(0, "lora-ddp", "qwen", "b", "v", {UTILS: l0})]


def _norm_change() -> ChangedFile:
    function = "_FullDimRMSNorm.sharded_state_dict"
    return ChangedFile(
        NORM,
        diff_lines=("-        shard_rank = tp_rank // replicas", "+        shard_rank = tp_rank % replicas"),
        scopes=(function,),
        module_level=False,
        functions=(function,),
    )


def test_an_unrecorded_class_of_a_save_only_protocol_runs_only_where_cells_save(matrix: Matrix) -> None:
    """probes-21: MiniMax-M2's q/k norm's `sharded_state_dict` (no MiniMax cell ever saved) drew Level 2 from
    `tp_rank`; three classes whose method of that name ran only in the saving cell say what it is."""
    never_save = unrun.save_only(matrix, _norm_change(), _hooks_in(3))
    assert 1 not in never_save and {2, 4, 5} <= never_save
    sel = select(matrix, [_norm_change()], ran=_hooks_in(3))
    assert 1 in sel.levels and 2 not in sel.levels, sel.levels


def test_a_protocol_fewer_classes_or_a_training_cell_ran_is_no_save_path(matrix: Matrix) -> None:
    assert unrun.save_only(matrix, _norm_change(), _hooks_in(2)) == set()
    assert unrun.save_only(matrix, _norm_change(), _hooks_in(3, elsewhere=True)) == set()
