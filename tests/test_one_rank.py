"""Changes a one-rank layout cannot see (onerank.py): what the rewrite changes is a parallel-layout name,
or the line is a collective over a layout group, so a level whose cells all run one rank in that
dimension sees nothing new (probes-29: a TP-only change of a MoE family's bridge drew that family's Level
4, whose EP = 4 cell runs TP = 1; a pipeline offset dropped from a layer index drew it too)."""

from __future__ import annotations

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import layout, onerank
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.select import select

PROVIDER = "src/megatron/bridge/models/minimax_m2/minimax_m2_provider.py"


@pytest.mark.parametrize(
    ("old", "new", "dims"),
    [
        ("dist.all_reduce(ss, op=dist.ReduceOp.SUM, group=tp_group)", "dist.all_reduce(ss, op=dist.ReduceOp.AVG, group=tp_group)", {"tp"}),
        ("idx = n + get_transformer_layer_offset(config, vp_stage, pp_rank) - 1", "idx = n - 1", {"pp"}),
        ("account_for_embedding_in_pipeline_split: bool = False", "account_for_embedding_in_pipeline_split: bool = True", {"pp"}),
        ('AutoMapping.register_module_type("GatedDeltaNet", "column")', 'AutoMapping.register_module_type("GatedDeltaNet", "replicated")', {"tp"}),
        ("RowParallelMapping(", "ColumnParallelMapping(", {"tp"}),
        ('register_module_type("Router", "replicated")', 'register_module_type("Router", "replicate")', set()),
        ("variance = ss / self.global_dim", "variance = ss / self.local_dim", {"tp"}),
        ("n = self.num_local_experts", "n = self.num_global_experts", {"ep"}),
        ("provider.share_embeddings_and_output_weights = False", "provider.share_embeddings_and_output_weights = True", set()),
        ("num_query_groups=cfg.num_key_value_heads,", "num_query_groups=cfg.num_attention_heads,", set()),
        ("x = y * tp_size", "x = y * tp_size * 2", set()),  # a factor beside the size: shows on one rank
        ("dist.all_reduce(ss, op=SUM)", "dist.all_reduce(ss, op=AVG)", set()),  # the world group: any DP
        ("tp_rank = get_pg_rank(tp_group)", "tp_rank = get_pg_rank(dp_cp_group)", {"tp", "dp"}),
    ],
)  # fmt: skip
def test_what_a_rewritten_line_depends_on(old: str, new: str, dims: set[str]) -> None:
    assert onerank.line_dims(old, new) == dims


@pytest.mark.parametrize(
    ("line", "dims"),
    [
        ("x = scatter_to_sequence_parallel_region(x)", {"sp"}),
        ("torch.distributed.broadcast(p, src=0, group=self.ep_group)", set()),  # a new sync: Level 5 judges it
        ("shard_rank = tp_rank // replicas", set()),  # a statement dropped: a name undefined on one rank too
    ],
)
def test_what_a_line_added_or_removed_alone_depends_on(line: str, dims: set[str]) -> None:
    assert onerank.alone_dims(line) == dims


def _change(old: str, new: str) -> ChangedFile:
    return ChangedFile(
        PROVIDER,
        diff_lines=(f"-        {old}", f"+        {new}"),
        added_at=(77,),
        scopes=("_FullDimRMSNorm.forward",),
        module_level=False,
        functions=("_FullDimRMSNorm.forward",),
    )


def test_a_tp_only_change_of_a_moe_family_keeps_to_the_levels_that_split_tp(matrix: Matrix) -> None:
    tp_only = _change("dist.all_reduce(ss, op=SUM, group=tp_group)", "dist.all_reduce(ss, op=AVG, group=tp_group)")
    same = onerank.same_levels(matrix, tp_only)
    assert 2 not in same and {1, 4, 5} <= same
    levels = select(matrix, [tp_only], ran=[]).levels
    assert 2 in levels and 4 not in levels, levels
    from_diff = ChangedFile(PROVIDER, diff_lines=tp_only.diff_lines, added_at=(77,), scopes=tp_only.scopes)
    assert onerank.same_levels(matrix, from_diff) == set()  # a diff alone: the path rules stand (dev c215)


def test_a_change_that_shows_on_one_rank_keeps_the_familys_level_4(matrix: Matrix) -> None:
    tied = _change("self.tie = False", "self.tie = True")
    assert onerank.same_levels(matrix, tied) == set()
    assert 4 in select(matrix, [tied], ran=[]).levels
    mixed = ChangedFile(
        PROVIDER,
        diff_lines=(
            "-        a = b(group=tp_group)",
            "-        c = 1",
            "+        a = b(group=pp_group)",
            "+        c = 2",
        ),
        added_at=(77, 78),
        functions=("f",),
        module_level=False,
    )
    assert onerank.same_levels(matrix, mixed) == set()  # one line shows on one rank
    moved = ChangedFile(
        PROVIDER,
        diff_lines=("-        out.append(k[i])", "+        out.append(k[i])"),
        added_at=(79,),
        functions=("f",),
        module_level=False,
    )
    assert onerank.same_levels(matrix, moved) == set()  # probes-20: a line moved below its sibling
    data = _change("rank = get_pg_rank(tp_group)", "rank = get_pg_rank(dp_cp_group)")
    assert onerank.same_levels(matrix, data) == set()  # probes-29: every cell has two data-parallel ranks


def test_a_rewritten_stage_flag_selects_the_first_pipeline_cell(matrix: Matrix) -> None:
    """probes-28: `post_process=post_process` made `post_process=pre_process` names nothing a layout word
    catches; at PP = 1 both are the one stage, so the first cell with two stages is the one that sees it."""
    model = "src/megatron/bridge/models/model_provider.py"
    old, new = "            post_process=post_process,", "            post_process=pre_process,"
    cells = layout.cell_layouts(matrix, every_kind=True)
    found = onerank.first_cell(cells, [old], [new])
    assert found is not None and found[0].level == 2 and found[0].layout.pp > 1
    file = ChangedFile(model, diff_lines=(old, new), added_at=(749,), functions=("_create_model",), module_level=False)
    levels = select(matrix, [file], ran=[]).levels
    assert 2 in levels and not {1, 4, 5} & set(levels), levels
    assert onerank.first_cell(cells, ["        tie = False"], ["        tie = True"]) is None  # shows on one rank
    assert onerank.first_cell(cells, ["    if pp_size > 1:"], ["    if pp_size > 2:"]) is None  # retests.py's
