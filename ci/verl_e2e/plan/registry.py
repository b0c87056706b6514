"""Which HF architectures a Bridge file serves, read from `register_bridge` registrations in the PR's tree.

A change to `models/qwen/qwen3_bridge.py` must run a Qwen3 checkpoint, not whatever `models/qwen/` ran
before. Bridge registers each bridge class with `@MegatronModelBridge.register_bridge(source=<HF class or
name>, ...)`; the `source` is the architecture string of the checkpoint's config.json. A provider or
modeling file registers nothing itself: it serves the architectures of the bridge files in its model
directory that import it (directly or through another file of that directory).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Mapping
from pathlib import PurePosixPath

from verl_e2e.plan import pyparse

_LOOSE = re.compile(r"register_bridge\(\s*source\s*=\s*[\"']?([A-Za-z_][\w]*)")


def _decorator_name(node: ast.expr) -> str | None:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` assignments, as Bridge names some architectures through a constant."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def registrations(source: bytes | str) -> list[str]:
    """Architectures registered in one file; a file that does not parse is read with a loose pattern."""
    text = source if isinstance(source, str) else source.decode("utf-8", "replace")
    if "register_bridge" not in text:
        return []  # only a call named register_bridge registers: most model files have none to walk
    tree = pyparse.tree(source)
    if tree is None:
        return list(dict.fromkeys(_LOOSE.findall(text)))
    constants = _string_constants(tree)
    found: dict[str, None] = {}
    for node in ast.walk(tree):  # decorators and the `register_bridge(...)(Cls)` form alike
        if not isinstance(node, ast.Call) or _decorator_name(node) != "register_bridge":
            continue
        value = _source_value(node)
        name = _source_name(value, constants)
        if name:
            found[name] = None
    return list(found)


def class_registrations(source: bytes) -> dict[tuple[int, int], list[str]]:
    """The line span of each top-level class a `register_bridge` decorator registers, with the
    architectures it registers there: a file of several bridges (a dense and a MoE one) serves each
    architecture through its own class. Empty for a file that does not parse or registers nothing."""
    tree = pyparse.tree(source) if b"register_bridge" in source else None
    if tree is None:
        return {}
    constants = _string_constants(tree)
    out: dict[tuple[int, int], list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        calls = [d for d in node.decorator_list if isinstance(d, ast.Call) and _decorator_name(d) == "register_bridge"]
        values = [
            next((k.value for k in d.keywords if k.arg == "source"), d.args[0] if d.args else None) for d in calls
        ]
        names = [name for value in values if (name := _source_name(value, constants))]
        if names:
            out[(node.lineno, node.end_lineno or node.lineno)] = names
    return out


def _source_value(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "source"), call.args[0] if call.args else None)


def _source_name(value: ast.expr | None, constants: Mapping[str, str]) -> str | None:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.Name):
        return constants.get(value.id, value.id)  # an imported HF class is named as its architecture
    if isinstance(value, ast.Attribute):
        return value.attr
    return None


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth of statements (a function's lazy import too), without
    walking into expressions, where no import can be: a tenth of the nodes of a full walk."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        todo.extend(
            c for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case))
        )
    return found


def local_imports(path: str, source: bytes | str) -> set[str]:
    """Paths (same repository layout) of the modules `path` imports from its own package tree."""
    tree = pyparse.tree(source)
    if tree is None:
        return set()
    here = PurePosixPath(path).parent
    out: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = base.parent
                parts = (node.module or "").split(".") if node.module else []
                target = base.joinpath(*parts) if parts else base
            elif node.module and node.module.startswith("megatron.bridge."):
                target = PurePosixPath("src", *node.module.split("."))
            else:
                continue
            out.add(f"{target}.py")
            out.update(f"{target}/{a.name}.py" for a in node.names)  # `from . import qwen3_provider`
            out.add(f"{target}/__init__.py")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("megatron.bridge."):
                    out.add(f"{PurePosixPath('src', *alias.name.split('.'))}.py")
    return out


SHARED = frozenset({"conversion", "common", "decorators", "gpt", "hf_pretrained"})  # code every model builds on


def _walkable(path: str) -> bool:
    """Only a model directory's own files pass architectures on: not the shared code every bridge
    imports (it imports bridges back), and not a package `__init__` that imports every file."""
    parts = path.split("/")
    if len(parts) < 6 or parts[4] in SHARED:
        return False
    return not path.endswith("__init__.py") or len(parts) > 6


def _token(path: str) -> str:
    """The name an import of `path` must spell: its module, or its package for an `__init__`."""
    pure = PurePosixPath(path)
    return pure.parent.name if pure.name == "__init__.py" else pure.stem


def _reaching(sources: Mapping[str, bytes | str], only: Collection[str]) -> dict[str, bytes | str]:
    """The files that can import one of `only`, directly or through each other, plus `only` itself.

    A file that imports `x/qwen2_bridge.py` spells `qwen2_bridge` somewhere in its text, so a
    substring test finds every possible importer without parsing; the result is a superset of the
    files on any import chain into `only`, which is all `architectures_by_file` needs for them."""
    text = {p: s if isinstance(s, str) else s.decode("utf-8", "replace") for p, s in sources.items()}
    keep = {p for p in only if p in sources}
    frontier = set(keep)
    while frontier:
        names = "|".join(sorted({re.escape(_token(p)) for p in frontier}))
        # `from ...name import`, `from pkg import (a,\n name)`, `import pkg.name`: the name after `from`
        # or `import`, before the statement's closing parenthesis (a superset of real imports)
        spelled = re.compile(rf"\bfrom\s+[\w.]*\b(?:{names})\b|\bimport\s[^)]*?\b(?:{names})\b")
        found = {p for p, t in text.items() if p not in keep and spelled.search(t)}
        keep |= found
        frontier = {p for p in found if _walkable(p)}  # only these pass architectures on further
    return {p: s for p, s in sources.items() if p in keep}  # in the tree's order, as the answer lists them


def architectures_by_file(
    sources: Mapping[str, bytes | str], only: Collection[str] | None = None
) -> dict[str, list[str]]:
    """For every file under models/: the architectures it registers, then those of bridges importing it.
    With `only`, the answer is exact for those files and the rest is left out (a PR's plan needs the
    changed files only, and parsing every model file costs seconds)."""
    if only is not None:
        sources = _reaching(sources, only)
    registered = {p: registrations(s) for p, s in sources.items()}
    edges = {p: local_imports(p, s) & sources.keys() for p, s in sources.items()}
    out: dict[str, dict[str, None]] = {p: dict.fromkeys(a) for p, a in registered.items()}
    for bridge, archs in registered.items():
        if not archs:
            continue
        seen, todo = {bridge}, [bridge]
        while todo:
            for dep in edges.get(todo.pop(), ()):
                if dep not in seen and _walkable(dep):
                    seen.add(dep)
                    todo.append(dep)
                    out[dep].update(dict.fromkeys(archs))
    return {p: list(a) for p, a in sorted(out.items()) if a}


def loose_registrations(lines: list[str]) -> list[str]:
    """Registrations visible in a diff's lines (a new bridge file shows its whole decorator)."""
    joined = "\n".join(lines)
    try:
        return registrations(joined)
    except RecursionError:  # pragma: no cover - pathological input
        return list(dict.fromkeys(_LOOSE.findall(joined)))
