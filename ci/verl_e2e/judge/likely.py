"""A default the PR changed, read on the failing path: the likely cause of a failure raised elsewhere.

A provider dataclass default the PR changed (`kv_channels`, `num_query_groups`, ...) is read when the
model is built, and what breaks is Bridge's weight import or Megatron-Core's layer code, lines the PR
never touched. The plan records every changed class-level default, dataclass field and module-level
value (`changes.json` `defaults`, from `plan.fields`); a failure whose frame is outside the PR's lines
is traced back to one of them when the failing path reads it:
  - a frame of the root traceback runs in that module (a module-level value), or inside that class's
    lines (a class default: its methods read it);
  - or the run failed building the model (the weight import included) and the changed field belongs
    to a Bridge model provider or config class the cell's model builds through (a shared file, or the
    cell's own family directory), which model build reads whole.
The first rule names a specific reader, so it wins over the second. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_e2e.judge.culprit import where
from verl_e2e.judge.evidence import Evidence
from verl_e2e.plan.registry import SHARED

MODELS = "src/megatron/bridge/models/"
PROVIDER_CLASS = re.compile(r"(?:Provider|Config)\b")  # `Qwen2ModelProvider`, `GPTModelProvider`, `TransformerConfig`
# a failure that a default's value can cause (not an import, an environment or an interrupt)
VALUE_CLASSES = frozenset({"model_build", "runtime", "checkpoint_save", "checkpoint_load"})
NOT_A_VALUE = frozenset({"ImportError", "ModuleNotFoundError", "SyntaxError", "IndentationError"})
MAX_DEFAULTS = 200


@dataclass(frozen=True)
class Likely:
    default: Mapping[str, Any]
    reader: str  # how the failing path reads it, in words
    others: int  # how many more changed defaults the same rule matched

    @property
    def name(self) -> str:
        d = self.default
        return f"{d['owner']}.{d['name']}" if d.get("owner") else str(d["name"])

    @property
    def at(self) -> str:
        return f"{self.default['path']}:{self.default['line']}"


def records(value: Any) -> list[dict[str, Any]]:
    """The `defaults` of an untrusted changes.json: each {path, line, owner, name, ...} checked; others dropped."""
    if not isinstance(value, list):
        return []
    out = []
    for item in value[:MAX_DEFAULTS]:
        if not isinstance(item, dict) or not isinstance(item.get("line"), int):
            continue
        if not all(isinstance(item.get(k), str) for k in ("path", "owner", "name")):
            continue
        span = item.get("span")
        span = span if isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span) else None
        bases = (
            [b for b in item.get("bases") or [] if isinstance(b, str)] if isinstance(item.get("bases"), list) else []
        )
        text = {k: item[k][:80] if isinstance(item.get(k), str) else None for k in ("value", "was")}
        keep = {k: item[k] for k in ("path", "line", "owner", "name")}
        out.append(keep | text | {"removed": item.get("removed") is True, "bases": bases, "span": span})
    return out


def _in_frame(d: Mapping[str, Any], frames: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The innermost frame that runs in the default's module (or inside its class's lines)."""
    span = d.get("span")
    matching = [
        frame
        for frame in frames
        if frame.get("path") == d["path"]
        and (not d["owner"] or span is None or span[0] <= int(frame.get("line") or 0) <= span[1])
    ]
    return matching[-1] if matching else None


def _provider(d: Mapping[str, Any]) -> bool:
    """A field of a Bridge model provider or config class (by its name or a base's)."""
    names = [str(d["owner"]).rsplit(".", 1)[-1], *d.get("bases", [])]
    return bool(d["owner"]) and str(d["path"]).startswith(MODELS) and any(PROVIDER_CLASS.search(n) for n in names)


def _built_by(d: Mapping[str, Any], family_dir: str | None) -> bool:
    """Whether the cell's model builds through the default's file: a file every model shares (models/*.py,
    conversion/, common/, ...), or its own family's directory (a Qwen cell never builds a DeepSeek provider)."""
    parts = str(d["path"])[len(MODELS) :].split("/")
    return len(parts) == 1 or parts[0] in SHARED or family_dir is None or parts[0] == family_dir


def find(ev: Evidence | None, defaults: Sequence[Mapping[str, Any]], family_dir: str | None = None) -> Likely | None:
    """The changed default the failing path reads, by the module's rules; None when none does.
    `family_dir` is the cell's Bridge model directory (None: unknown, every provider counts)."""
    if ev is None or not ev.culprit or not defaults or ev.failure_class not in VALUE_CLASSES:
        return None
    if (ev.exception or {}).get("type") in NOT_A_VALUE:
        return None
    frames: list[dict[str, Any]] = ev.culprit.get("frames") or [ev.culprit["culprit"], ev.culprit["raised_in"]]
    read = [(d, f) for d in defaults if (f := _in_frame(d, frames)) is not None]
    if read:
        d, frame = read[0]
        kind = "class's code" if d["owner"] else "module"
        return Likely(d, f"the failing path runs that {kind} ({where(frame)})", len(read) - 1)
    if ev.failure_class == "model_build" or ev.failed_in == "model_build":
        built = [d for d in defaults if _provider(d) and _built_by(d, family_dir)]
        if built:
            return Likely(built[0], "model build reads the provider's fields", len(built) - 1)
    return None


def _change(d: Mapping[str, Any]) -> str:
    if d.get("removed"):
        return f"removed the `{d['name']}` default (was `{d.get('was')}`) from `{d['owner']}`"
    what = f"`{d['owner']}.{d['name']}` default" if d["owner"] else f"module value `{d['name']}`"
    if d.get("was") is not None and d.get("value") is not None:
        return f"changed the {what} from `{d['was']}` to `{d['value']}`"
    return f"added the {what}" + (f" = `{d['value']}`" if d.get("value") is not None else "")


def phrase(found: Likely) -> str:
    """' - likely cause: this PR changed `X.y` default at `path:line`' for the headline, before the
    culprit frame (the values are in the follow-up: a headline is read in a table row)."""
    d = found.default
    verb = "removed" if d.get("removed") else ("added" if d.get("was") is None else "changed")
    what = f"`{found.name}` default" if d["owner"] else f"module value `{found.name}`"
    more = f" (+{found.others} more read there)" if found.others else ""
    return f" - likely cause: this PR {verb} {what} at `{found.at}`{more}"


def follow_up(found: Likely) -> str:
    """The first follow-up: start at the changed line, and why."""
    return (
        f"start at `{found.at}`: this PR {_change(found.default)}, and {found.reader}; the failing frame is "
        "where its effect surfaced, not the cause; check the new value against this model's config.json "
        "(or restore the old default) and rerun"
    )
