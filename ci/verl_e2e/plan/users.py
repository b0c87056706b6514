"""Shared code only some architectures use: which model files name what a change touches.

A mapping class in `param_mapping.py` that only the Qwen3.5 bridges build, or an activation entry
only Gemma's providers name, sits in code every model imports, yet the default family never runs it.
With the PR's tree (`plan --repo`), the symbols a change touches (the top-level classes and functions
its lines are in; the names and string keys on its module-level lines) are looked up in every model
file at head. When only model directories' files name them, and no shared code does, the change
serves those files' architectures, and the plan runs it on one of their families.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from collections.abc import Iterable, Mapping

from verl_e2e.plan import pyparse
from verl_e2e.plan.registry import SHARED, architectures_by_file, class_registrations
from verl_e2e.plan.surface import MODELS

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{4,}")
_COMMON = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {"torch", "self", "config", "megatron", "weight"}
MAX_SYMBOLS = 12


def shared(path: str) -> bool:
    """Code every model may build on: models/*.py, the shared model directories and utils/."""
    if path.startswith("src/megatron/bridge/utils/"):
        return True
    rest = path.removeprefix(MODELS)
    return path.startswith(MODELS) and ("/" not in rest or rest.split("/", 1)[0] in SHARED)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _inside(body: Iterable[ast.stmt], line: int) -> ast.stmt | None:
    return next((n for n in body if n.lineno <= line <= (n.end_lineno or n.lineno)), None)


def _distinct(name: str) -> bool:
    """A method name worth looking up in model files: not a dunder, not a short common word."""
    return not name.startswith("__") and _WORD.fullmatch(name) is not None and name not in _COMMON


def symbols(source: bytes | None, lines: Iterable[int]) -> tuple[str, ...]:
    """The top-level defs/classes `lines` are in (`Class.method` for a line in a method), and the words
    on the module-level ones."""
    tree = pyparse.tree(source) if source is not None else None
    if tree is None or source is None:
        return ()
    text = source.decode("utf-8", "replace").splitlines()
    found: dict[str, None] = {}
    for line in lines:
        node = _inside(tree.body, line)
        method = _inside(node.body, line) if isinstance(node, ast.ClassDef) else None
        if isinstance(node, ast.ClassDef) and isinstance(method, _DEFS) and _distinct(method.name):
            found[f"{node.name}.{method.name}"] = None  # the method first, then its class (`architectures`)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = None
        elif node is not None and not isinstance(node, (ast.Import, ast.ImportFrom)) and line <= len(text):
            code = text[line - 1].split("#", 1)[0]  # a comment names nothing the code uses
            found |= dict.fromkeys(w for w in _WORD.findall(code) if w not in _COMMON)
    return tuple(list(found)[:MAX_SYMBOLS])


def _named(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text) is not None


def _qualname(tree: ast.Module, line: int) -> str | None:
    """`Class.method` or `function` whose body holds the line; None for module or class-body code."""
    node = _inside(tree.body, line)
    if isinstance(node, ast.ClassDef):
        method = _inside(node.body, line)
        return f"{node.name}.{method.name}" if isinstance(method, _DEFS) else None
    return node.name if isinstance(node, _DEFS) else None


def _homes(source: bytes | None, names: tuple[str, ...]) -> set[str | None]:
    """Where the changed file names its own changed definitions (a top-level one, or a method) outside
    them: `Class.method` or `function`, None for module or class-body code."""
    tree = pyparse.tree(source) if source is not None else None
    if tree is None or source is None:
        return set()
    # an import names another module's definition, even under the same name (`HeterogeneousTransformerConfig
    # as MCoreHeterogeneousTransformerConfig` beside Bridge's own class of that name)
    imports = {
        i
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for i in range(n.lineno, (n.end_lineno or n.lineno) + 1)
    }
    defs = [n for n in tree.body if isinstance(n, (*_DEFS, ast.ClassDef))]
    defs += [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, _DEFS)]
    # the definitions looked up name each other (a subclass's base): no use of the file's own
    spans = {i for n in defs if n.name in names for i in range(n.lineno, (n.end_lineno or n.lineno) + 1)}
    # code that names them, not a comment or a docstring that mentions one (`mirrors GDNLinearMapping`)
    wanted = {n.name for n in defs if n.name in names}
    named = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.expr) and _word(n) in wanted}
    return {_qualname(tree, i) for i in sorted(named) if i not in spans and i not in imports}


def _word(node: ast.AST) -> str | None:
    """The name a node uses: a name, an attribute, or a string that is exactly a name (`getattr`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def architectures(
    path: str,
    names: tuple[str, ...],
    source: bytes | None,
    models: Mapping[str, bytes],
    ran: frozenset[str] | None = None,
) -> tuple[str, ...] | None:
    """The architectures of the model files that name `names`; None when shared code uses them too
    (the changed file outside a definition's own lines, or another shared file) or nothing does.

    A changed method (`Class.method`) is looked up by its own name first: a base-class method only
    Llama's bridge calls, through `super()`, serves Llama, though every bridge names the base class.
    Where the methods say nothing, their classes are (a mapping class only Gemma's bridge builds)."""
    text = source.decode("utf-8", "replace") if source is not None else ""
    # a method several classes of the file define (`hf_to_megatron` of every mapping) is an interface:
    # its name says nothing about who uses this class's version, so the class is looked up instead
    methods = tuple(dict.fromkeys(m for n in names if "." in n and own_method(m := n.rsplit(".", 1)[1], text)))
    found = _architectures(path, methods, source, models, ran) if methods else ()
    if found != ():
        return found  # the methods' users, or None: shared code calls them
    top = tuple(dict.fromkeys(n.split(".", 1)[0] for n in names))
    return _architectures(path, (*top, *subclasses(source, top)), source, models, ran) or None


def subclasses(source: bytes | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The classes of the same file that derive from `names`, at any depth: a base mapping no model file
    names (`ChunkedMapping`) runs where its subclasses do (`MambaConv1dMapping` in the Mamba bridges)."""
    tree = pyparse.tree(source) if source is not None else None
    classes = [n for n in (tree.body if tree is not None else []) if isinstance(n, ast.ClassDef)]
    found: dict[str, None] = {}
    grew = True
    while grew:
        grew = False
        for c in classes:
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in c.bases}
            if c.name not in found and c.name not in names and bases & {*names, *found}:
                found[c.name] = None
                grew = True
    return tuple(found)


def own_method(name: str, text: str) -> bool:
    """Whether one class alone in the file defines the method (not an interface every class overrides)."""
    return len(re.findall(rf"\bdef {re.escape(name)}\(", text)) < 2


def _architectures(  # noqa: PLR0917 - one lookup, recursive through the file's own callers
    path: str,
    names: tuple[str, ...],
    source: bytes | None,
    models: Mapping[str, bytes],
    ran: frozenset[str] | None,
    depth: int = 0,
) -> tuple[str, ...] | None:
    """Like `architectures`, for plain names; () when no other file names them at all."""
    if not names:
        return ()
    # the file itself builds on the changed definition; with `ran` (the functions of this file the recorded
    # cells executed), a use inside a function no cell ran is no use: a builder path verl never takes does
    # not make a method every model's
    uses = _homes(source, names)
    if any(ran is None or where is None or where in ran for where in uses):
        return None
    # used at home only by functions no cell ran (a helper only QKVGMapping calls): their users are its users
    homes = tuple(sorted({h.split(".", 1)[0] for h in uses if h is not None} - set(names)))
    users = []
    for other, blob in models.items():
        if other == path or other.endswith("__init__.py"):
            continue
        text = blob.decode("utf-8", "replace")
        if not any(_named(text, w) for w in names):
            continue
        if shared(other):
            if _shared_use(blob, names):
                return None
            continue  # shared code that only tells types apart: the objects are the model files' to build
        users.append(other)
    if not users:
        return _architectures(path, homes, source, models, ran, depth + 1) if homes and depth < 2 else ()
    archs = architectures_by_file(models, only=users)
    return tuple(sorted({a for u in users for a in _by_class(models[u], names) or archs.get(u, [])})) or None


_TYPE_TESTS = frozenset({"isinstance", "issubclass"})


def _shared_use(blob: bytes, names: tuple[str, ...]) -> bool:
    """Whether a shared file uses one of `names` for more than telling types apart. A mention inside an
    `isinstance` or `issubclass` test (quantised export asking whether a mapping is a QKVGMapping) runs on
    an object a model file built, so those model files stay its users; imports, comments and docstrings
    run nothing. Definitions, names, attributes and strings equal to a name still count."""
    tree = pyparse.tree(blob)
    if tree is None:
        text = blob.decode("utf-8", "replace")
        return any(_named(text, w) for w in names)
    wanted = set(names)
    tested = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _TYPE_TESTS
        for arg in node.args[1:]
        for inner in ast.walk(arg)
    }
    for node in ast.walk(tree):
        if id(node) in tested:
            continue
        named = node.name if isinstance(node, (*_DEFS, ast.ClassDef)) else _word(node)
        if named in wanted:
            return True
    return False


def _by_class(source: bytes, names: tuple[str, ...]) -> list[str]:
    """The architectures of the registered bridge classes whose own lines name `names`, where a bridge
    file registers several (`moe_experts_stored_packed` in Qwen3.5's MoE bridge, not its dense one);
    [] where a name sits outside them (module code every class of the file shares) or none registers."""
    spans = class_registrations(source)
    if len(spans) < 2:
        return []
    lines = source.decode("utf-8", "replace").splitlines()
    named = [n for n, text in enumerate(lines, start=1) if any(_named(text, w) for w in names)]
    named = [n for n in named if not re.match(r"\s*(from|import)\b", lines[n - 1])]
    inside = [next((archs for (first, last), archs in spans.items() if first <= n <= last), None) for n in named]
    if not inside or any(found is None for found in inside):
        return []
    return [a for found in inside if found is not None for a in found]
