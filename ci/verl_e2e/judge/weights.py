"""Checkpoint weights Bridge could not find: evidence, a limitation, and a failure when this PR named them.

Bridge's HF import skips a mapped parameter whose HF name is not in the checkpoint, with a warning
("Can't find model.layers.0.mlp.down_proj.weight in hf_keys"), and the Megatron parameter keeps its
initial values: the run goes on and passes while training a model that is not the checkpoint. Every
skipped name becomes a limitation. When a skipped name matches a dotted name this PR's added lines
write (the plan's `changes.names`, e.g. a mapping's "model.layers.*.mlp.down_proj.weights"; `*`
matches one name part), the change caused it: the cell fails with a `weights_loaded` check naming
both. A name skipped without the change's involvement (a tied `lm_head.weight` the checkpoint leaves
out) stays a limitation, so a pre-existing gap never fails an unrelated PR. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from verl_e2e.judge.checks import Check


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile("".join("[^.]+" if part == "*" else re.escape(part) for part in re.split(r"(\*)", name)))


def from_change(skipped: Iterable[str], changes: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """(skipped name, path, changed name) for each skipped weight a name on the PR's added lines matches."""
    named: Mapping[str, Sequence[str]] = (changes or {}).get("names") or {}
    patterns = [(path, n, _pattern(n)) for path, names in named.items() for n in names if "." in n]
    return [(s, path, n) for s in skipped for path, n, rx in patterns if rx.fullmatch(s)]


def check(skipped: Sequence[str], changes: Mapping[str, Any] | None) -> Check | None:
    """A failing `weights_loaded` check when this PR's names were skipped, else None (no check shown)."""
    hits = from_change(skipped, changes)
    if not hits:
        return None
    name, path, changed = hits[0]
    more = f" and {len(hits) - 1} more" if len(hits) > 1 else ""
    detail = (
        f"Bridge did not load `{name}`{more}: the checkpoint has no such weight, and the name comes from "
        f'this PR\'s `{path}` ("{changed}"); the parameter trained from its initial values'
    )
    return Check("weights_loaded", "Fail", detail)


FOLLOW_UP = (
    "check the HF names this PR's mapping writes against the checkpoint's weight names (its safetensors "
    "index): Bridge skips a name it cannot find and the run trains an initialised parameter instead"
)


def limitation(skipped: Sequence[str]) -> str | None:
    if not skipped:
        return None
    shown = ", ".join(skipped[:5]) + (f" and {len(skipped) - 5} more" if len(skipped) > 5 else "")
    return (
        f"Bridge could not find {len(skipped)} mapped weight(s) in the HF checkpoint and left them at their "
        f"initial values: {shown}"
    )
