"""Start-up milestones: when, after a phase started, verl first printed each line that ends a start-up stage.

A Level 0 cell on a tiny model spends four fifths of its wall time before the first PPO step, and
verl's own timing metrics cover only the steps. The driver sees every line as it arrives, so it can
stamp the first arrival of the lines verl prints when a stage is done (the stamps are the driver's own
clock, not timestamps parsed out of the log, whose formats differ by process). The judge turns them
into a split of the start-up (`verl_e2e.judge.timing`). Standard library only (runs in the image).

The lines are verl 1dda039's (`verl/trainer/ppo/v1/trainer_base.py`, its logger at INFO) and Ray's;
a verl that words them differently just yields fewer stamps, never a wrong one.
"""

from __future__ import annotations

import time

# (stamp name, a substring of the line that ends that stage), in the order verl prints them
MARKS: tuple[tuple[str, str], ...] = (
    ("ray_started", "Started a local Ray instance"),
    ("data_ready", "train and validate dataloader initialized"),
    ("workers_created", "create worker group"),
    ("models_ready", "actor and ref model engine initialized"),
    ("rollout_ready", "all initialize finished, ready to fit"),
    ("first_step_done", "timing_s/step"),
)


class Milestones:
    """First-arrival stamps, in seconds since `start`, for the lines in MARKS."""

    def __init__(self, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.seen: dict[str, float] = {}

    def feed(self, line: str, now: float | None = None) -> None:
        if len(self.seen) == len(MARKS):
            return
        for name, text in MARKS:
            if name not in self.seen and text in line:
                at = time.monotonic() if now is None else now
                self.seen[name] = round(at - self.start, 1)
