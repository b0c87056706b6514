"""What real cells executed: the Bridge functions each recorded cell ran, as selection's first source.

Static reach (surface.py) misses what runs through values, string imports and registries: verl's
PEFT wrapper passes `self.transform` to a module walk, and LoRA is loaded by name. The cells'
own records (`bridge-functions.json`, written by every process of a real run) have no such blind
spot. `verl-e2e surface --runs RUN_DIR ...` folds them into the shipped `data/runtime.json`, keeping
which cell (level, variant, family) ran what, at which Bridge and verl commits; a change inside a
function a recorded cell ran selects that cell's level. Pure apart from reading the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from verl_e2e import safefs


@dataclass(frozen=True)
class Ran:
    """One recorded cell: who it was, what it ran on, and the functions per file it executed."""

    level: int
    variant: str
    family: str
    bridge_commit: str
    verl_commit: str
    functions: Mapping[str, frozenset[str]] = field(default_factory=dict)  # path -> qualnames

    @property
    def cell(self) -> str:
        return f"L{self.level}-{self.variant}-{self.family}"


def executed(
    records: Sequence[Ran],
    path: str,
    scopes: Sequence[str],
    module_level: bool,
    functions: Sequence[str] | None = None,
) -> list[tuple[Ran, str]]:
    """The recorded cells that ran the changed code, each with the function that shows it.

    With `functions` (the innermost def/class of each changed line, from the ASTs) a record matches
    exactly that code object: a class body that ran at import says nothing about its methods. With
    scope names only (a diff without the trees), a recorded function whose name is among them
    matches (`transform` -> `LoRA.transform`), the innermost first. A module-level change matches
    where the module itself ran (`<module>`)."""
    found = []
    for ran in records:
        names = ran.functions.get(path) or frozenset()
        if functions is not None:
            wanted = set(functions)
            matching = [q for q in names if q.replace(".<locals>", "") in wanted]
        else:
            matching = [q for q in names if q.rsplit(".", 1)[-1] in scopes and q != "<module>"]
        hit = max(matching, key=lambda q: (q.count("."), q)) if matching else None  # the innermost one
        if hit is None and module_level and "<module>" in names:
            hit = "<module>"
        if hit is not None:
            found.append((ran, hit))
    return found


def cheapest(hits: Sequence[tuple[Ran, str]], prefer: str) -> list[tuple[Ran, str]]:
    """The one recorded cell that suffices to run the changed code: the lowest level that ran it,
    on `prefer`'s family where that cell ran it.

    Code that Level 0 and Level 1 both ran (imports, model build, LoRA wrapping) is proven to run by
    Level 0; Level 1 is selected by execution only for what only it runs (the save and resume path).
    Likewise code the dense and the MoE cell both ran is generic, and code only the MoE cell ran
    keeps that cell's family."""
    ranked = sorted(hits, key=lambda h: (h[0].level, h[0].family != prefer, h[0].cell))
    return ranked[:1]


def from_run_dir(run_dir: Path) -> Ran | None:
    """A run dir's record (None where it holds no bridge-functions.json); its files are read as data."""
    try:
        cell = json.loads(safefs.read_text(run_dir / "cell.json"))
        provenance = json.loads(safefs.read_text(run_dir / "provenance.json"))
        data = json.loads(safefs.read_text(run_dir / "bridge-functions.json", 64 * 1024 * 1024))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None
    functions: dict[str, set[str]] = {}
    for item in data.get("functions") or [] if isinstance(data, dict) else []:
        if _a_record(item):
            functions.setdefault(item["file"], set()).add(item["qualname"])
    return Ran(
        level=int(cell["level"]),
        variant=str(cell["variant"]),
        family=str(cell["family"]),
        bridge_commit=str((provenance.get("bridge") or {}).get("full_commit") or ""),
        verl_commit=str((provenance.get("verl") or {}).get("full_commit") or ""),
        functions={p: frozenset(q) for p, q in functions.items()},
    )


def _a_record(item: Any) -> bool:
    """A function record as the driver writes it, of a Bridge source file (the cell's output is data)."""
    return (
        isinstance(item, dict)
        and isinstance(item.get("file"), str)
        and isinstance(item.get("qualname"), str)
        and item["file"].startswith("src/megatron/bridge/")
        and len(item["qualname"]) < 300
    )


def merge(previous: Iterable[Ran], new: Iterable[Ran]) -> list[Ran]:
    """A newer record of the same cell replaces the older one; others are kept."""
    out = {r.cell: r for r in previous}
    out |= {r.cell: r for r in new}
    return [out[k] for k in sorted(out)]


def to_json(records: Sequence[Ran]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "cells": [
            {
                "level": r.level,
                "variant": r.variant,
                "family": r.family,
                "bridge_commit": r.bridge_commit,
                "verl_commit": r.verl_commit,
                "functions": {p: sorted(q) for p, q in sorted(r.functions.items())},
            }
            for r in records
        ],
    }


def from_json(data: Mapping[str, Any]) -> list[Ran]:
    return [
        Ran(
            int(c["level"]),
            str(c["variant"]),
            str(c["family"]),
            str(c.get("bridge_commit", "")),
            str(c.get("verl_commit", "")),
            {p: frozenset(q) for p, q in (c.get("functions") or {}).items()},
        )
        for c in data.get("cells") or []
    ]


@cache
def shipped() -> tuple[Ran, ...]:
    """The records shipped with the package (`verl-e2e surface --runs` refreshes them)."""
    try:
        text = resources.files("verl_e2e").joinpath("data/runtime.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    return tuple(from_json(json.loads(text)))
