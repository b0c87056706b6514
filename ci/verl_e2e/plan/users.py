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
from verl_e2e.plan.registry import SHARED, architectures_by_file
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


def symbols(source: bytes | None, lines: Iterable[int]) -> tuple[str, ...]:
    """The top-level defs/classes `lines` are in, and the words on the module-level ones."""
    tree = pyparse.tree(source) if source is not None else None
    if tree is None or source is None:
        return ()
    text = source.decode("utf-8", "replace").splitlines()
    found: dict[str, None] = {}
    for line in lines:
        node = next((n for n in tree.body if n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = None
        elif node is not None and not isinstance(node, (ast.Import, ast.ImportFrom)) and line <= len(text):
            code = text[line - 1].split("#", 1)[0]  # a comment names nothing the code uses
            found |= dict.fromkeys(w for w in _WORD.findall(code) if w not in _COMMON)
    return tuple(list(found)[:MAX_SYMBOLS])


def _named(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text) is not None


def _used_at_home(source: bytes | None, names: tuple[str, ...]) -> bool:
    """Whether the changed file names one of its own changed definitions outside that definition."""
    tree = pyparse.tree(source) if source is not None else None
    if tree is None or source is None:
        return False
    lines = source.decode("utf-8", "replace").splitlines()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in names:
            first, last = node.lineno, node.end_lineno or node.lineno
            if any(_named(text, node.name) for i, text in enumerate(lines, 1) if not first <= i <= last):
                return True
    return False


def architectures(
    path: str, names: tuple[str, ...], source: bytes | None, models: Mapping[str, bytes]
) -> tuple[str, ...] | None:
    """The architectures of the model files that name `names`; None when shared code uses them too
    (the changed file outside a definition's own lines, or another shared file) or nothing does."""
    if not names:
        return None
    if _used_at_home(source, names):
        return None  # the file itself builds on the changed definition
    users = []
    for other, blob in models.items():
        if other == path or other.endswith("__init__.py"):
            continue
        text = blob.decode("utf-8", "replace")
        if not any(_named(text, w) for w in names):
            continue
        if shared(other):
            return None
        users.append(other)
    if not users:
        return None
    archs = architectures_by_file(models, only=users)
    return tuple(sorted({a for u in users for a in archs.get(u, ())})) or None
