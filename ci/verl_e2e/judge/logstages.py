"""How far a verl run got: the wrapper's trace, Bridge imports, model build, progress, saves, resume.

Each marker is a line verl prints at a known point (see verl-facts.md): the `set -x` trace before
anything starts, the import probe's records, `Enabling LORA` while the model is built, tqdm's
`Training Progress`, save and resume lines in every form since v0.2. The stage is the furthest
marker seen, or where the root traceback says the run stopped, whichever is further.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_ITEMS = 50

_PROGRESS = re.compile(r"Training Progress:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_SAVE = re.compile(
    r"local_global_step_folder: \S*global_step_(\d+)|Saving checkpoint to \S*global_step_(\d+)"
    r"|(?:[Ss]aving|[Ss]aved|save completed|Checkpoint save completed for)\b.*?global_step_(\d+)"
)
# a save that finished (a manager's or Bridge's completion line), as opposed to one that started
_SAVE_DONE = re.compile(
    r"(?:Checkpoint save completed for|save completed for|Saved bridge checkpoint to|Saved checkpoint to"
    r"|\[Rank \d+\] Saved)\b.*?global_step_(\d+)"
)
_RESUME = re.compile(
    r"setting global step to (\d+)|Setting global step to (\d+)"
    r"|(?:Found checkpoint: (?:%s )?|Load from checkpoint folder: |Resuming from )\S*global_step_(\d+)"
)
_TRACE = re.compile(r"^\++ (?:export |declare -x )?([A-Z_][A-Z0-9_]*)=(.*)$")
_TRACE_CMD = re.compile(r"^\++ (.*verl\.trainer\.main_ppo.*)$")
_BRIDGE = re.compile(r"(\S*/megatron/bridge/__init__\.py)")
_DRIVER_RECORD = re.compile(r"verl-e2e: bridge import \((driver|ray-worker(?: pid \d+)?|pid \d+)\): (.+?)\s*$")
MODEL_BUILD_MARKERS = ("Enabling LORA", "Enabling LoRA", "Model config after override", "McoreModelBridge")


@dataclass
class Stages:
    """Markers of progress, line by line; `absorb` folds in a later range."""

    progress_final: str | None = None
    progress_total: int | None = None
    saves: list[int] = field(default_factory=list)
    saves_done: list[int] = field(default_factory=list)  # steps whose save printed a completion line
    resumed_from: int | None = None
    from_scratch: bool = False
    tracker_missing: bool = False
    model_built: bool = False
    traced_env: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    bridge_imports: dict[str, Any] = field(default_factory=dict)

    def progress(self, line: str) -> None:
        for m in _PROGRESS.finditer(line):
            self.progress_final = f"{m.group(1)}/{m.group(2)}"
            self.progress_total = int(m.group(2))

    def trace(self, line: str) -> None:
        m = _TRACE.match(line)
        if m and len(self.traced_env) < 500:
            self.traced_env[m.group(1)] = m.group(2).strip().strip("'\"")
            return
        c = _TRACE_CMD.match(line)
        if c and self.command is None:
            self.command = c.group(1)[:4000]

    def checkpoint(self, line: str) -> str | None:
        """Save/resume/scratch markers; returns a key line when one was new."""
        if "Training from scratch" in line:
            self.from_scratch = True
            return line
        if "tracker file does not exist" in line:
            self.tracker_missing = True
            return None
        if line.startswith(("Loading from", "Loaded", "Loading")) or ("[rank" in line and "Loading" in line):
            return None
        done = _SAVE_DONE.search(line)
        if done and int(done.group(1)) not in self.saves_done:
            self.saves_done.append(int(done.group(1)))
        s = _SAVE.search(line)
        if s:
            step = int(next(g for g in s.groups() if g is not None))
            if step not in self.saves:
                self.saves.append(step)
                return line
            return None
        r = _RESUME.search(line)
        if r:
            step = int(next(g for g in r.groups() if g is not None))
            if self.resumed_from != step:
                self.resumed_from = step
                return line
        return None

    def bridge(self, line: str) -> str | None:
        """The import probe's and the driver's records of where megatron.bridge loads from."""
        rec = _DRIVER_RECORD.search(line)
        if rec:
            where, path = rec.group(1), rec.group(2)
            if where.startswith("ray-worker pid "):  # the probe in one of verl's Ray workers
                self.bridge_imports.setdefault("ray-worker", path)
                where = "pid"
            if where.startswith("pid"):  # the probe inside verl's own processes
                seen = self.bridge_imports.setdefault("processes", [])
                if path not in seen and len(seen) < MAX_ITEMS:
                    seen.append(path)
                    return line
                return None
            self.bridge_imports[where] = path
            return line
        b = _BRIDGE.search(line)
        if b:
            others = self.bridge_imports.setdefault("other", [])
            if b.group(1) not in others and len(others) < MAX_ITEMS:
                others.append(b.group(1))
        return None

    def model_marker(self, line: str) -> None:
        if any(marker in line for marker in MODEL_BUILD_MARKERS):
            self.model_built = True

    def absorb(self, later: Stages) -> None:
        if later.progress_final is not None:
            self.progress_final, self.progress_total = later.progress_final, later.progress_total
        self.saves += later.saves
        self.saves_done += later.saves_done
        self.resumed_from = later.resumed_from if later.resumed_from is not None else self.resumed_from
        self.from_scratch = self.from_scratch or later.from_scratch
        self.tracker_missing = self.tracker_missing or later.tracker_missing
        self.model_built = self.model_built or later.model_built
        self.traced_env.update(later.traced_env)
        self.command = self.command or later.command
        for key, value in later.bridge_imports.items():
            if key in ("other", "processes"):
                merged = [*self.bridge_imports.get(key, []), *value]
                self.bridge_imports[key] = list(dict.fromkeys(merged))[:MAX_ITEMS]
            else:
                self.bridge_imports.setdefault(key, value)


def stage(st: Stages, *, max_step: int | None, step_lines: int, validated: bool, role: str | None, empty: bool) -> str:
    """The furthest point reached (empty < setup < model_build < training < checkpoint < done): markers
    first, then where the root traceback stopped."""
    if empty:
        return "empty"
    done = st.progress_total is not None and max_step is not None and max_step >= st.progress_total
    reached = "setup"
    if done or validated:
        reached = "done"
    elif st.saves or role == "save":
        reached = "checkpoint"
    elif step_lines or st.progress_final is not None or st.resumed_from is not None or role in ("training", "load"):
        reached = "training"
    elif st.model_built or role == "model_build":
        reached = "model_build"
    return reached
