"""Which cell's parallel layout runs a branch: the layout each level's variant sets, and the values a
branch condition can take under it.

Level 0 runs a function at TP=PP=CP=EP=1 with DDP on a dense model; a line under `if self.tp_size > 1`
inside it never runs there. Each variant's env in matrix.yaml (COMMON_TP, COMMON_PP, COMMON_VPP,
COMMON_CP, COMMON_EP, COMMON_ETP, USE_MEGATRON_FSDP) is read into a `Layout`, and a condition is
evaluated over the values each layout name can take on some rank (a TP rank is 0 or 1 at TP=2; the
last pipeline stage is true or false at PP=2). A condition is a possible path when it can be true;
anything the layout does not fix (a config flag) can be either. Sequence parallel is on exactly at
TP > 1, finalisation included: verl's engine config turns it off at TP=1 before it hands the provider
its overrides (verl 1dda039, `workers/config/engine.py`, "set sequence parallel to false as TP size is 1").
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from verl_e2e.config.matrix import Matrix, Variant

Values = frozenset[Any] | None  # the values an expression can take; None: anything
BOTH: frozenset[Any] = frozenset({True, False})
_SIZES = {
    "tp": ("tensor_model_parallel_size", "tp_size", "tensor_parallel_size", "tp_world_size",
           "get_tensor_model_parallel_world_size"),
    "pp": ("pipeline_model_parallel_size", "pp_size", "pp_world_size", "get_pipeline_model_parallel_world_size"),
    "vpp": ("virtual_pipeline_model_parallel_size", "vpp_size", "vp_size",
            "get_virtual_pipeline_model_parallel_world_size"),
    "cp": ("context_parallel_size", "cp_size", "cp_world_size", "get_context_parallel_world_size"),
    "ep": ("expert_model_parallel_size", "ep_size", "ep_world_size", "get_expert_model_parallel_world_size"),
    "etp": ("expert_tensor_parallel_size", "etp_size", "get_expert_tensor_parallel_world_size"),
}  # fmt: skip
_RANKS = {
    "tp": ("tp_rank", "get_tensor_model_parallel_rank"),
    "pp": ("pp_rank", "get_pipeline_model_parallel_rank"),
    "cp": ("cp_rank", "get_context_parallel_rank"),
    "ep": ("ep_rank", "get_expert_model_parallel_rank"),
}
# process groups by name (`pp_group`, `get_tensor_model_parallel_group()`), or as a pg collection's member
_GROUPS = {
    "tp": ("tp_group", "tensor_model_parallel_group"),
    "pp": ("pp_group", "pipeline_model_parallel_group"),
    "cp": ("cp_group", "context_parallel_group"),
    "ep": ("ep_group", "expert_model_parallel_group"),
    "etp": ("etp_group", "expt_tp_group", "expert_tensor_parallel_group"),
}
_MEMBERS = {"tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "expt_tp": "etp"}
_STAGES = ("is_pipeline_first_stage", "is_pipeline_last_stage", "is_pp_first_stage", "is_pp_last_stage",
           "is_first_pp_stage", "is_last_pp_stage", "pre_process", "post_process")  # fmt: skip
# DTensor: on verl's path a parameter is a DTensor only when Megatron-FSDP shards it (DDP keeps plain tensors)
_FSDP = ("use_megatron_fsdp", "use_custom_fsdp", "megatron_fsdp", "FullyShardedDataParallel", "DTensor")
WORDS = {"tp": "at TP > 1", "pp": "at PP > 1", "vpp": "with virtual pipeline stages", "cp": "at CP > 1",
         "sp": "under sequence parallel", "ep": "at EP > 1", "etp": "at expert TP > 1",
         "fsdp": "under Megatron-FSDP", "moe": "on a MoE model", "verl": "with a setting verl never uses"}  # fmt: skip
CONFIGURING = ("finalize", "__post_init__")  # run after verl's provider overrides (overrides.py)
# What verl's Megatron engine sets on every provider it builds, whatever the cell (verl 1dda039,
# workers/engine/megatron/transformer_impl.py `provider_overrides`; recompute stays off in its engine
# config and no cell turns it on): a branch that needs another value runs in no cell.
VERL_SETS: dict[str, Any] = {
    "moe_token_dispatcher_type": "alltoall",
    "moe_router_load_balancing_type": "none",
    "batch_p2p_comm": False,
    "variable_seq_lengths": True,
    "recompute_method": None,
    "recompute_granularity": None,
}
MAX_COMBINATIONS = 64
OWNED = "module"  # the value of a conversion task's `megatron_module` on the stage that owns it


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int = 1
    fsdp: bool = False
    moe: bool = False  # the cell's model has experts


def differs(a: Layout, b: Layout) -> set[str]:
    """The dimensions two layouts set differently (sequence parallel goes with TP > 1)."""
    out = {d for d in ("tp", "pp", "vpp", "cp", "ep", "etp", "fsdp", "moe") if getattr(a, d) != getattr(b, d)}
    return out | ({"sp"} if (a.tp > 1) != (b.tp > 1) else set())


def _ident(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _ident(node.func)
    return None


def _group(node: ast.AST) -> str | None:
    """The dimension a process group belongs to (`pp_group`, `self._pg_collection.cp`, `_get_pp_group(m)`)."""
    name = _ident(node)
    if name is None:
        return None
    if isinstance(node, ast.Attribute) and name in _MEMBERS and "pg" in (_ident(node.value) or ""):
        return _MEMBERS[name]
    return group_dimension(name)


def group_dimension(name: str) -> str | None:
    """The dimension a process group's name belongs to (`tp_group`, `get_pipeline_model_parallel_group`)."""
    bare = name.removeprefix("_").removeprefix("get_").removesuffix("_from_module")
    return next((dim for dim, names in _GROUPS.items() if bare in names), None)


def dimension(name: str) -> tuple[str, str] | None:
    """(dimension, what) an identifier reads: what is size, rank, stage, flag or moe; ("verl", name) for a
    setting verl fixes."""
    if name in VERL_SETS:
        return "verl", name
    for dim, names in _SIZES.items():
        if name in names:
            return dim, "size"
    for dim, names in _RANKS.items():
        if name in names:
            return dim, "rank"
    if name in _STAGES:
        return "pp", "stage"
    if name == "megatron_module":
        return "pp", "module"  # a conversion task's module, None on the pipeline stages that do not own it
    if name == "sequence_parallel":
        return "sp", "flag"
    if name.removeprefix("disable_").removesuffix("_comm") == "sequence_parallel" and name.startswith("disable_"):
        return "sp", "off"  # LoRA's `disable_sequence_parallel_comm = not config.sequence_parallel`
    if name in _FSDP or ("fsdp" in name.lower() and not name.lower().endswith(("_size", "_group"))):
        return "fsdp", "flag"
    if name == "num_moe_experts" or name.startswith("moe_") or "expert" in name.lower():
        return "moe", "moe"  # `is_expert`, `is_expert_linear(name)`, `num_local_experts`: no expert on a dense model
    return None


def _lookup(dim: str, what: str, layout: Layout) -> Values:
    if dim == "verl":
        return frozenset({VERL_SETS[what]})
    if dim == "sp":
        return frozenset({layout.tp > 1 if what == "flag" else layout.tp <= 1})
    if dim == "fsdp":
        return frozenset({layout.fsdp})
    if dim == "moe":
        return None if layout.moe else frozenset({None})
    size = getattr(layout, dim)
    if what == "size":
        return frozenset({size})
    if what == "rank":
        return frozenset(range(size or 1))
    if what == "module":  # one stage owns every module at PP = 1 (a task without one is no cell's weight)
        return frozenset({OWNED}) if layout.pp == 1 else frozenset({OWNED, None})
    return frozenset({True}) if layout.pp == 1 else BOTH  # a pipeline stage flag


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not, ast.Add: operator.add,
    ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}  # fmt: skip


class _Eval:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def values(self, node: ast.AST) -> Values:
        if isinstance(node, ast.Constant):
            return frozenset({node.value})
        if isinstance(node, (ast.Name, ast.Attribute)):
            found = dimension(_ident(node) or "")
            return None if found is None else _lookup(*found, self.layout)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return frozenset({not v for v in self.truth(node.operand)})
        if isinstance(node, ast.BoolOp):
            return self.truth(node)
        if isinstance(node, ast.IfExp):
            a, b = self.values(node.body), self.values(node.orelse)
            return None if a is None or b is None else a | b
        if isinstance(node, ast.Compare):
            return self._combine([node.left, *node.comparators], [type(o) for o in node.ops], chained=True)
        if isinstance(node, ast.BinOp):
            return self._combine([node.left, node.right], [type(node.op)], chained=False)
        return None

    def _call(self, node: ast.Call) -> Values:
        name = _ident(node.func) or ""
        found = dimension(name)
        if found is not None:
            return _lookup(*found, self.layout)
        if name == "getattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
            found = dimension(str(node.args[1].value))
            return None if found is None else _lookup(*found, self.layout)
        if name == "isinstance" and len(node.args) == 2 and dimension(_ident(node.args[1]) or "") == ("fsdp", "flag"):
            return frozenset({self.layout.fsdp})
        if name in ("bool", "int") and len(node.args) == 1:
            inner = self.values(node.args[0])
            return None if inner is None else frozenset(bool(v) if name == "bool" else v for v in inner)
        group = _group(node.func.value) if name == "size" and isinstance(node.func, ast.Attribute) else None
        if group is None and name.endswith("size") and node.args:
            group = _group(node.args[0])
        return frozenset({getattr(self.layout, group)}) if group is not None else None

    def _combine(self, operands: list[ast.expr], ops: list[type], chained: bool) -> Values:
        sets = [self.values(o) for o in operands]
        if any(s is None for s in sets) or any(op not in _OPS for op in ops):
            return None
        known = [s for s in sets if s is not None]
        if math.prod(len(s) for s in known) > MAX_COMBINATIONS:
            return None
        out = set()
        try:
            for combo in itertools.product(*known):
                if chained:
                    out.add(all(_OPS[op](combo[i], combo[i + 1]) for i, op in enumerate(ops)))
                else:
                    out.add(_OPS[ops[0]](combo[0], combo[1]))
        except (TypeError, ZeroDivisionError):
            return None
        return frozenset(out)

    def truth(self, node: ast.AST) -> frozenset[bool]:
        if isinstance(node, ast.BoolOp):
            parts = [self.truth(v) for v in node.values]
            if isinstance(node.op, ast.And):
                return frozenset({True} if all(True in p for p in parts) else set()) | frozenset(
                    {False} if any(False in p for p in parts) else set()
                )
            return frozenset({True} if any(True in p for p in parts) else set()) | frozenset(
                {False} if all(False in p for p in parts) else set()
            )
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return frozenset(not v for v in self.truth(node.operand))
        vals = self.values(node)
        if vals is None:
            return BOTH
        try:
            return frozenset(bool(v) for v in vals)
        except TypeError:
            return BOTH


def parse(test: str) -> ast.expr | None:
    try:
        return ast.parse(test.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None


def reads(node: ast.AST) -> set[str]:
    """The layout dimensions an expression reads."""
    found: set[str] = set()
    for sub in ast.walk(node):
        name = _ident(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else None
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            name = sub.value  # getattr(config, "sequence_parallel", False)
        hit = dimension(name) if name else None
        if hit is not None:
            found.add(hit[0])
        elif isinstance(sub, ast.Call) and (_ident(sub.func) or "").endswith("size"):
            group = _group(sub.func.value) if isinstance(sub.func, ast.Attribute) else None
            group = group or (_group(sub.args[0]) if sub.args else None)
            found |= {group} if group else set()
    return found


def can_truths(test: ast.expr, layout: Layout) -> frozenset[bool]:
    """The values a test can take on some rank of `layout` (both where it reads what the layout leaves open)."""
    return _Eval(layout).truth(test)


def can_hold(test: ast.expr, holds: bool, layout: Layout) -> bool:
    """Whether some rank of `layout` can take this branch (`holds`: the test true; else false)."""
    return holds in _Eval(layout).truth(test)


def _env_int(env: dict[str, str], key: str, default: int | None) -> int | None:
    value = env.get(key, "")
    return int(value) if value.isdigit() else default


def layout_of(matrix: Matrix, level: int, variant: Variant) -> Layout:
    env = dict(matrix.base_env) | (dict(matrix.levels[level].env) if level else {}) | dict(variant.env)
    return Layout(
        tp=_env_int(env, "COMMON_TP", 1) or 1,
        pp=_env_int(env, "COMMON_PP", 1) or 1,
        vpp=_env_int(env, "COMMON_VPP", None),
        cp=_env_int(env, "COMMON_CP", 1) or 1,
        ep=_env_int(env, "COMMON_EP", 1) or 1,
        etp=_env_int(env, "COMMON_ETP", 1) or 1,
        fsdp=env.get("USE_MEGATRON_FSDP", "False").lower() == "true",
        moe=variant.applies_to == "moe",
    )


@dataclass(frozen=True)
class CellLayout:
    level: int
    variant: str
    kind: str  # "all", or "moe" for a variant that runs a MoE model
    layout: Layout
    scheduled: bool = False


def cell_layouts(matrix: Matrix, every_kind: bool = False) -> list[CellLayout]:
    """The layouts a PR's cells run, cheapest level first: every level's generic variants, then Level 4's
    MoE variants (the architecture-specific level, where a MoE-only branch belongs; `every_kind`: every
    level's MoE variants, as Level 2's expert-parallel one); the scheduled full run's layouts last."""
    out = []
    for scheduled in (False, True):
        for kind in ("all", "moe"):
            for level in sorted(matrix.levels):
                if kind == "moe" and level != 4 and not scheduled and not every_kind:
                    continue
                for v in matrix.levels[level].variants:
                    if v.applies_to == kind and v.scheduled == scheduled:
                        out.append(CellLayout(level, v.name, kind, layout_of(matrix, level, v), scheduled))
    return out


def running(cells: list[CellLayout], tests: list[tuple[ast.expr, bool]], moe_family: bool) -> Iterator[CellLayout]:
    """The cells whose layout can take every one of `tests` at once (`moe_family`: the changed code's
    family has experts, so its generic cells run a MoE model), in `cells`' order."""
    for cell in cells:
        layout = cell.layout if cell.kind == "moe" or not moe_family else replace(cell.layout, moe=True)
        if all(can_hold(t, holds, layout) for t, holds in tests):
            yield cell
