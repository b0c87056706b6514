"""Changes whose effect a one-rank layout cannot see: what each changed line rewrites is a parallel-layout
name (a TP group, a pipeline rank, a split kind, the sequence-parallel flag), or the line is a collective
over a layout group.

At TP = PP = CP = 1 a collective over the TP group returns its input whatever its op (`SUM` made `AVG`),
the pipeline offset of a layer is 0 (`layer_number + offset - 1` made `layer_number - 1`), a column and a
row split hand over the same whole tensor, and `account_for_embedding_in_pipeline_split` splits nothing.
A level none of whose PR cells sets one of the dimensions the change names runs the line and sees no
difference: a MoE family's Level 4 (EP = 4, TP = 1) adds nothing to a TP-only change of its bridge, nor
does Level 1 or Level 5 (one GPU). Such levels are "same" for collector.Narrowed: only a record that they
ran the code, or a layout branch, keeps them. Rewritten `if`/`while`/`return` tests are left to
retests.py's cell-by-cell decision. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from difflib import SequenceMatcher

from verl_e2e.config.aspects import code_lines
from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import layout, retests
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.layout import CellLayout, Layout

_TOKEN = re.compile(r"""[A-Za-z_]\w*|"[^"]*"|'[^']*'|\d+(?:\.\d+)?|\S""")
_TEST = re.compile(r"^\s*(?:if|elif|while|return)\b")
# names whose whole effect is a split across ranks, by the dimension that splits (a part of the name)
_PARTS: tuple[tuple[str, str], ...] = (
    ("expert_tensor_parallel", "etp"),
    ("expert_model_parallel", "ep"),
    ("tensor_model_parallel", "tp"),
    ("sequence_parallel", "sp"),
    ("pipeline_model_parallel", "pp"),
    ("_pipeline_split", "pp"),
    ("vp_stage", "pp"),
    ("virtual_pipeline", "pp"),
    ("context_parallel", "cp"),
    ("gather_output", "tp"),
    ("input_is_parallel", "tp"),
    ("parallel_output", "tp"),
    ("column_parallel", "tp"),
    ("row_parallel", "tp"),
    ("ColumnParallel", "tp"),
    ("RowParallel", "tp"),
    ("_detect_parallelism_type", "tp"),
    ("_MODULE_TYPE_REGISTRY", "tp"),
    ("set_input_tensor", "pp"),
)
_SPLIT_KINDS = {'"column"', "'column'", '"row"', "'row'", '"replicated"', "'replicated'"}
_EXTENT = re.compile(r"^(num_)?(local|global)_(dim|size|shape|numel|hidden|heads?|rows|cols|offset|experts?)\w*$")
_COLLECTIVE = re.compile(r"\b(all_reduce|all_gather\w*|reduce_scatter\w*|broadcast|all_to_all\w*|_reduce)\s*\(")
_DATA = re.compile(r"(^|_)(expt_|intra_|inter_)?dp(_|$)|data_parallel|data_modulo")
_REGION = re.compile(r"^_?(scatter|gather|reduce|copy|all_to_all)\w*_(to|from)_\w+_region\w*$")
_ASSIGNED = re.compile(r"^\s*(?:self\.|\w+\.)?(\w+)\s*(?::[^=]+)?=[^=]|^\s*(\w+)\s*=[^=]")


def token_dims(token: str) -> set[str]:
    """The parallel dimensions a token names (`tp_group` -> tp, `pp_rank` -> pp, `"column"` -> tp); "dp"
    for data parallelism, which every cell has (two GPUs at TP = 1)."""
    if token in _SPLIT_KINDS:
        return {"tp"}
    if not token[:1].isalpha() and token[:1] != "_":
        return set()
    if _DATA.search(token):
        return {"dp"}
    found = layout.dimension(token)
    if found is not None and found[0] not in ("moe", "verl"):
        return {"pp" if found[0] == "vpp" else found[0]}
    group = layout.group_dimension(token)
    if group is not None:
        return {group}
    parts = {dim for part, dim in _PARTS if part in token}
    if not parts and _EXTENT.match(token):
        parts = {"ep" if "expert" in token else "tp"}
    return parts


def _dims(tokens: Sequence[str]) -> set[str]:
    return {d for t in tokens for d in token_dims(t)}


def line_dims(old: str, new: str) -> set[str]:
    """The dimensions a rewritten line's effect depends on, or an empty set where it may show on one rank:
    what the rewrite changes names them, the line is a collective over a layout group, or it sets a
    value of a layout-named field (`account_for_embedding_in_pipeline_split = True`)."""
    changed = set(_TOKEN.findall(old)) ^ set(_TOKEN.findall(new))
    if any(t[:1] in "\"'" and t not in _SPLIT_KINDS for t in changed):
        return set()  # a changed string may be any key or name (`"replicate"` is no split kind: import fails)
    dims = _dims(sorted(changed))
    if dims:
        return dims
    for line in (old, new):
        if group := _collective(line):
            return group
        m = _ASSIGNED.match(line)
        target = m and (m.group(1) or m.group(2))
        if target and (named := token_dims(target)):
            return named
    return set()


def alone_dims(line: str) -> set[str]:
    """The dimensions a line added or removed on its own depends on: only one of Megatron's region copies
    (`scatter_to_sequence_parallel_region(x)`), which hands a one-rank input back unchanged. Any other
    statement added or dropped may show anywhere: a new broadcast of adapter weights across the expert
    group is a new synchronisation the learning-signal level is to judge (dev c020), not a layout detail."""
    return {d for t in _TOKEN.findall(line) if _REGION.match(t) for d in token_dims(t)}


def _collective(line: str) -> set[str]:
    if not _COLLECTIVE.search(line):
        return set()
    return {g for g in (layout.group_dimension(t) for t in _TOKEN.findall(line)) if g is not None}


def _pairs(removed: Sequence[str], added: Sequence[str]) -> Iterator[tuple[str | None, str | None]]:
    """Removed and added lines paired where the diff rewrote one into the other, the rest alone."""
    matcher = SequenceMatcher(None, [x.strip() for x in removed], [x.strip() for x in added], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        olds, news = list(removed[i1:i2]), list(added[j1:j2])
        for k in range(max(len(olds), len(news))):
            yield (olds[k] if k < len(olds) else None), (news[k] if k < len(news) else None)


def _active(lay: Layout, dims: set[str]) -> bool:
    """Whether a layout sets one of the dimensions above one rank (sequence parallel goes with TP > 1)."""
    sizes = {"tp": lay.tp, "sp": lay.tp, "pp": lay.pp, "cp": lay.cp, "ep": lay.ep, "etp": lay.etp}
    return "dp" in dims or any(sizes.get(d, 1) > 1 for d in dims) or ("fsdp" in dims and lay.fsdp)


def _layout_only(removed: Sequence[str], added: Sequence[str]) -> tuple[set[str], list[str], list[str]] | None:
    """(the dimensions every rewritten line depends on, the removed and added test lines), or None where a
    line may show on one rank, or where nothing was rewritten (lines moved: `k` and `v` appended the other
    way round)."""
    dims: set[str] = set()
    old_tests: list[str] = []
    new_tests: list[str] = []
    for old, new in _pairs(code_lines(removed), code_lines(added)):
        if any(_TEST.match(x) for x in (old, new) if x is not None):
            old_tests.extend([old] if old is not None else [])
            new_tests.extend([new] if new is not None else [])
            continue
        found = line_dims(old, new) if old is not None and new is not None else alone_dims(old or new or "")
        if not found:
            return None
        dims |= found
    return (dims, old_tests, new_tests) if dims or old_tests or new_tests else None


def _sides(file: ChangedFile) -> tuple[list[str], list[str]]:
    cut = len(file.diff_lines or ()) - len(file.added_at)
    return list((file.diff_lines or ())[:cut]), list((file.diff_lines or ())[cut:])


def same_levels(matrix: Matrix, file: ChangedFile) -> set[int]:
    """The levels above 0 none of whose PR cells sets a dimension every changed code line depends on
    (and that decide every rewritten layout test as before); empty where a line may show on one rank.
    Only with both trees (`plan --repo`): from a diff alone the path rules stand (the labelled PRs in
    ../shared/bench want Level 1 for any change to the export code, an EP-size read included)."""
    if not file.path.startswith("src/") or not file.diff_lines or file.functions is None:
        return set()
    found = _layout_only(*_sides(file))
    if found is None:
        return set()
    dims, old_tests, new_tests = found
    cells: list[CellLayout] = [c for c in layout.cell_layouts(matrix, every_kind=True) if not c.scheduled]
    active = {c.level for c in cells if _active(c.layout, dims)}
    if old_tests or new_tests:
        paired, deciding = retests.deciding_levels(cells, old_tests, new_tests)
        if paired < len(old_tests) + len(new_tests):
            return set()  # a test that is no rewritten layout test: it may decide otherwise on one rank
        active |= deciding
    return {c.level for c in cells if c.level > 0} - active


def first_cell(
    cells: Sequence[CellLayout], removed: Sequence[str], added: Sequence[str]
) -> tuple[CellLayout, str, str] | None:
    """(the first PR cell that sets a dimension the rewrite depends on, a removed line, an added line) for
    a change of values alone, every line a layout-only rewrite (`post_process=post_process` made
    `post_process=pre_process`: the same stage at PP = 1, the last stage built as the first at PP = 2);
    None where a line may show on one rank or a test was rewritten (retests.py decides those)."""
    found = _layout_only(removed, added)
    if found is None or found[1] or found[2]:
        return None
    cell = next((c for c in cells if not c.scheduled and _active(c.layout, found[0])), None)
    if cell is None or cell.level == 0:
        return None
    was, now = (code_lines(removed) or ["(none)"])[0].strip(), (code_lines(added) or ["(none)"])[0].strip()
    return cell, was, now
