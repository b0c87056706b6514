"""Two silent changes a word cannot name: two operands swapped on a line of conversion or adapter code
that cells ran (the `swapped-operands` aspect, `lines: permuted`), and an `if` test rewritten around code
that decides what trains (conditions.py: the guarded block's Level 5 aspects apply). Both pass a one-step
Level 0 (LoRA B is zero at the first weight sync; a frozen adapter still steps) and need Level 5."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from verl_e2e.config.aspects import permuted
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.conditions import guarded_lines
from verl_e2e.plan.select import select

PEFT_BRIDGE = "src/megatron/bridge/models/conversion/peft_bridge.py"
PEFT_BASE = "src/megatron/bridge/peft/base.py"
ANY = re.compile(r"\w")


def _inside(path: str, function: str, lines: tuple[str, ...], guarded: tuple[str, ...] = ()) -> ChangedFile:
    """A rewrite inside `function`, as `plan --repo` reads it (exact scopes from both ASTs)."""
    return ChangedFile(
        path,
        diff_lines=lines,
        scopes=(function.rsplit(".", 1)[-1],),
        module_level=False,
        functions=(function,),
        added_at=(120,),
        base_lines=(120,),
        guarded=guarded,
    )


@pytest.mark.parametrize(
    ("old", "new", "fires"),
    [
        ('    return {"k_proj": k_out, "v_proj": v_out}', '    return {"k_proj": v_out, "v_proj": k_out}', True),
        ("    a, b = torch.chunk(w, 2)", "    b, a = torch.chunk(w, 2)", True),
        # a choice: which branch runs is for the layout and record rules; a fallback order for the config's
        ("    cls = Row if parallel else Column", "    cls = Column if parallel else Row", False),
        (
            "    act = getattr(c, 'a', None) or getattr(c, 'b')",
            "    act = getattr(c, 'b', None) or getattr(c, 'a')",
            False,
        ),
        ("    return {'k': k_out}", "    return {'k': x_out}", False),  # a changed token, not a swap
        ("    return {'k': k_out}", "    return {'k': v_out}", True),  # K's slot given V's same-shaped tensor
        # a call's arguments reordered: the callee's contract, loud where the two differ in kind
        (
            "    self._bridge.load_weights(model, pre_trained)",
            "    self._bridge.load_weights(pre_trained, model)",
            False,
        ),
        ("    x = f(a, b)", "    x = f(a, b)  # same", False),
    ],
)
def test_a_swap_is_a_line_holding_the_same_tokens_in_another_order(old: str, new: str, fires: bool) -> None:
    assert (permuted(ANY, [old], [new]) is not None) is fires


def test_a_statement_that_builds_a_sequence_moved_is_a_swap() -> None:
    k, v = "        biases.append(k[i : i + 1, :])", "        biases.append(v[i : i + 1, :])"
    assert permuted(ANY, [k], [k]) is not None  # as git shows `append(k)` moved below `append(v)`
    assert permuted(ANY, [k], [v]) is None
    assert permuted(ANY, ["    x = 1"], ["    x = 1"]) is None  # a moved assignment reorders no sequence


@pytest.mark.parametrize(
    ("line", "swap"),
    [
        ('            resolved_hf_param["k"],', True),  # QKVMapping.resolve: k put after v, one line moved
        ("            hf['up_proj'],", True),
        ("            pre_trained,", False),  # a plain argument: the callee's contract, as above
        ("            model=model,", False),  # a keyword argument goes where its name says
        ('            resolved_hf_param["k"]', False),  # the last argument, no comma: nothing is known to follow
    ],
)
def test_a_keyed_item_moved_among_a_calls_argument_lines_is_a_swap(line: str, swap: bool) -> None:
    assert (permuted(ANY, [line], [line]) is not None) is swap


@pytest.mark.parametrize(
    ("function", "level5"),
    [
        ("MegatronPeftBridge._split_qkv_linear_out_weight", True),  # every vLLM sync exports through it
        ("MegatronPeftBridge._split_brand_new_adapter", False),  # no recorded cell ran it
    ],
)
def test_swapped_adapter_exports_get_the_learning_signal_level_in_code_cells_ran(
    matrix: Matrix, function: str, level5: bool
) -> None:
    change = _inside(
        PEFT_BRIDGE,
        function,
        (
            '        return {"q_proj": q_out, "k_proj": k_out, "v_proj": v_out}',
            '        return {"q_proj": q_out, "k_proj": v_out, "v_proj": k_out}',
        ),
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert (5 in plan.levels) is level5, plan.reasons
    if level5:
        assert "aspect:swapped-operands" in {r.rule for r in plan.reasons[5]}


QWEN2_BRIDGE = "src/megatron/bridge/models/qwen/qwen2_bridge.py"


@pytest.mark.parametrize(
    ("lines", "level5"),
    [
        (  # probes-21: K's and V's sources traded in the default family's mapping table
            (
                '                    k="model.layers.*.self_attn.k_proj.weight",',
                '                    v="model.layers.*.self_attn.v_proj.weight",',
                '                    k="model.layers.*.self_attn.v_proj.weight",',
                '                    v="model.layers.*.self_attn.k_proj.weight",',
            ),
            True,
        ),
        (  # one source renamed: a load that fails by name, which Level 0 shows
            (
                '                    k="model.layers.*.self_attn.k_proj.weight",',
                '                    k="model.layers.*.self_attn.key_proj.weight",',
            ),
            False,
        ),
    ],
)
def test_a_family_bridges_mapping_table_swap_gets_the_learning_signal_level(
    matrix: Matrix, lines: tuple[str, ...], level5: bool
) -> None:
    added = tuple(range(87, 87 + len(lines) // 2))
    change = replace(_inside(QWEN2_BRIDGE, "Qwen2Bridge.mapping_registry", lines), added_at=added, base_lines=added)
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in plan.levels and (5 in plan.levels) is level5, plan.reasons


SOURCE = b"""class PEFT:
    def __call__(self, model, training=True):
        model = self.transform(model)
        if training:
            self.freeze_model(model, training=training)
        if training and False:
            x = 1
        else:
            y = 2
        return model
"""


def test_the_lines_a_rewritten_test_decides_on_are_its_body_and_else() -> None:
    assert guarded_lines(SOURCE, [4]) == ("            self.freeze_model(model, training=training)",)
    assert guarded_lines(SOURCE, [6]) == ("            x = 1", "            y = 2")
    assert guarded_lines(SOURCE, [3]) == ()  # not a test
    assert guarded_lines(b"def broken(:\n", [1]) == ()


@pytest.mark.parametrize(
    ("guarded", "level5"),
    [
        (("            self.freeze_model(model, training=training)",), True),
        (("            logger.info('peft applied')",), False),
    ],
)
def test_a_flipped_test_around_the_freeze_gets_level_5(matrix: Matrix, guarded: tuple[str, ...], level5: bool) -> None:
    change = _inside(PEFT_BASE, "PEFT.__call__", ("        if not training:", "        if training:"), guarded)
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in plan.levels, plan.reasons
    assert (5 in plan.levels) is level5, plan.reasons
    if level5:
        assert any("block its changed condition decides on" in r.why for r in plan.reasons[5]), plan.reasons[5]


WALK = "src/megatron/bridge/peft/walk_utils.py"


@pytest.mark.parametrize(
    ("old", "new", "level5"),
    [
        # the walker's leaf-only test decides whether the LoRA wrapper (which owns no parameters) is
        # visited, so whether verl's reference pass turns the adapters off (probes-17)
        (
            "    if not leaf_only or list(module.parameters(recurse=False)):",
            "    if leaf_only or list(module.parameters(recurse=False)):",
            True,
        ),
        ("    prefix = kwargs.get('name', '')", "    prefix = kwargs.get('name') or ''", False),
    ],
)
def test_the_walkers_leaf_only_test_switches_what_the_reference_sees(
    matrix: Matrix, old: str, new: str, level5: bool
) -> None:
    plan = select(matrix, [_inside(WALK, "_map_module", (old, new))], surface=surface.shipped(), ran=runtime.shipped())
    assert 0 in plan.levels, plan.reasons
    assert (5 in plan.levels) is level5, plan.reasons
