"""Did the resumed run start from the weights the saving run ended with?

Level 1's other evidence (verl's "Resuming from .../global_step_1", the step counter, the tracker file)
shows that a checkpoint was found and the loop went on, not that the trained weights came back: a
load that skips the adapters, or a save that filters them out, leaves a resumed run training fresh
adapters from step 2 with every counter right. The probe writes a fingerprint of each optimizer's
weights into `updates.json`: after every step, and before the first step of each process, how many of
its tensors are all zero and the float64 sum of every element.

LoRA's second matrix starts at zero and the first step moves it, so the count of all-zero tensors
separates "the saved adapters" from "fresh ones" whatever dtype round trip the checkpoint makes; the
sum says whether the restore was exact. A weight set with no tensor at zero (full-parameter training)
is compared by its sum alone, and only reported: a bf16 round trip legitimately changes it.

Megatron's mixed-precision optimizers step fp32 copies of the weights, and a resume loads those copies
from the optimizer's checkpoint, not from the model's: a model checkpoint that lost the adapters (an
inverted PEFT filter keeps the frozen weights instead, seen on the H100 on 2026-12-06) still resumes
with the optimizer's copies exact, while the first resumed step's forward and rollout run on fresh
adapters. So the probe also counts the all-zero tensors among the model's own weights at the
resumed process's first step: the model may hold no more of them than the optimizer's restored copies.

Pure: records in, a verdict and a sentence out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# relative difference of the weight sums under which the resumed weights are the saved ones exactly
EXACT = 1e-9

_State = tuple[int, float] | None  # (tensors all zero, float64 sum of every element), where recorded


@dataclass(frozen=True)
class Ends:
    """One optimizer's fingerprints in one phase: where its first step started, where its last ended."""

    key: tuple[int, str, int]  # (order of its first step in a process, class, trained elements in all)
    start: tuple[int, float] | None
    end: tuple[int, float] | None
    model_start: tuple[int, float] | None = None  # the model's own weights at the first step, where recorded


def restored(updates: Mapping[str, Any] | None, saved_in: str, resumed_in: str) -> tuple[bool | None, str]:
    """(True, why) when every optimizer of phase `resumed_in` started from what phase `saved_in` ended
    with; (False, why) when one started from untrained weights; (None, why) when the records cannot say."""
    saved = {e.key: e for e in _ends(updates, saved_in)}
    resumed = {e.key: e for e in _ends(updates, resumed_in)}
    pairs = [(saved[k], r) for k, r in sorted(resumed.items()) if k in saved]
    if not pairs:
        return None, f"no weight fingerprints for phases {saved_in} and {resumed_in} (a probe without them)"
    notes, decided = [], False
    for before, after in pairs:
        verdict, note = _compare(before, after)
        label = f"optimizer {after.key[0]} ({after.key[1]}, {after.key[2]:,} elements)"
        if verdict is False:
            return False, f"{label}: {note}"
        decided = decided or verdict is True
        notes.append(f"{label}: {note}")
    return (True if decided else None), "; ".join(notes)


def _compare(saved: Ends, resumed: Ends) -> tuple[bool | None, str]:
    if saved.start is None or saved.end is None or resumed.start is None:
        return None, "no fingerprint at the save or at the resume"
    (zero_init, _), (zero_saved, sum_saved), (zero_resumed, sum_resumed) = saved.start, saved.end, resumed.start
    exact = abs(sum_resumed - sum_saved) <= EXACT * max(abs(sum_saved), 1.0)
    how = "exactly" if exact else f"weight sum {sum_resumed:.9g} against {sum_saved:.9g} saved"
    if zero_init == zero_saved:
        return None, f"no tensor left zero by training to tell saved from fresh weights ({how})"
    if zero_resumed != zero_saved:
        return False, (
            f"the resumed run did not start from the saved weights: {zero_resumed} tensors were all zero at its "
            f"first step, as {zero_init} were before any training, where the saved state had {zero_saved}"
        )
    moved = zero_init - zero_saved
    # more all-zero tensors in the model than in the optimizer's restored copies: untrained weights in the
    # model. (Fewer is no sign: with data parallelism a rank's fp32 shard of a trained tensor can be all zero.)
    in_model = resumed.model_start[0] if resumed.model_start is not None else zero_resumed
    if in_model > zero_resumed:
        return False, (
            f"the model's own weights at the resumed run's first step were not the saved ones: {in_model} "
            f"tensors were all zero in the model, where the saved state had {zero_saved}; the optimizer's fp32 copy "
            f"came back ({how}), so the first resumed step's forward and rollout ran on untrained weights (the "
            "model checkpoint lacks what training moved, or its load skipped it)"
        )
    model = " and in the model itself" if resumed.model_start is not None else ""
    return True, (
        f"started from the saved weights ({moved} tensors training had moved from zero were restored{model}, {how})"
    )


def _ends(updates: Mapping[str, Any] | None, phase: str) -> list[Ends]:
    """Each optimizer of the phase, its processes (one per data-parallel rank) added up: shards of one
    weight set sit in different processes, and only their totals compare across two runs."""
    groups: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for rec in (updates or {}).get("steps") or []:
        if isinstance(rec, Mapping) and str(rec.get("phase", "")) == phase and _ints(rec, "pid", "optimizer", "step"):
            groups.setdefault((rec["pid"], rec["optimizer"]), []).append(rec)
    per: dict[tuple[int, str], list[tuple[int, _State, _State, _State]]] = {}
    for (_, index), group in sorted(groups.items()):
        recs = sorted(group, key=lambda r: int(r["step"]))
        elements = recs[0].get("elements")
        size = elements if isinstance(elements, int) and not isinstance(elements, bool) else 0
        kind = str(recs[0].get("class", "optimizer"))[:40]
        row = (size, _state(recs[0], "before"), _state(recs[-1], "after"), _state(recs[0], "before", "model_"))
        per.setdefault((index, kind), []).append(row)
    return [
        Ends(
            (index, kind, sum(r[0] for r in rows)),
            _total([r[1] for r in rows]),
            _total([r[2] for r in rows]),
            _total([r[3] for r in rows]),
        )
        for (index, kind), rows in sorted(per.items())
    ]


def _total(states: list[tuple[int, float] | None]) -> tuple[int, float] | None:
    if any(s is None for s in states):
        return None
    return sum(s[0] for s in states if s), sum(s[1] for s in states if s)


def _state(rec: Mapping[str, Any], when: str, of: str = "") -> tuple[int, float] | None:
    zero, total = rec.get(f"{of}zero_{when}"), rec.get(f"{of}sum_{when}")
    if not isinstance(zero, int) or isinstance(zero, bool) or not isinstance(total, (int, float)):
        return None
    return (zero, float(total)) if math.isfinite(total) else None


def _ints(rec: Mapping[str, Any], *keys: str) -> bool:
    return all(isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool) for k in keys)


def phases_to_compare(phases: Sequence[Any]) -> tuple[str, str] | None:
    """(the phase that saved, the phase that resumed from it) in a cell's phases, by their expectations."""
    resumed = next((p.name for p in phases if "resumed_from" in p.expect), None)
    saved = next((p.name for p in phases if p.expect.get("saves")), None)
    return (saved, resumed) if saved and resumed and saved != resumed else None
