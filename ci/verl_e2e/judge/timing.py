"""Where a cell's time went: the driver's own set-up steps, each phase's start-up, and its PPO steps.

A Level 0 cell on a tiny model spends most of its wall time before the first step (Ray, vLLM, three
Megatron models built through Bridge), and a PR author waiting on it wants to know that the step
itself is not the slow part. The driver stamps each of its steps (`provenance.json` "steps"), the
phases record their wall time, and verl logs `timing_s/step` and its parts per step; the difference
between a phase's wall time and the sum of its steps is its start-up and shutdown. Within a step, what no
timer of verl's holds (the step less its top-level timers) is mostly start-up in disguise: verl starts its
agent-loop and reward workers inside the first step (18 of 37 s on the tiny Qwen2 alone, H100).

Pure: records in, a small dict out (part of verdict.json).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.rundir import PhaseRun

PARTS = ("timing_s/gen", "timing_s/update_actor", "timing_s/update_weights")

# Start-up stages, each ended by one of the driver's stamps (containers/milestones.py): the stage runs
# from the previous stamp that was seen (or the phase's start) to its own.
STAGES = (
    ("ray_started", "launch", "bash wrapper, Hydra and a Ray cluster of the cell's own"),
    ("data_ready", "trainer", "verl's trainer process: imports, tokenizer, dataset"),
    ("models_ready", "models", "Megatron workers: process, actor, reference and critic built through Bridge"),
    ("rollout_ready", "rollout", "vLLM server and engine, agent-loop and reward workers"),
)


def breakdown(
    provenance: Mapping[str, Any], phases: Sequence[PhaseRun], evidences: Mapping[str, Evidence]
) -> dict[str, Any] | None:
    """{"setup_s", "phases": [{"name", "wall_s", "steps", "steps_s", "startup_s", "gen_s", ...}]}, or None."""
    recorded = provenance.get("steps")
    steps = [s for s in recorded if isinstance(s, Mapping)] if isinstance(recorded, list) else []
    setup = sum(float(s["duration_s"]) for s in steps if _num(s.get("duration_s")))
    out: list[dict[str, Any]] = []
    for phase in phases:
        if phase.duration_s is None:
            continue
        ev = evidences.get(phase.name)
        series = ev.series if ev is not None else {}
        step_times = [v for _, v in series.get("timing_s/step", [])]
        row: dict[str, Any] = {"name": phase.name, "wall_s": round(phase.duration_s, 1), "steps": len(step_times)}
        if step_times:
            row["steps_s"] = round(sum(step_times), 1)
            row["startup_s"] = round(max(0.0, phase.duration_s - sum(step_times)), 1)
            for key in PARTS:
                values = [v for _, v in series.get(key, [])]
                if values:
                    row[key.split("/", 1)[1] + "_s"] = round(sum(values), 1)
            timed = [v for k, pts in series.items() if _timer(k) for _, v in pts]
            if timed:  # the step's time no timer of verl's holds: workers it starts inside the first step
                row["untimed_s"] = round(max(0.0, sum(step_times) - sum(timed)), 1)
        split = startup_split(phase.milestones)
        if split:
            row["startup_split"] = split
        out.append(row)
    if not out and not setup:
        return None
    return {"setup_s": round(setup, 1), "phases": out}


def startup_split(stamps: Mapping[str, float]) -> dict[str, float]:
    """{"launch": s, "trainer": s, "models": s, "rollout": s} from the stamps that were seen, in order;
    a stage whose stamp is missing is folded into the next one that was seen."""
    split: dict[str, float] = {}
    last = 0.0
    for stamp, name, _ in STAGES:
        at = stamps.get(stamp)
        if at is None or at < last:
            continue
        split[name] = round(at - last, 1)
        last = at
    return split


def _timer(key: str) -> bool:
    """A top-level timer of verl's step (`timing_s/gen`, `timing_s/update_critic`, ...), not the step's own
    total; the nested ones (`timing_s/agent_loop/...`) are per-sample statistics, not parts of the step."""
    name = key.removeprefix("timing_s/")
    return key.startswith("timing_s/") and name != "step" and "/" not in name


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def line(timings: Mapping[str, Any] | None) -> str | None:
    """One sentence: "set-up 0 s; run 380 s = start-up and shutdown 299 s + 1 step(s) 81 s (generation 33 s;
    29 s outside verl's step timers)"."""
    if not timings:
        return None
    parts = [f"set-up {timings.get('setup_s', 0):.0f} s"]
    for row in timings.get("phases", []):
        text = f"{row['name']} {row['wall_s']:.0f} s"
        if row.get("steps"):
            text += f" = start-up and shutdown {row['startup_s']:.0f} s"
            if row.get("startup_split"):
                text += " (" + ", ".join(f"{k} {v:.0f}" for k, v in row["startup_split"].items()) + ")"
            text += f" + {row['steps']} step(s) {row['steps_s']:.0f} s"
            inner = [f"generation {row['gen_s']:.0f} s"] if "gen_s" in row else []
            if row.get("untimed_s", 0) >= 1:
                inner.append(f"{row['untimed_s']:.0f} s outside verl's step timers")
            if inner:
                text += f" ({'; '.join(inner)})"
        parts.append(text)
    return "; ".join(parts)
