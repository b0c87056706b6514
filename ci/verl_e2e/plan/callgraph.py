"""Which top-level functions and classes of Bridge verl's imports reach, by name references (a call graph).

Importing `megatron.bridge.training.utils.train_utils` for `make_value_model` does not put Bridge's own
`training_log` on verl's path. Starting from the symbols verl imports, every name a reached function or
class uses is followed: to another top-level definition of the same module, or through the module's
imports (`from x import f`, `import x as m` + `m.f`, relative imports, re-exports by `__init__`) to the
defining module. A class is reached whole (its methods are called through instances), and a module's
top-level statements run on import, so what they name is reached too. Dynamic dispatch beyond that
(bridges found through the registry) is out of reach of names: model directories count file-wise. A
module named in a string, and a class named beside it (`("megatron.bridge.peft.dora", "DoRA")`, what
`import_module` and `getattr` then load), counts as named.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Symbol = tuple[str, str]  # (module, top-level name)
_MODULE = re.compile(r"megatron\.bridge(\.\w+)+")


def module_of(path: str) -> str:
    """`src/megatron/bridge/a/b.py` -> `megatron.bridge.a.b` (a package's `__init__.py` is the package)."""
    mod = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


@dataclass
class ModuleInfo:
    defs: dict[str, set[str]] = field(default_factory=dict)  # top-level name -> names its body uses
    members: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # class -> method -> names used
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local -> (module, name)
    top_level: set[str] = field(default_factory=set)  # names the module's own statements use


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, *([node.module] if node.module else [])])


class _Uses(ast.NodeVisitor):
    """Names used at run time: annotations are skipped, as naming a type in a hint calls nothing."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        self.names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name):
            self.names.add(f"{node.value.id}.{node.attr}")
        self.names.add(f".{node.attr}")  # a method of some object: matched against reached classes
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        """A Bridge module named in a string (`import_module("megatron.bridge.peft.dora")`) is reached."""
        if isinstance(node.value, str) and _MODULE.match(node.value):
            self.names.add(f"@{node.value}")

    def visit_Tuple(self, node: ast.Tuple) -> None:
        """`("megatron.bridge.peft.canonical_lora", "CanonicalLoRA")`: a class looked up by name in a module
        named by string (Bridge's PEFT types), reached as if imported."""
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(values) == len(node.elts) == 2 and _MODULE.match(values[0]) and values[1].isidentifier():
            self.names.add(f"@{values[0]}:{values[1]}")
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:  # noqa: ARG002 - a parameter's annotation calls nothing
        return

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:  # the class body without its methods
        for expr in (*node.bases, *node.keywords, *node.decorator_list):
            self.visit(expr)
        for stmt in node.body:
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.visit(stmt)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for d in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if d is not None:
                self.visit(d)
        for stmt in node.body:
            self.visit(stmt)


def _used(nodes: Iterable[ast.AST]) -> set[str]:
    """Names used, plus `alias.attr` for attribute access on a name (resolved later through imports)."""
    uses = _Uses()
    for node in nodes:
        uses.visit(node)
    return uses.names


def analyse(path: str, source: bytes) -> ModuleInfo:
    info = ModuleInfo()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return info
    module, is_package = module_of(path), path.endswith("__init__.py")
    for node in ast.walk(tree):  # imports anywhere, function-level ones included
        if isinstance(node, ast.ImportFrom):
            source_module = _absolute(module, is_package, node)
            for alias in node.names:
                info.imports[alias.asname or alias.name] = (source_module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                info.imports[local] = (alias.name if alias.asname else alias.name.split(".")[0], None)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            info.defs[node.name] = _used([node])
            if isinstance(node, ast.ClassDef):
                info.members[node.name] = {
                    n.name: _used([n]) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
        elif not isinstance(node, (ast.Import, ast.ImportFrom)):
            info.top_level |= _used([node])
    return info


class _Graph:
    """Worklist over (module, name) and (module, "Class.method"): a class brings its body and dunder
    methods; any other method is reached once some reached code (or verl) names it as an attribute."""

    def __init__(self, sources: Mapping[str, bytes], attributes: Iterable[str] = ()) -> None:
        self.paths = {module_of(p): p for p in sources}
        self.infos = {module_of(p): analyse(p, s) for p, s in sources.items()}
        self.reached: dict[str, set[str]] = {}
        self.todo: list[Symbol] = []
        self.attributes: set[str] = set(attributes)
        self.classes: list[Symbol] = []

    def _mark(self, module: str, name: str) -> None:
        if name not in self.reached.setdefault(module, set()):
            self.reached[module].add(name)
            self.todo.append((module, name))

    def add(self, module: str, name: str, depth: int = 0) -> None:
        info = self.infos.get(module)
        if info is None or depth > 8:
            return
        if name in info.defs:
            self._mark(module, name)
            if name in info.members and (module, name) not in self.classes:
                self.classes.append((module, name))
                self._methods(module, name)
            self.reach_module(module)
        elif name in info.imports:  # a re-export: follow it to where it is defined
            target, sym = info.imports[name]
            if sym is not None:
                self.add(target, sym, depth + 1)
        elif f"{module}.{name}" in self.infos:  # `from package import submodule`
            self.reach_module(f"{module}.{name}")

    def _methods(self, module: str, cls: str, everything: bool = False) -> None:
        for method in self.infos[module].members[cls]:
            if everything or method.startswith("__") or method in self.attributes:
                self._mark(module, f"{cls}.{method}")

    def reach_module(self, module: str) -> None:
        """A reached module runs its top-level statements: what they name is reached."""
        self._mark(module, "<module>")

    def resolve(self, module: str, used: set[str]) -> None:
        info = self.infos[module]
        for name in used:
            if name.startswith("@"):  # named by a string (_Uses.visit_Constant, visit_Tuple)
                named, _, symbol = name[1:].partition(":")
                if symbol:
                    self.add(named, symbol)
                elif named in self.infos:
                    self.reach_module(named)
                continue
            if name.startswith("."):
                if name[1:] not in self.attributes:
                    self.attributes.add(name[1:])
                    for mod, cls in self.classes:
                        if name[1:] in self.infos[mod].members[cls]:
                            self._mark(mod, f"{cls}.{name[1:]}")
                continue
            head, _, attr = name.partition(".")
            if not attr and head in info.defs:
                self.add(module, head)
            elif head in info.imports:
                target, sym = info.imports[head]
                if sym is None or f"{target}.{sym}" in self.infos:
                    if attr:
                        self.add(target if sym is None else f"{target}.{sym}", attr)
                else:
                    self.add(target, sym)

    def uses(self, module: str, name: str) -> set[str]:
        info = self.infos[module]
        if name == "<module>":
            return info.top_level
        cls, _, method = name.partition(".")
        return info.members[cls][method] if method else info.defs[cls]

    def run(self) -> None:
        while self.todo:
            module, name = self.todo.pop()
            self.resolve(module, self.uses(module, name))


def reachable_symbols(
    sources: Mapping[str, bytes], entries: Iterable[str], attributes: Iterable[str] = ()
) -> dict[str, list[str]]:
    """path -> the top-level names and `Class.method`s that verl's imports (and the attribute names
    verl itself uses on Bridge objects) reach. `module:*` reaches a whole module (the bridge registry)."""
    graph = _Graph(sources, attributes)
    for entry in entries:
        module, _, name = entry.partition(":")
        if name != "*":
            graph.add(module, name)
        elif module in graph.infos:
            for defined in list(graph.infos[module].defs):
                graph.add(module, defined)
                if defined in graph.infos[module].members:
                    graph._methods(module, defined, everything=True)
            graph.reach_module(module)
    graph.run()
    out: dict[str, list[str]] = {}
    for module, names in graph.reached.items():
        full = {n for n in names if n != "<module>"}
        full |= {n.split(".", 1)[1] for n in full if "." in n}  # a method matches by its own name too
        out[graph.paths[module]] = sorted(full)
    return dict(sorted(out.items()))


def unreached_symbols(sources: Mapping[str, bytes], reached: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """path -> names defined there (top-level, `Class.method`, bare method names) that nothing reaches.

    Only names known to be unreached are listed: a scope the index has never seen (code newer than the
    index) counts as reached, so a stale index errs towards running."""
    out: dict[str, list[str]] = {}
    for path, source in sources.items():
        info = analyse(path, source)
        defined = set(info.defs) | {f"{c}.{m}" for c, ms in info.members.items() for m in ms}
        defined |= {m for ms in info.members.values() for m in ms}
        missing = defined - set(reached.get(path, ()))
        if missing:
            out[path] = sorted(missing)
    return dict(sorted(out.items()))
