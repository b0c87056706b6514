"""Changes that stop a module from importing: every cell that imports it fails there, so the cheapest
recorded cell that imports it shows the break (runtime.importing) and no family's Level 4 adds anything.

verl imports Bridge before it builds any model (`from megatron.bridge import AutoBridge` in
verl/models/mcore/bridge.py), and Bridge's `models/__init__.py` imports every family package, so a family
file that no longer imports breaks every cell, dense or not: Level 0. Bridge's checkpointing modules are
imported only when verl saves or resumes LoRA weights (its checkpoint manager imports them in the
function it calls then), so a break there fails Level 1 first. Four such breaks are read from the head
tree (`plan --repo`), each certain from the source alone:
  * the file no longer parses;
  * a changed module-level `from megatron.bridge.X import name` names something module X does not define
    (nor a submodule of that name), where X has no module `__getattr__` and no star import;
  * a changed `@dataclass` body puts a field without a default after one with a default (not in a
    keyword-only dataclass), or gives a field a list, dict or set literal as its default (dataclasses
    raises when the class is defined, keyword-only or not);
  * a changed module-level call or class decorator passes a Bridge function a keyword it does not take,
    or registers a module under a split kind AutoMapping does not have (importcalls.py).
A `from ... import` inside a `try:` is left alone: the module may guard it. Pure apart from `read`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from verl_e2e.plan import importcalls, pyparse

Read = Callable[[str], bytes | None]  # a head-tree path -> its bytes (None: no such file)
PACKAGE = "megatron.bridge"


def why(path: str, source: bytes | None, added_at: Sequence[int], read: Read) -> str | None:
    """Why importing `path` at head fails because of its changed lines, or None."""
    if source is None or not added_at or not path.endswith(".py"):
        return None
    tree = pyparse.tree(source)
    if tree is None:
        return f"{path} no longer parses: every cell that imports it fails there"
    changed = set(added_at)
    for node in tree.body:
        if not _touches(node, changed):
            continue
        found = _missing_import(node, read) if isinstance(node, ast.ImportFrom) else None
        found = found or (_field_order(node) if isinstance(node, ast.ClassDef) else None)
        found = found or importcalls.broken_call(node, tree, read)
        if found is not None:
            return f"{path}: {found}; every cell that imports it fails there"
    return None


def _touches(node: ast.stmt, changed: set[int]) -> bool:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return any(first <= n <= (node.end_lineno or node.lineno) for n in changed)


def _missing_import(node: ast.ImportFrom, read: Read) -> str | None:
    module = node.module or ""
    if node.level or not (module == PACKAGE or module.startswith(PACKAGE + ".")):
        return None
    base = "src/" + module.replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py"):
        text = read(candidate)
        if text is None:
            continue
        defined = _defined(text)
        if defined is None:
            return None  # a star import or a module __getattr__: anything may be there
        for alias in node.names:
            if alias.name in defined or any(read(f"{base}/{alias.name}{tail}") is not None for tail in _SUBMODULE):
                continue
            return f"`from {module} import {alias.name}`, which {candidate} does not define"
        return None
    return None


_SUBMODULE = (".py", "/__init__.py")


def _defined(text: bytes) -> set[str] | None:
    """Top-level names a module defines or imports; None where it may define any (star import, __getattr__)."""
    tree = pyparse.tree(text)
    if tree is None:
        return None
    names: set[str] = set()
    for node in ast.walk(tree):  # conditional and try/except definitions count: they may run
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__" and node in tree.body:
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
        elif isinstance(node, (ast.Name, ast.arg)) and isinstance(getattr(node, "ctx", ast.Store()), ast.Store):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
    return names


def _field_order(node: ast.ClassDef) -> str | None:
    kinds = [k for k in (_dataclass_kind(d) for d in node.decorator_list) if k is not None]
    if not kinds:
        return None
    ordered = "keyword-only" not in kinds  # `@dataclass(kw_only=True)`: no field order, defaults still checked
    defaulted = None
    for st in node.body:
        if not isinstance(st, ast.AnnAssign) or not isinstance(st.target, ast.Name):
            continue
        note = ast.unparse(st.annotation)
        if "ClassVar" in note or "KW_ONLY" in note or "InitVar" in note:
            continue
        if isinstance(st.value, (ast.List, ast.Dict, ast.Set)):
            return f"dataclass {node.name} gives `{st.target.id}` a list, dict or set default"
        if not ordered or _keyword_only(st.value):
            continue
        if _has_default(st.value):
            defaulted = defaulted or st.target.id
        elif defaulted is not None:
            return f"dataclass {node.name} declares `{st.target.id}` without a default after `{defaulted}` with one"
    return None


def _field_call(value: ast.expr | None) -> ast.Call | None:
    if not isinstance(value, ast.Call):
        return None
    name = getattr(value.func, "id", None) or getattr(value.func, "attr", None)
    return value if name == "field" else None


def _has_default(value: ast.expr | None) -> bool:
    """`= x` gives a default; `= field(...)` only with `default=` or `default_factory=`."""
    call = _field_call(value)
    return value is not None and (call is None or any(k.arg in ("default", "default_factory") for k in call.keywords))


def _keyword_only(value: ast.expr | None) -> bool:
    call = _field_call(value)
    return call is not None and any(
        k.arg == "kw_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords
    )


def _dataclass_kind(dec: ast.expr) -> str | None:
    """ "positional" for `@dataclass`, "keyword-only" for `@dataclass(kw_only=...)` (unless False), else None."""
    kind = "positional"
    if isinstance(dec, ast.Call):
        if any(k.arg == "kw_only" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
               for k in dec.keywords):  # fmt: skip
            kind = "keyword-only"
        dec = dec.func
    name = dec.attr if isinstance(dec, ast.Attribute) else dec.id if isinstance(dec, ast.Name) else ""
    return kind if name == "dataclass" else None
