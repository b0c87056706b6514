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
from collections.abc import Mapping
from pathlib import PurePosixPath

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
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
        return list(dict.fromkeys(_LOOSE.findall(text)))
    constants = _string_constants(tree)
    found: dict[str, None] = {}
    for node in ast.walk(tree):  # decorators and the `register_bridge(...)(Cls)` form alike
        if not isinstance(node, ast.Call) or _decorator_name(node) != "register_bridge":
            continue
        value = next((k.value for k in node.keywords if k.arg == "source"), node.args[0] if node.args else None)
        name = _source_name(value, constants)
        if name:
            found[name] = None
    return list(found)


def _source_name(value: ast.expr | None, constants: Mapping[str, str]) -> str | None:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.Name):
        return constants.get(value.id, value.id)  # an imported HF class is named as its architecture
    if isinstance(value, ast.Attribute):
        return value.attr
    return None


def local_imports(path: str, source: bytes | str) -> set[str]:
    """Paths (same repository layout) of the modules `path` imports from its own package tree."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    here = PurePosixPath(path).parent
    out: set[str] = set()
    for node in ast.walk(tree):
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


def architectures_by_file(sources: Mapping[str, bytes | str]) -> dict[str, list[str]]:
    """For every file under models/: the architectures it registers, then those of bridges importing it."""
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
