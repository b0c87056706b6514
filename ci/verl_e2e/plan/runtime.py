"""What real cells executed: the Bridge functions each recorded cell ran, as selection's first source.

Static reach (surface.py) misses what runs through values, string imports and registries: verl's
PEFT wrapper passes `self.transform` to a module walk, and LoRA is loaded by name. The cells'
own records (`bridge-functions.json`, written by every process of a real run) have no such blind
spot. `verl-e2e surface --runs RUN_DIR ...` folds them into the shipped `data/runtime.json`, keeping
which cell (level, variant, family) ran what, at which Bridge and verl commits; a change inside a
function a recorded cell ran selects that cell's level. Pure apart from reading the files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from verl_e2e import safefs

_HEX = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Ran:
    """One recorded cell: who it was, what it ran on, and the functions per file it executed."""

    level: int
    variant: str
    family: str
    bridge_commit: str
    verl_commit: str
    functions: Mapping[str, frozenset[str]] = field(default_factory=dict)  # path -> qualnames
    # path -> the lines the cell ran (any phase), and path -> the git blob id of the file it ran them in:
    # line numbers are compared only with a change to that same base file
    lines: Mapping[str, frozenset[int]] = field(default_factory=dict)
    blobs: Mapping[str, str] = field(default_factory=dict)

    def ran_lines(self, path: str, blob: str | None) -> frozenset[int] | None:
        """The lines this cell ran in `path` when its record is of the base file `blob`, else None."""
        recorded = self.blobs.get(path)
        if blob is None or len(blob) < 7 or recorded is None or not recorded.startswith(blob):
            return None
        return self.lines.get(path)

    @property
    def cell(self) -> str:
        return f"L{self.level}-{self.variant}-{self.family}"


def every_line_ran(records: Sequence[Ran], level: int, path: str, blob: str | None, lines: Sequence[int]) -> bool:
    """Whether one recorded cell of `level` with line records of this very base file (`blob`) ran every one
    of `lines`: what a diff alone can prove about the change's code without knowing its functions."""
    wanted = frozenset(lines)
    return bool(wanted) and any(
        r.level == level and (got := r.ran_lines(path, blob)) is not None and wanted <= got for r in records
    )


def executed(
    records: Sequence[Ran],
    path: str,
    scopes: Sequence[str],
    module_level: bool,
    functions: Sequence[str] | None = None,
    *,
    blob: str | None = None,
    base_lines: Sequence[int] | None = None,
    methods_only: Sequence[str] = (),
    unnamed_methods: Sequence[str] = (),
) -> list[tuple[Ran, str]]:
    """The recorded cells that ran the changed code, each with the function that shows it.

    With `functions` (the innermost def/class of each changed line, from the ASTs) a record matches
    exactly that code object: a class body that ran at import says nothing about its methods. With
    scope names only (a diff without the trees), a recorded function whose name is among them
    matches (`transform` -> `LoRA.transform`), the innermost first, except the bodies of classes named
    in `methods_only` (no changed line is in them); any recorded method of a class in `unnamed_methods`
    matches (a change sits in one git did not name: methods.py). A module-level change matches where
    the module itself ran (`<module>`).

    Where a record has the lines it ran in the same base file (`blob`), a cell that ran none of the
    change's base lines (`base_lines`, anchors.py) does not match, whatever functions it ran: a branch
    of a function Level 0 calls is not proven by Level 0."""
    found = []
    for ran in records:
        ran_lines = ran.ran_lines(path, blob) if base_lines is not None else None
        if ran_lines is not None and not ran_lines.intersection(base_lines or ()):
            continue  # the cell ran this very file and none of the changed lines
        names = ran.functions.get(path) or frozenset()
        if functions is not None:
            wanted = set(functions)
            matching = [q for q in names if q.replace(".<locals>", "") in wanted]
        else:
            matching = [q for q in names if _named(q, scopes, methods_only, unnamed_methods)]
        hit = max(matching, key=lambda q: (q.count("."), q)) if matching else None  # the innermost one
        if hit is None and module_level and "<module>" in names:
            hit = "<module>"
        if hit is not None:
            found.append((ran, hit))
    return found


def _named(qualname: str, scopes: Sequence[str], methods_only: Sequence[str], unnamed: Sequence[str]) -> bool:
    """A recorded function matches a diff's scope names (a class body only where a change is in it)."""
    if qualname == "<module>" or qualname in methods_only:
        return False
    return qualname.rsplit(".", 1)[-1] in scopes or ("." in qualname and qualname.split(".", 1)[0] in unnamed)


def cheapest(hits: Sequence[tuple[Ran, str]], prefer: str) -> list[tuple[Ran, str]]:
    """The one recorded cell that suffices to run the changed code: the lowest level that ran it,
    on `prefer`'s family where that cell ran it.

    Code that Level 0 and Level 1 both ran (imports, model build, LoRA wrapping) is proven to run by
    Level 0; Level 1 is selected by execution only for what only it runs (the save and resume path).
    Likewise code the dense and the MoE cell both ran is generic, and code only the MoE cell ran
    keeps that cell's family."""
    ranked = sorted(hits, key=lambda h: (h[0].level, h[0].family != prefer, h[0].cell))
    return ranked[:1]


def importing(records: Sequence[Ran], path: str, prefer: str) -> tuple[int, str]:
    """(level, family) of the cheapest recorded cell that imported `path` (ran its module code): where a
    module that no longer imports fails first. Bridge's checkpointing is imported only when verl saves or
    resumes (Level 1); what `import megatron.bridge` pulls in fails at Level 0, as does a module no record
    knows (Level 0 on `prefer`)."""
    found = cheapest([(r, "<module>") for r in records if "<module>" in r.functions.get(path, ())], prefer)
    return (found[0][0].level, found[0][0].family) if found else (0, prefer)


def blob_id(data: bytes) -> str:
    """Git's blob id of a file's bytes (`git hash-object`), what line records are keyed by."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def from_run_dir(run_dir: Path, tree: Path | None = None) -> Ran | None:
    """A run dir's record (None where it holds no bridge-functions.json); its files are read as data.
    `tree`: the Bridge checkout the run ran, for records made before the driver wrote blob ids."""
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
    if isinstance(data, dict) and tree is not None and data.get("lines") and not data.get("blobs"):
        data["blobs"] = _tree_blobs(tree, data["lines"])
    lines, blobs = _line_records(data) if isinstance(data, dict) else ({}, {})
    return Ran(
        level=int(cell["level"]),
        variant=str(cell["variant"]),
        family=str(cell["family"]),
        bridge_commit=str((provenance.get("bridge") or {}).get("full_commit") or ""),
        verl_commit=str((provenance.get("verl") or {}).get("full_commit") or ""),
        functions={p: frozenset(q) for p, q in functions.items()},
        lines=lines,
        blobs=blobs,
    )


def _line_records(data: Mapping[str, Any]) -> tuple[dict[str, frozenset[int]], dict[str, str]]:
    """The lines each Bridge file ran in any phase (`{phase: {file: [[first, last], ...]}}`) and the
    files' blob ids; kept only for files whose blob is recorded (no blob, no line comparison)."""
    blobs = {
        f: b
        for f, b in (data.get("blobs") or {}).items()
        if isinstance(f, str) and f.startswith("src/megatron/bridge/") and isinstance(b, str) and _HEX.fullmatch(b)
    }
    ran: dict[str, set[int]] = {}
    for per_file in (data.get("lines") or {}).values():
        for f, spans in per_file.items() if isinstance(per_file, dict) else ():
            if f in blobs and isinstance(spans, list):
                ran.setdefault(f, set()).update(_expand(spans))
    return {f: frozenset(n) for f, n in ran.items()}, {f: blobs[f] for f in ran}


def _tree_blobs(tree: Path, lines: Any) -> dict[str, str]:
    files = {f for per_file in lines.values() if isinstance(per_file, dict) for f in per_file if isinstance(f, str)}
    out = {}
    for file in sorted(files):
        target = tree / file
        if file.startswith("src/megatron/bridge/") and ".." not in Path(file).parts and target.is_file():
            out[file] = blob_id(target.read_bytes())
    return out


def _expand(spans: Sequence[Any]) -> set[int]:
    out: set[int] = set()
    for span in spans[:100_000]:
        if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span):
            first, last = span
            if 0 < first <= last <= first + 100_000:
                out.update(range(first, last + 1))
    return out


def spans(lines: frozenset[int]) -> str:
    """Line numbers as compact text, `1-4,9,12-20` (how runtime.json stores them and plans name lines)."""
    out: list[list[int]] = []
    for n in sorted(lines):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def from_spans(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out.update(range(int(first), int(last or first) + 1))
    return frozenset(out)


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
                **({"lines": {p: spans(n) for p, n in sorted(r.lines.items())}} if r.lines else {}),
                **({"blobs": dict(sorted(r.blobs.items()))} if r.blobs else {}),
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
            {p: from_spans(s) for p, s in (c.get("lines") or {}).items()},
            dict(c.get("blobs") or {}),
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
