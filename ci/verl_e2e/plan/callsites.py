"""Where Bridge calls a changed function from, and whether any cell reaches those calls.

Static reach says a helper is on verl's surface when any reached code names it. The line records say
more: `init_method_kaiming_uniform` is named only on the `elif init_method == "kaiming":` branch of
`_get_init_fn`, which every recorded cell ran while taking the `xavier` and `zero` branches (verl's
LoRA settings, the same in every cell). A change only inside such a helper runs in no cell, and
Level 0 would import it and prove nothing. The same holds for a helper named only inside a function
verl calls under a setting no level turns on (gated.py).

Every mention of the changed definition's top-level name in Bridge's sources at the base is read
(`git grep -w`), and each must be harmless: an import or `__all__` entry without an alias, an
`isinstance` check, a comment, or a line inside a gated function, or one inside a function recorded
cells ran whose statement none of them took, under no parallel-layout condition (a TP-only branch is
for the layout rules). Anything else (module code, a class body, a subclass, a value passed on, a line
a cell ran, a file no record covers) leaves the change to the other rules. A call under a parallel-
layout condition is kept with its branch: a helper Bridge calls only at PP > 1 (`_get_embedding_group`,
behind `_broadcast_shared_embeddings`' tied-embedding branch) runs in the first cell whose layout takes
that branch, and in no Level 0 cell.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from verl_e2e.plan import branches, pyparse
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.kindconds import unrecorded_condition
from verl_e2e.plan.renames import where_named
from verl_e2e.plan.runtime import Ran, blob_id
from verl_e2e.plan.scopes import innermost
from verl_e2e.plan.unrun import MIN_LINE_RECORDS

BRIDGE = "src/megatron/bridge/"
Read = Callable[[str], bytes | None]  # a base file's bytes by path, None where absent
_CHECKS = ("isinstance", "issubclass")
_PROSE = (".md", ".rst", ".txt")  # files that name code and run none
MAX_MENTIONS = 60  # lines naming the definition beyond which it is left to the other rules (and fast)
MAX_DEPTH = 3  # functions no cell ran, one calling the next, followed before a change is left to the rules


@dataclass(frozen=True)
class _Where:
    """Where the mentions are read: Bridge's repository at the base, and the names verl itself uses."""

    repo: Path
    rev: str
    verl: frozenset[str]


@dataclass(frozen=True)
class Caller:
    path: str
    line: int
    function: str  # the function the mention sits in
    how: str  # "untaken": recorded cells ran the function, never this line; "gated": a gated function;
    # "layout": the call runs only under the parallel-layout conditions of `branches` (the layout rules);
    # "unreached": a function no cell ran, which nothing a cell reaches calls (the chain ends nowhere)
    branches: tuple[branches.Branch, ...] = ()
    # for "layout": the recorded cells with line records of this file that ran the function and not the
    # call; where one's layout holds the conditions, they are not what keeps the call off (refuted.py)
    skipped: tuple[str, ...] = ()


def _statement(tree: ast.Module, line: int) -> ast.stmt | None:
    """The innermost statement holding `line`: the one that starts last (and, on one line, ends first)."""
    holding = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(holding, key=lambda n: (n.lineno, -(n.end_lineno or n.lineno)), default=None)


def _header(stmt: ast.stmt) -> range:
    """The lines a statement runs on its own: a compound statement's header, a simple one's whole span."""
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return range(stmt.lineno, max(stmt.lineno, body[0].lineno - 1) + 1)
    return range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)


def _uses(tree: ast.Module, name: str, method: bool = False) -> set[int]:
    """The lines that use `name` in a way that may call it: not an alias-free import, an `__all__`
    entry, an isinstance/issubclass check, or text no node holds (a comment, a docstring's words). A
    method is reached only as an attribute (`self.m`, `obj.m`) or by `getattr`: a bare name is another
    thing of that name (a local `etp_rank = ...`)."""
    checked: set[int] = set()
    exported: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CHECKS:
            checked |= {id(n) for arg in node.args[1:] for n in ast.walk(arg)}
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported |= {id(n) for n in ast.walk(node.value)}
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name.rsplit(".", 1)[-1] == name and a.asname not in (None, name) for a in node.names):
                lines |= set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif id(node) in checked or id(node) in exported or not hasattr(node, "lineno"):
            continue
        elif _names(node, name, method):
            lines.add(node.lineno)
        elif isinstance(node, ast.Constant) and node.value == name:
            lines.add(node.lineno)  # getattr(module, "name")
    return lines


def _names(node: ast.AST, name: str, method: bool) -> bool:
    """Whether the node names `name`: as an attribute, or (not for a method) as a bare name."""
    return (isinstance(node, ast.Attribute) and node.attr == name) or (not method and getattr(node, "id", None) == name)


class _Reader:
    def __init__(self, read: Read, ran: Sequence[Ran], gates: set[tuple[str, str]], where: _Where) -> None:
        self.read, self.ran, self.gates, self.where = read, ran, gates, where
        self.methods: set[str] = set()  # names looked up as methods (see _uses)
        self.trees: dict[str, tuple[bytes, ast.Module] | None] = {}
        self.uses: dict[tuple[str, str], set[int]] = {}
        self.active: list[str] = []  # the names whose callers are being looked up, outermost first

    def _tree(self, path: str) -> tuple[bytes, ast.Module] | None:
        if path not in self.trees:
            source = self.read(path)
            tree = pyparse.tree(source) if source is not None else None
            self.trees[path] = None if source is None or tree is None else (source, tree)
        return self.trees[path]

    def caller(self, path: str, line: int, name: str) -> list[Caller] | None:
        """The callers a mention stands for ([] where the mention cannot call); None where it may run
        in a cell (or cannot be read)."""
        found = self._tree(path)
        if found is None:
            return None
        source, tree = found
        if (path, name) not in self.uses:
            self.uses[path, name] = _uses(tree, name, name in self.methods)
        if line not in self.uses[path, name]:
            return []
        inner = innermost(source, [line])
        function = inner[0] if inner else ""
        if (path, function.split(".", 1)[0]) in self.gates:
            return [Caller(path, line, function, "gated")]
        stmt = _statement(tree, line)
        if not function or stmt is None:
            return None
        ran_it = [r for r in self.ran if function in {q.replace(".<locals>", "") for q in r.functions.get(path, ())}]
        if not ran_it:  # the function's own callers decide, whatever its lines' conditions
            return self._through(path, line, function, name)
        under = branches.from_source(source, [line], True)
        short = branches.short_circuit(tree, line, lambda n: _names(n, name, name in self.methods))
        if short:  # `tp_size == 1 or helper(...)`: the operands before the call are its conditions too
            under = [branches.Branch(line, True, function, (*(under[0].conditions if under else ()), *short))]
        blob = blob_id(source)
        if under:  # a layout condition: the change runs where it holds (Level 2's PP branch)
            header = set(_header(stmt))
            skipped = [r.cell for r in ran_it if (ls := r.ran_lines(path, blob)) is not None and not ls & header]
            return [Caller(path, line, function, "layout", tuple(under), tuple(skipped))]
        if unrecorded_condition(tree, line):
            return None  # a kind (MTP, vision, ...) or state (a cache hit) condition: Level 4 or 5 may take it
        # records made before cells wrote their lines say only that the function ran; the many that
        # have lines (dense and MoE families, save and resume) decide, and none of them took the line
        lines = [ls for ls in (r.ran_lines(path, blob) for r in ran_it) if ls is not None]
        if len(lines) < MIN_LINE_RECORDS or any(ls & set(_header(stmt)) for ls in lines):
            return None
        return [Caller(path, line, function, "untaken")]

    def _through(self, path: str, line: int, function: str, name: str) -> list[Caller] | None:
        """The callers of a mention inside a function no recorded cell ran: those of that function in
        turn (a helper called only from ModelOpt's export plan, itself called from an export verl never
        makes). The mention runs only when its function does, so it is reached exactly where the
        function's own callers are; a chain longer than MAX_DEPTH, or one verl names, may run."""
        if name in self.methods and function.rsplit(".", 1)[-1] == name:
            return []  # another definition of the method (an override's super() call): its callers are ours
        target = _callable(self._tree(path), function)
        if target is None or len(self.active) >= MAX_DEPTH:
            return None
        called, method, defined = target
        if not self._unrun(path, ".".join(function.split(".")[: 2 if method else 1])):
            return None
        if called in self.where.verl:
            return None
        if called in self.active:
            return []  # a cycle: reached only through the calls being looked up already
        self.active.append(called)
        if method:
            self.methods.add(called)
        try:
            found = _calls(self.where, self, path, {called: defined})
        finally:
            self.active.pop()
        if found is None or any(c.how == "layout" for c in found):
            return None if found is None else list(found)  # a layout's callers carry their branches
        return [Caller(path, line, function, "unreached"), *(c for c in found if c.how == "gated")]

    def _unrun(self, path: str, unit: str) -> bool:
        """No recorded cell ran anything of `unit` (a top-level function, or a method) in `path`, nor
        imported the file: whether it runs is then its callers' question alone."""
        done = {q.replace(".<locals>", "") for r in self.ran for q in r.functions.get(path, ())}
        return not any(q == unit or q.startswith(f"{unit}.") for q in done)


def _defined_at(tree: ast.Module, name: str) -> set[int]:
    """The lines of the module's own top-level `def`/`class name` (decorators included)."""
    out: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            out |= {node.lineno, *(d.lineno for d in node.decorator_list)}
    return out


def callers(
    repo: Path,
    rev: str,
    file: ChangedFile,
    *,
    read: Read,
    ran: Sequence[Ran],
    gates: set[tuple[str, str]],
    verl: set[str],
) -> tuple[Caller, ...] | None:
    """The calls a change can run through, each one no cell takes (untaken or gated); None where any
    may run, or the change is not inside functions of one top-level definition no recorded cell ran."""
    names = file.functions
    if file.status != "M" or not file.path.startswith(BRIDGE) or not names or file.module_level:
        return None
    tops = {n.split(".", 1)[0] for n in names}
    done = {q.replace(".<locals>", "").split(".", 1)[0] for r in ran for q in r.functions.get(file.path, ())}
    where = _Where(repo, rev, frozenset(verl))
    reader = _Reader(read, ran, gates, where)
    own = reader._tree(file.path)
    if own is None or len(tops) != 1:
        return None  # unreadable, or several definitions
    if tops & done and _constructing(names):  # a class's own set-up runs exactly where the class is built
        cls = names[0].split(".", 1)[0]
        return None if cls in verl else _builders(where, reader, own[1], file.path, cls)
    if tops & done:  # a class the cells built: only methods of it none of them called
        methods = _uncalled_methods(own[1], file.path, names, ran)
        if methods is None or set(methods) & verl:
            return None  # verl may call it itself
        reader.methods |= set(methods)
        return _calls(where, reader, file.path, {m: _method_at(own[1], names[0], m) for m in methods})
    if tops & verl:
        return None  # one verl names itself
    (top,) = tops
    defined = _defined_at(own[1], top)
    if not defined or len(defined) > 1:
        return None  # decorated (a registration may call it), defined twice, or not at the top level
    return _calls(where, reader, file.path, {top: defined})


CONSTRUCTORS = frozenset({"__init__", "__post_init__"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _constructing(names: Sequence[str]) -> bool:
    return all(n.count(".") == 1 and n.split(".", 1)[1] in CONSTRUCTORS for n in names)


def _builders(where: _Where, reader: _Reader, tree: ast.Module, path: str, cls: str) -> tuple[Caller, ...] | None:
    """The calls that build `cls`, for a change to its `__init__`/`__post_init__`: every mention of the class
    (a subclass's base leaves it to the other rules). None where a recorded cell ran any method of it, or
    it is decorated by more than `@dataclass` (a registration may build it). MambaModelProvider: imported
    and exported, built by nothing since the hybrid provider took its place."""
    done = {q.replace(".<locals>", "") for r in reader.ran for q in r.functions.get(path, ())}
    if any(q.startswith(f"{cls}.") for q in done):
        return None
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None or not all(_dataclass(d) for d in node.decorator_list):
        return None
    methods = {i for f in node.body if isinstance(f, _FUNCS) for i in range(f.lineno, (f.end_lineno or f.lineno) + 1)}
    own = set(range(node.lineno, (node.end_lineno or node.lineno) + 1)) - methods  # its fields' annotations
    return _calls(where, reader, path, {cls: own | {d.lineno for d in node.decorator_list}})


def _dataclass(dec: ast.expr) -> bool:
    called = dec.func if isinstance(dec, ast.Call) else dec
    return (called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")) == "dataclass"


def _calls(where: _Where, reader: _Reader, path: str, defs: dict[str, set[int]]) -> tuple[Caller, ...] | None:
    """The callers behind every mention of each name in Bridge's sources, bar its own definition lines;
    None where a mention may run in a cell."""
    out: list[Caller] = []
    for name, defined in defs.items():
        mentions = where_named(where.repo, where.rev, name)
        if mentions is None or len(mentions) > MAX_MENTIONS:
            return None  # unreadable, or named so widely that some use surely runs
        for at, line in mentions:
            if (at == path and line in defined) or at.endswith(_PROSE):
                continue  # its own definition, or documentation's words (a README's example call)
            found = reader.caller(at, line, name)
            if found is None:
                return None
            out += found
    return tuple(out)


def _callable(found: tuple[bytes, ast.Module] | None, function: str) -> tuple[str, bool, set[int]] | None:
    """What must be called for `function` to run, by the name its callers use: its top-level function
    (undecorated: a registration may call it), or its method of a class with plain bases (as
    `_uncalled_methods`): (name, is a method, its definition's lines); None for anything else."""
    if found is None:
        return None
    parts = function.split(".")
    node = next((n for n in found[1].body if getattr(n, "name", None) == parts[0]), None)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None if node.decorator_list else (parts[0], False, {node.lineno})
    if not isinstance(node, ast.ClassDef) or len(parts) < 2 or not all(_plain(b) for b in node.bases):
        return None
    defs = (f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef))
    fn = next((f for f in defs if f.name == parts[1]), None)
    if fn is None or fn.name.startswith("__"):
        return None
    if not all(isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS for d in fn.decorator_list):
        return None
    return fn.name, True, {fn.lineno, *(d.lineno for d in fn.decorator_list)}


# bases whose methods nothing outside Bridge calls by protocol (torch calls a Module's forward, Megatron a
# config's __post_init__, a checkpointer sharded_state_dict): a method of a class with other bases is left
PLAIN_BASES = frozenset({"ABC", "Generic", "object", "Protocol", "AutoBridge"})  # AutoBridge: Bridge's own, verl calls
# its methods by name (the verl names stop a look-up there), nothing by protocol
# ... and a model bridge's: AutoBridge and the conversion code call its hooks by name (`megatron_to_hf_config`),
# so one family cell that built the bridge and never ran the hook is enough for its mentions to decide
BRIDGE_BASES = frozenset({"MegatronModelBridge"})
_PLAIN_DECORATORS = frozenset({"property", "staticmethod", "classmethod"})


def _uncalled_methods(tree: ast.Module, path: str, names: Sequence[str], ran: Sequence[Ran]) -> list[str] | None:
    """The methods a change sits in, when each is an undecorated (or property) method of one top-level
    class with plain bases that at least MIN_LINE_RECORDS recorded cells built while none ran the method."""
    if any(n.count(".") != 1 for n in names):
        return None
    cls = names[0].split(".", 1)[0]
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    bridge = cls in BRIDGE_BASES or (
        node is not None and any(isinstance(b, ast.Name) and b.id in BRIDGE_BASES for b in node.bases)
    )
    if node is None or not (bridge or all(_plain(b) for b in node.bases)):
        return None
    methods = sorted({n.split(".", 1)[1] for n in names})
    defs = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    for method in methods:
        fn = defs.get(method)
        if fn is None or method.startswith("__"):
            return None
        if not all(isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS for d in fn.decorator_list):
            return None
    seen = [{q.replace(".<locals>", "") for q in r.functions.get(path, ())} for r in ran]
    built = [q for q in seen if any(x.split(".", 1)[0] == cls for x in q)]
    if len(built) < (1 if bridge else MIN_LINE_RECORDS) or any(f"{cls}.{m}" in q for q in seen for m in methods):
        return None
    return methods


def _plain(base: ast.expr) -> bool:
    named = base.value if isinstance(base, ast.Subscript) else base
    return isinstance(named, ast.Name) and named.id in PLAIN_BASES


def _method_at(tree: ast.Module, qualname: str, method: str) -> set[int]:
    """The lines of `def method` (decorators included) in the class `qualname` names."""
    cls = qualname.split(".", 1)[0]
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == method)
    return {fn.lineno, *(d.lineno for d in fn.decorator_list)}
