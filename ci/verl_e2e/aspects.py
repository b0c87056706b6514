"""Aspects: what the touched code is about (MoE, MTP, vision, quantization, parallel layout, state, numerics).

Path rules say *where* a change is; aspects say *what* it touches, so a PEFT change that broadcasts
shared-expert adapters across EP ranks gets the expert-parallel and parallelism levels although its path
says only "peft". Each aspect in matrix.yaml is a regular expression searched in a file's changed lines
and in the names of the functions/classes the change sits in (`diffs.py`, `scopes.py`), for files on
verl's surface only. Matching identifiers, not prose: comment lines are left out, so a docstring that
mentions "pipeline" selects nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_e2e.errors import ConfigError
from verl_e2e.globs import PathSet

# the code verl runs to build, convert and adapt the model (Bridge's training package is its own loop)
DEFAULT_PATHS = ["src/megatron/bridge/models/**", "src/megatron/bridge/peft/**", "src/megatron/bridge/utils/**"]
KINDS = ("all", "moe", "vlm", "mtp", "quant", "custom")
_STRING = re.compile(r"""("|')(?:\\.|(?!\1).)*\1""")
_COMMENT = re.compile(r"^\s*(#|\"\"\"|'''|\*|//)")


@dataclass(frozen=True)
class Aspect:
    """One aspect: its pattern, the levels it selects and the variant kind those levels run."""

    name: str
    why: str
    pattern: re.Pattern[str]
    levels: frozenset[int]
    kind: str = "all"  # which variants of the selected levels apply: "all" or one of KINDS
    paths: PathSet | None = None  # limit to these files (default: every file on verl's surface)
    strings: bool = True  # False: string literals are blanked before matching (names in tables, messages)


def build_aspects(nodes: Sequence[Mapping[str, Any]], where: str) -> tuple[Aspect, ...]:
    """matrix.yaml `aspects:` -> Aspects (the schema has checked types; the patterns compile here)."""
    out = []
    for i, node in enumerate(nodes):
        try:
            pattern = re.compile(node["pattern"])
        except re.error as exc:
            raise ConfigError(f"{where}[{i}].pattern: not a regular expression ({exc}); fix the pattern") from None
        paths = PathSet.parse(node.get("paths", DEFAULT_PATHS), f"{where}[{i}].paths")
        levels, kind = frozenset(node["levels"]), node.get("kind", "all")
        out.append(Aspect(node["name"], node["why"], pattern, levels, kind, paths, node.get("strings", True)))
    return tuple(out)


def code_lines(lines: Iterable[str]) -> list[str]:
    """Changed lines without comment-only lines and without the text of trailing comments."""
    out = []
    for line in lines:
        if not line.strip() or _COMMENT.match(line):
            continue
        out.append(line.split("  #", 1)[0])
    return out


@dataclass(frozen=True)
class Hit:
    aspect: Aspect
    term: str  # the first text the pattern matched, quoted in the plan
    where: str  # "changed lines" or "scope NAME"


def find(aspects: Sequence[Aspect], path: str, lines: Iterable[str], scopes: Sequence[str]) -> list[Hit]:
    """Every aspect whose pattern matches the file's changed code or the names of its enclosing scopes."""
    code = code_lines(lines)
    bare = [_STRING.sub('""', line) for line in code]
    hits = []
    for aspect in aspects:
        if aspect.paths is not None and not aspect.paths.matches(path):
            continue
        hit = _first(aspect.pattern, code if aspect.strings else bare, "changed lines") or _first(
            aspect.pattern, scopes, "in {name}", per_item=True
        )
        if hit is not None:
            hits.append(Hit(aspect, hit[0], hit[1]))
    return hits


def _first(
    pattern: re.Pattern[str], texts: Iterable[str], where: str, per_item: bool = False
) -> tuple[str, str] | None:
    for text in texts:
        m = pattern.search(text)
        if m:
            return m.group(0), where.format(name=text) if per_item else where
    return None
