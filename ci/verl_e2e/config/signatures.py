"""Failure signatures as data: the shipped defaults (data/signatures.yaml) plus any from matrix.yaml."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from verl_e2e.errors import ConfigError

FAILURE_CLASSES = (
    "none",
    "setup",
    "model_build",
    "runtime",
    "checkpoint_save",
    "checkpoint_load",
    "oom",
    "nccl",
    "hang",
    "nan",
    "interrupted",
    "no_update",  # nothing trained moved (judge/training.py; from the run's records, not a log line)
    "rollout_weights",  # the rollout engine ran other weights than the trainer's
    "no_learning",  # Level 5: the reward did not rise beyond its own noise
    "mtp_untrained",  # Level 4's MTP cell: the multi-token-prediction layers produced no finite loss
)


@dataclass(frozen=True)
class Signature:
    name: str
    failure_class: str
    needle: str
    regex: re.Pattern[str]
    hint: str
    example: str | None = None  # a line it must match (checked by a test)
    transient: bool = False  # a cause that passes (Ray start-up, a collective timeout, a lost node): retried once


def build_signatures(entries: Iterable[Mapping[str, Any]], where: str) -> tuple[Signature, ...]:
    out = []
    for i, entry in enumerate(entries):
        spot = f"{where}[{i}]"
        cls = entry.get("class")
        if cls not in FAILURE_CLASSES:
            raise ConfigError(f"{spot}.class: found {cls!r}, expected one of {', '.join(FAILURE_CLASSES)}")
        try:
            regex = re.compile(entry["regex"])
        except (KeyError, re.error) as exc:
            raise ConfigError(f"{spot}.regex: missing or invalid regular expression ({exc}); fix it") from None
        needle = entry.get("needle") or entry["regex"]
        if not isinstance(needle, str) or not needle:
            raise ConfigError(f"{spot}.needle: expected a non-empty literal that every matching line contains")
        name = entry.get("name", f"signature-{i}")
        transient = bool(entry.get("transient", False))
        out.append(Signature(name, cls, needle, regex, entry.get("hint", ""), entry.get("example"), transient))
    return tuple(out)


@cache
def default_signatures() -> tuple[Signature, ...]:
    text = resources.files("verl_e2e").joinpath("data/signatures.yaml").read_text(encoding="utf-8")
    return build_signatures(yaml.safe_load(text)["signatures"], "signatures.yaml::$.signatures")
