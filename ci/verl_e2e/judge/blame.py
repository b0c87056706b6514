"""What a verdict says about the culprit: the frame, whether it is code this PR changed, whose problem
a failure with no Bridge frame is, and which Megatron-Core really ran.

`changes` is the plan's record of the PR's change, written into the run dir by the host
(`changes.json`): `lines`, the added line ranges per path (`{path: [[first, last], ...]}`), and
`functions`, the functions and classes those changes sit in (`{path: ["LoRA.transform", ...]}`). A
failing Bridge frame on a changed line is "in code this PR changed"; one inside a changed function
(the call a changed argument list feeds, say) is "in a function this PR changed". Otherwise a
changed default the failing path reads (`defaults`, see `likely`; `family_dir`, the cell's Bridge model
directory, which the judge adds) is named as the likely cause. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from verl_e2e.judge import likely
from verl_e2e.judge.culprit import BRIDGE, MCORE, VERL, where
from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.training import ADVICE

Changes = Mapping[str, Any]
CODE_CLASSES = frozenset({"model_build", "runtime", "checkpoint_save", "checkpoint_load"})
IMPORTS = frozenset({"ImportError", "ModuleNotFoundError"})


def _changed_line(frame: Mapping[str, Any], changes: Changes) -> bool:
    line = int(frame.get("line") or 0)
    ranges = (changes.get("lines") or {}).get(str(frame.get("path", ""))) or ()
    return any(len(r) == 2 and int(r[0]) <= line <= int(r[1]) for r in ranges)


def _changed_function(frame: Mapping[str, Any], changes: Changes) -> str | None:
    """The changed function (qualname) the frame is in: a traceback names the function, not its class."""
    names = (changes.get("functions") or {}).get(str(frame.get("path", ""))) or ()
    return next((q for q in names if str(q).rsplit(".", 1)[-1] == frame.get("function")), None)


def _in_change(located: Mapping[str, Any], changes: Changes) -> str | None:
    """' (in code this PR changed: ...)' or ' (in a function this PR changed: ...)' for a Bridge frame
    on the failing path that is the PR's own; None when none is."""
    bridge = list(reversed(located.get("bridge_frames") or []))
    on_line = next((f for f in bridge if _changed_line(f, changes)), None)
    if on_line is not None:
        return f" (in code this PR changed: `{on_line['path']}:{on_line['line']}` in `{on_line['function']}`)"
    for f in bridge:
        qualname = _changed_function(f, changes)
        if qualname:
            return f" (in a function this PR changed: `{qualname}` at `{f['path']}:{f['line']}`)"
    return None


def frames_phrase(frames: list[dict[str, Any]], changes: Changes | None) -> str | None:
    """`_in_change` for frames recorded outside a log (the driver's import check), innermost last."""
    return _in_change({"bridge_frames": frames}, changes) if changes else None


def likely_cause(ev: Evidence | None, changes: Changes | None) -> likely.Likely | None:
    """A default this PR changed that the failing path reads, where the failing frame is not the PR's."""
    located = ev.culprit if ev is not None else None
    if not located or not changes or _in_change(located, changes) is not None:
        return None
    return likely.find(ev, changes.get("defaults") or [], changes.get("family_dir"))


def culprit_phrase(ev: Evidence | None, changes: Changes | None) -> str:
    """' (at ...)' for a headline: the culprit frame and, where known, whether the PR changed it; a
    changed default the failing path reads goes before it as the likely cause."""
    located = ev.culprit if ev is not None else None
    if not located:
        return ""
    culprit = located["culprit"]
    inside = _in_change(located, changes) if changes else None
    if inside is not None:
        return inside
    found = likely_cause(ev, changes)
    lead = likely.phrase(found) if found is not None else ""
    if culprit["owner"] == BRIDGE:
        tail = "; not in code this PR changed" if changes else ""
        return f"{lead} (at {where(culprit)}{tail})"
    return f"{lead} ({located['chain']})"


def likely_follow_up(ev: Evidence | None, changes: Changes | None) -> str | None:
    """The follow-up that sends the author to the changed default named in the headline."""
    found = likely_cause(ev, changes)
    return likely.follow_up(found) if found is not None else None


def megatron_source(provenance: Mapping[str, Any]) -> str:
    """Which Megatron-Core the cell ran: the PR's submodule at its commit, or the installed package."""
    chosen = provenance.get("megatron_lm")
    core = (provenance.get("environment") or {}).get("megatron_core") or {}
    version = core.get("version") if isinstance(core, Mapping) else None
    submodule = provenance.get("megatron_lm_commit")
    if chosen == "installed":
        return f"megatron-core {version or '(version not recorded)'} installed in the environment"
    if chosen:
        at = f" at {str(submodule)[:12]}" if submodule else ""
        if str(chosen).rstrip("/").endswith("3rdparty/Megatron-LM"):
            return f"the PR's 3rdparty/Megatron-LM submodule{at}"
        return f"Megatron-LM from {chosen}"
    return "a Megatron-Core the run dir does not name"


def megatron_limitation(provenance: Mapping[str, Any]) -> str | None:
    """A limitation where the PR's own pinned Megatron-LM did not run."""
    if provenance.get("megatron_lm") == "installed":
        return (
            f"Megatron-Core: {megatron_source(provenance)}, not the PR's pinned 3rdparty/Megatron-LM "
            "submodule (the change was not tested against the Megatron-Core it pins)"
        )
    return None


def compatibility_follow_up(ev: Evidence | None, provenance: Mapping[str, Any]) -> str | None:
    """A failure inside verl or Megatron-Core with no Bridge frame on the path: whose problem it is."""
    located = ev.culprit if ev is not None else None
    if ev is None or not located or BRIDGE in located["owners"]:
        return None
    if ev.failure_class not in CODE_CLASSES or (ev.exception or {}).get("type") in IMPORTS:
        return None  # an OOM, a collective or an import names its own cause; versions of verl are not it
    if located["culprit"]["owner"] not in (VERL, MCORE):
        return None
    verl = provenance.get("verl") or {}
    verl_at = str(verl.get("commit") or "(commit not recorded)") if isinstance(verl, Mapping) else "?"
    return (
        f"reads as a verl/Megatron-Core compatibility problem, no Bridge frame on the failing path "
        f"({located['chain']}): verl {verl_at} with {megatron_source(provenance)}; if the merge base passes "
        "this cell, a Bridge value this PR hands to verl is still the suspect; else run with a Megatron-Core "
        "this verl supports (--megatron-lm installed) or move the verl pin"
    )


# an export mapping (Megatron -> HF names, splits, transposes): what the rollout is sent, not what the trainer runs
_MAPPING = re.compile(r"conversion/|param_mapping|Mapping\.|megatron_to_hf|hf_to_megatron|export", re.IGNORECASE)


def rollout_advice(failure_class: str, executed: Sequence[str], named: str, follow_ups: Sequence[str]) -> list[str]:
    """A rollout-vs-trainer disagreement after a change to model code, not to an export mapping, points
    at the trainer's forward: the rollout engine runs its own model code on the weights it is sent, so a
    forward that drops an input (Qwen2.5-VL's image embeddings, Qwen3-VL's deepstack features, seen on the
    H100 on 2026-12-06) shows up as that disagreement with every weight in place. The generic advice
    (check the export mappings) is replaced where no changed function this cell ran is a mapping."""
    generic = ADVICE["rollout_weights"]
    if failure_class != "rollout_weights" or not executed or any(_MAPPING.search(e) for e in executed):
        return list(follow_ups)
    forward = (
        f"the trainer and the rollout engine scored the same tokens differently, and the changed code this cell "
        f"ran is model code only the trainer runs ({named}), not an export mapping: the rollout runs its own "
        "model on the weights it is sent, so a forward that drops an input or no longer adds a feature shows "
        "up here; compare that code with the HF model's forward"
    )
    return [forward if f == generic else f for f in follow_ups]
