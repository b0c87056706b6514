"""Which Megatron-Core a cell runs: the PR's pinned submodule unless it is known not to run with verl.

matrix.yaml's `compatibility` records, per verl commit, the Megatron source known to run with it
(`runs_with`, e.g. `installed 0.19.2`), the fallback a cell uses instead (`fallback: installed`), and
the Megatron-LM commits seen failing outside Bridge's code (`incompatible`, with what was seen and
where). With `--megatron-lm auto` (the default) a cell runs the Bridge checkout's pinned submodule,
unless that commit is on the list for the verl the cell runs: then every PR would fail the same way
and say nothing about its own change, so the cell runs the fallback and says so as a limitation. A
PR that moves the pin itself runs what it pins: that is the change under test. The scheduled run
probes the pinned combination on the base branch and is where the record is kept current.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUBMODULE = "3rdparty/Megatron-LM"
KNOWN = "known incompatibility: "  # how the limitation starts; the report shows it once at the top


@dataclass(frozen=True)
class Choice:
    megatron_lm: str  # submodule | installed
    limitation: str | None = None  # what the verdict says about the choice (None: the PR's own pin ran)


def pinned(bridge: Path) -> str | None:
    """The Megatron-LM commit the checkout pins (its gitlink at HEAD), read without running PR code."""
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(bridge), "ls-tree", "HEAD", SUBMODULE],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = proc.stdout.split()
    return fields[2] if proc.returncode == 0 and len(fields) >= 3 and fields[1] == "commit" else None


def upstream(checkout: Path) -> str | None:
    """The upstream commit a copied tree stands for: a tag `upstream-<full sha>` on its HEAD (an offline
    node's verl is a one-commit copy of an upstream commit, whose own SHA names nothing)."""
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(checkout), "tag", "--points-at", "HEAD", "upstream-*"],
        capture_output=True,
        text=True,
        check=False,
    )
    tags = [t.removeprefix("upstream-") for t in proc.stdout.split()] if proc.returncode == 0 else []
    return next((t for t in tags if len(t) == 40 and all(c in "0123456789abcdef" for c in t)), None)


def record_for(raw: Mapping[str, Any], verl: str) -> Mapping[str, Any] | None:
    """matrix.yaml's compatibility entry of this verl commit (full or abbreviated SHA)."""
    for entry in raw.get("compatibility") or []:
        known = str(entry.get("verl", ""))
        if known and verl and (known.startswith(verl) or verl.startswith(known)):
            return entry  # type: ignore[no-any-return]
    return None


def choose(raw: Mapping[str, Any], verl: str, pin: str | None, pins_changed: Sequence[str] = ()) -> Choice:
    """The Megatron source of a cell under `--megatron-lm auto`."""
    if SUBMODULE in pins_changed:
        return Choice("submodule")  # the PR moves the pin: what it pins is the change under test
    entry = record_for(raw, verl)
    if entry is None or pin is None:
        return Choice("submodule")
    bad = next((x for x in entry.get("incompatible") or [] if str(x.get("megatron_lm", "")).startswith(pin)), None)
    if bad is None:
        return Choice("submodule")
    fallback = str(entry.get("fallback", "installed"))
    runs_with = str(entry.get("runs_with", fallback))
    seen = " ".join(str(bad.get("seen", "")).split())
    limitation = (
        f"{KNOWN}verl {verl[:7]} does not run with the pinned Megatron-LM {pin[:7]}, outside Bridge's code "
        f"(pre-existing on the base branch{': ' + seen if seen else ''}); the cell ran {runs_with} instead, so "
        "the PR's pinned Megatron-LM was not tested (matrix.yaml compatibility)"
    )
    return Choice(fallback if fallback in ("installed", "submodule") else "installed", limitation)
