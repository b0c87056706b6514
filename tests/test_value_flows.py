"""Where a changed value goes (flows.py): the statements after a changed assignment that read it. A
value that decides whether experts are renumbered across expert-parallel ranks runs in every cell and
matters only at EP > 1, though the changed line has no parallel word. And RoPE options are numerics:
a shared provider default changes what every family computes, silently (Level 5, not Level 4)."""

from __future__ import annotations

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime, surface
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.flows import flow_lines
from verl_e2e.plan.select import select

SOURCE = b"""def local_name_to_global(models, name):
    note = "unrelated"
    is_grouped = ".experts.linear_fc" in name
    is_local = ".experts.local_experts." in name
    is_expert = (is_grouped or is_local) and ".adapter." not in name
    ep_group = get_ep_group(models) if is_expert else None
    print(note)
    if ep_group is not None and ep_group.size() > 1:
        name = renumber(name, ep_group)
    return name
"""


def test_the_statements_a_changed_value_reaches_are_read_in_order() -> None:
    assert flow_lines(SOURCE, [3]) == (
        '    is_expert = (is_grouped or is_local) and ".adapter." not in name',
        "    ep_group = get_ep_group(models) if is_expert else None",
        "    if ep_group is not None and ep_group.size() > 1:",
        "        name = renumber(name, ep_group)",
        "    return name",  # `name` took the value on the line above
    )
    assert flow_lines(SOURCE, [2]) == ("    print(note)",)  # read once, on a line of no layout
    assert flow_lines(SOURCE, [10]) == ()  # not an assignment
    assert flow_lines(b"def broken(:\n", [1]) == ()


BRIDGE = "src/megatron/bridge/models/conversion/model_bridge.py"


def _change(flows: tuple[str, ...]) -> ChangedFile:
    return ChangedFile(
        BRIDGE,
        diff_lines=(
            '-    is_grouped_expert_param = ".experts.linear_fc" in param_name',
            '+    is_grouped_expert_param = ".experts.linear_fc1" in param_name',
        ),
        scopes=("_megatron_local_name_to_global",),
        module_level=False,
        functions=("_megatron_local_name_to_global",),
        added_at=(318,),
        base_lines=(318,),
        flows=flows,
    )


def test_a_value_that_decides_the_expert_parallel_renumbering_runs_level_2(matrix: Matrix) -> None:
    flows = ("    ep_group = _get_ep_group(models) if is_expert_param else None",)
    plan = select(matrix, [_change(flows)], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 in plan.levels and any("flows into" in r.why for r in plan.reasons[2]), plan.reasons
    alone = select(matrix, [_change(())], surface=surface.shipped(), ran=runtime.shipped())
    assert 2 not in alone.levels, alone.reasons


def test_a_shared_rope_default_is_numerics_not_a_custom_layer(matrix: Matrix) -> None:
    change = ChangedFile(
        "src/megatron/bridge/models/gpt_provider.py",
        diff_lines=("-    rotary_percent: float = 1.0", "+    rotary_percent: float = 0.5"),
        scopes=("GPTModelProvider",),
        module_level=True,
        functions=(),
        added_at=(144,),
        base_lines=(144,),
    )
    plan = select(matrix, [change], surface=surface.shipped(), ran=runtime.shipped())
    assert 5 in plan.levels and 4 not in plan.levels, plan.reasons
