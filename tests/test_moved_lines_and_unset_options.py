"""Words on lines that change nothing do not pick levels: a line the change only moves (removed and added
again as it was) and an option declared without a value or handed on unchanged. A moved line that opens a
block, an option set to a value, and a value handed on that the change does not declare None still count."""

from __future__ import annotations

from verl_e2e.config.aspects import declared_none, find
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

PROVIDER = "src/megatron/bridge/models/gpt_provider.py"
MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"


def _names(
    matrix: Matrix, path: str, removed: tuple[str, ...], added: tuple[str, ...], **kw: frozenset[str]
) -> set[str]:
    hits = find(matrix.aspects, path, (*removed, *added), (), added, removed=removed, **kw)
    return {h.aspect.name for h in hits}


def test_a_moved_line_is_no_change_but_a_moved_block_opener_is(matrix: Matrix) -> None:
    line = "        spec = config.transformer_layer_spec(config, pp_rank=pp_rank)"
    assert "parallel-layout" not in _names(matrix, PROVIDER, (line,), ("        x = 1", line))
    assert "parallel-layout" in _names(matrix, PROVIDER, (), (line,))  # added, not moved
    opener = "        if self.tp_size == 1:"
    assert "parallel-layout" in _names(matrix, MAPPING, (opener, "            a()"), ("            b()", opener))
    indented = "            spec = config.transformer_layer_spec(config, pp_rank=pp_rank)"  # into a block
    assert "parallel-layout" in _names(matrix, PROVIDER, (line,), (indented,))


def test_an_option_declared_none_sets_nothing_and_a_value_does(matrix: Matrix) -> None:
    assert "numerics-defaults" not in _names(matrix, PROVIDER, (), ("    logit_dtype: torch.dtype | None = None",))
    assert "numerics-defaults" in _names(matrix, PROVIDER, (), ("    logit_dtype: torch.dtype = torch.float32",))
    flipped = ("    gradient_accumulation_fusion: bool = True",), ("    gradient_accumulation_fusion: bool = False",)
    assert "numerics-defaults" in _names(matrix, PROVIDER, *flipped)
    conditional = ("    grad_reduce_in_fp32=None if cfg.fp8 else True,",)
    assert "numerics-defaults" in _names(matrix, PROVIDER, (), conditional)


def test_an_option_handed_on_counts_unless_the_change_declares_it_none(matrix: Matrix) -> None:
    handed = (
        "            logit_dtype=language_config.logit_dtype,",
        '            "logit_dtype": provider.logit_dtype,',
    )
    assert "numerics-defaults" in _names(matrix, PROVIDER, (), handed)
    declared = declared_none(["    logit_dtype: torch.dtype | None = None", "    seed: int = 1234"])
    assert declared == {"logit_dtype"}
    assert "numerics-defaults" not in _names(matrix, PROVIDER, (), handed, declared=declared)


def _added(path: str, *lines: str) -> ChangedFile:
    return ChangedFile(
        path,
        diff_lines=lines,
        scopes=("GPTModelProvider",),
        module_level=False,
        functions=("GPTModelProvider.provide",),
        added_at=tuple(range(200, 200 + len(lines))),
        base_lines=(200,),
    )


def test_a_new_field_declared_in_one_file_and_handed_on_in_another_gets_no_learning_level(matrix: Matrix) -> None:
    config = "src/megatron/bridge/models/transformer_config.py"
    declare = _added(config, "    logit_dtype: torch.dtype | None = None")
    hand_on = _added(PROVIDER, "            logit_dtype=self.logit_dtype,")
    plan = select(matrix, [declare, hand_on], surface=surface.shipped(), ran=runtime.shipped())
    assert 5 not in plan.levels, plan.levels
    valued = _added(config, "    logit_dtype: torch.dtype | None = torch.float32")
    plan = select(matrix, [valued, hand_on], surface=surface.shipped(), ran=runtime.shipped())
    assert 5 in plan.levels, plan.levels
