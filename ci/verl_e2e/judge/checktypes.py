"""The record every check returns, and the metric names a reward is logged under.

Its own module so the check families (`checks` for the run's mechanics, `training` for what the run
trained) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")


@dataclass(frozen=True)
class Check:
    name: str
    result: Literal["Pass", "Fail", "Skipped"]
    detail: str
