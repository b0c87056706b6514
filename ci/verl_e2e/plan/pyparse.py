"""One parse per source text: the planner reads the same file's AST for the scopes of its changed
lines, the bridges it registers and the modules it imports. A PR touching a model directory makes the
planner read every model file at head, so parsing each once halves the cost of a large plan.

The trees are shared: callers read them and never change them (`changes.is_cosmetic_python_change`
rewrites its trees, so it parses its own).
"""

from __future__ import annotations

import ast
from functools import lru_cache


@lru_cache(maxsize=1024)
def tree(source: bytes | str) -> ast.Module | None:
    """The module's AST, or None where the source does not parse."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None
