"""Module-level calls that raise when the module is imported, read from the head tree (importbreak.py).

Bridge's model files run code at import: `@MegatronModelBridge.register_bridge(source=..., provider=...)`
decorates every bridge class, and `AutoMapping.register_module_type("Name", "column")` files custom
modules under a split kind. Two such calls fail for certain, from the source alone:
  * a keyword the called Bridge function does not take (`provider_cls=` for `provider=`: TypeError), where
    the function is defined in Bridge (found through the module's `from megatron.bridge.X import Name`)
    and has no `**kwargs`;
  * a split kind `register_module_type` refuses: one that is no key of `AutoMapping._MODULE_TYPE_REGISTRY`
    in the head tree's param_mapping.py (`"row_parallel"`, `"replicate"`: ValueError).
Pure apart from `read`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from verl_e2e.plan import pyparse

Read = Callable[[str], bytes | None]
PACKAGE = "megatron.bridge"
MAPPING = "src/megatron/bridge/models/conversion/param_mapping.py"
REGISTRY = "_MODULE_TYPE_REGISTRY"


def broken_call(node: ast.stmt, tree: ast.Module, read: Read) -> str | None:
    """Why a module-level statement (or a class's decorators) raises when the module is imported."""
    for call in _calls(node):
        found = _split_kind(call, read) or _keyword(call, tree, read)
        if found is not None:
            return found
    return None


def _calls(node: ast.stmt) -> Iterator[ast.Call]:
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        yield from (d for d in node.decorator_list if isinstance(d, ast.Call))
    elif isinstance(node, ast.Expr | ast.Assign) and isinstance(node.value, ast.Call):
        yield node.value


def _split_kind(call: ast.Call, read: Read) -> str | None:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "register_module_type") or len(call.args) < 2:
        return None
    kind = call.args[1]
    if not (isinstance(kind, ast.Constant) and isinstance(kind.value, str)):
        return None
    known = _registry_kinds(read)
    if known is None or kind.value in known:
        return None
    return f"`register_module_type(..., {kind.value!r})` names no split kind of {REGISTRY} ({', '.join(sorted(known))})"


def _registry_kinds(read: Read) -> set[str] | None:
    tree = pyparse.tree(read(MAPPING) or b"")
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == REGISTRY and isinstance(value, ast.Dict):
            keys = {k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            return keys or None
    return None


def _keyword(call: ast.Call, tree: ast.Module, read: Read) -> str | None:
    """A keyword the called Bridge function does not accept."""
    fn = _callee(call.func, tree, read)
    if fn is None or fn.args.kwarg is not None:
        return None
    accepted = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    for kw in call.keywords:
        if kw.arg is not None and kw.arg not in accepted:
            return f"`{ast.unparse(call.func)}(..., {kw.arg}=...)`, a keyword {fn.name} does not take"
    return None


def _callee(func: ast.expr, tree: ast.Module, read: Read) -> ast.FunctionDef | None:
    """The Bridge definition a call names: `Name.method` or `name`, with Name imported from megatron.bridge."""
    owner, name = (func.value, func.attr) if isinstance(func, ast.Attribute) else (None, getattr(func, "id", None))
    imported = getattr(owner, "id", None) if owner is not None else name
    module = _imported_from(tree, imported) if imported else None
    source = read("src/" + module.replace(".", "/") + ".py") if module else None
    found = pyparse.tree(source) if source is not None else None
    if found is None or name is None:
        return None
    body: list[ast.stmt] = found.body
    if owner is not None:
        cls = next((n for n in found.body if isinstance(n, ast.ClassDef) and n.name == imported), None)
        body = cls.body if cls is not None else []
    return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _imported_from(tree: ast.Module, name: str) -> str | None:
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith(PACKAGE):
            continue
        if any(a.asname in (None, name) and a.name == name for a in node.names):
            return node.module
    return None
