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
