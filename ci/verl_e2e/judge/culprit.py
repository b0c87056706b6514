"""Whose code failed: an owner for every frame of the root traceback, and the frame that matters.

The class says what kind of failure it was; a maintainer also needs to know where. Every frame's
path names its owner (the Bridge checkout, verl, Megatron-Core from the submodule or installed,
Transformer Engine, vLLM, Ray, torch, other). The culprit is the innermost frame of the first owner
present on the failing path (from the raise out to the nearest verl frame) in the order a Bridge
PR's author can act on: Bridge, then verl, then Megatron-Core, then the rest. The chain says how
the failure travelled ("raised in Megatron-Core, called from verl's unwrap_model; no Bridge
frame"), and the advice follows the owners on the path: a Bridge provider
hint only where a Bridge provider frame is on it, a LoRA hint only for Bridge PEFT frames, and a
verl/Megatron-Core compatibility reading where no Bridge frame is on the failing path at all.
No hint is better than a wrong one, and a cause the classifier named from the exception (an import,
the weight import) outranks any reading of owners. Pure: takes a traceback block, returns dicts.
"""

from __future__ import annotations

from typing import Any

from verl_e2e.judge.classify import HINTS
from verl_e2e.judge.tracebacks import Block

BRIDGE, VERL, MCORE = "Megatron-Bridge", "verl", "Megatron-Core"
# (owner, path markers); the first owner whose marker is in a path owns the frame
OWNERS = (
    (BRIDGE, ("/megatron/bridge/",)),
    (MCORE, ("/megatron/core/", "/Megatron-LM/", "/megatron/training/")),
    ("mbridge", ("/mbridge/",)),  # the vanilla bridge verl uses when vanilla_mbridge=True, not Bridge
    ("Transformer Engine", ("/transformer_engine/",)),
    ("vLLM", ("/vllm/",)),
    ("Ray", ("/ray/", "ray::")),
    ("torch", ("/torch/",)),
    (VERL, ("/verl/",)),
)
MAX_FRAMES = 60
PRIORITY = (BRIDGE, VERL, MCORE, "mbridge", "Transformer Engine", "vLLM", "Ray", "torch", "other")
# where a path is shown from (repository- or package-relative), per owner
SHOWN_FROM = {BRIDGE: ("/src/megatron/bridge/", "/megatron/bridge/"), MCORE: ("/megatron/core/", "/megatron/")}
PEFT_HINT = "check the LoRA target modules and Bridge's PEFT wrapping (non-vanilla PEFT helpers) in the frame named"
PROVIDER_HINT = "check the provider is finalized with verl's mpu parallel sizes"
MAPPING_HINT = (
    "check what the model bridge reads from the HF config and checkpoint (`provider_bridge`, "
    "`mapping_registry`) against this model's config.json and weight names"
)


def owner(path: str) -> str:
    return next((name for name, marks in OWNERS if any(m in path for m in marks)), "other")


def shown(path: str, who: str) -> str:
    """The path as its repository or package names it: src/megatron/bridge/peft/lora.py, verl/utils/x.py."""
    for mark in SHOWN_FROM.get(who, ()):
        if mark in path:
            return path[path.index(mark) + 1 :]
    if who == VERL and "/verl/" in path:
        return path[path.rindex("/verl/") + 1 :]
    package = {
        "mbridge": "/mbridge/",
        "Transformer Engine": "/transformer_engine/",
        "vLLM": "/vllm/",
        "Ray": "/ray/",
        "torch": "/torch/",
    }
    mark = package.get(who, "")
    return path[path.rindex(mark) + 1 :] if mark and mark in path else path


def frames(block: Block) -> list[dict[str, Any]]:
    """Each frame as {function, path, line, owner}, outermost first (Ray method names have no file)."""
    lines = block.lines if len(block.lines) == len(block.frames) else [0] * len(block.frames)
    out = []
    for (func, path), line in zip(block.frames, lines, strict=True):
        if path == "ray::":
            continue
        who = owner(path)
        out.append({"function": func, "path": shown(path, who), "line": line, "owner": who})
    return out


def where(frame: dict[str, Any]) -> str:
    line = f":{frame['line']}" if frame.get("line") else ""
    return f"{frame['path']}{line} in {frame['function']}"


def locate(block: Block | None) -> dict[str, Any] | None:
    """The culprit frame, the innermost frame, the owners on the failing path and the chain in words.

    The failing path is the frames from the raise outward up to the nearest verl frame: a Bridge frame
    further out only called into verl (a hook, a callback) and is not where the failure is."""
    if block is None:
        return None
    path = frames(block)
    if not path:
        return None
    inner: list[dict[str, Any]] = []
    for frame in reversed(path):
        inner.append(frame)
        if frame["owner"] == VERL:
            break
    present = {f["owner"] for f in inner}
    first = next(o for o in PRIORITY if o in present)
    culprit = next(f for f in inner if f["owner"] == first)
    innermost = inner[0]
    chain = f"raised in {innermost['owner']} ({where(innermost)})"
    if culprit is not innermost:
        chain += f", called from {culprit['owner']}'s {culprit['function']} ({where(culprit)})"
    outer_bridge = [f for f in path if f["owner"] == BRIDGE and f not in inner]
    if BRIDGE not in present:
        chain += (
            f"; no Bridge frame on the failing path (Bridge's {outer_bridge[-1]['function']} only called into verl)"
            if outer_bridge
            else "; no Bridge frame"
        )
    return {
        "culprit": culprit,
        "raised_in": innermost,
        "owners": [o for o in PRIORITY if o in present],
        "chain": chain,
        "bridge_frames": [f for f in reversed(inner) if f["owner"] == BRIDGE][-5:],
        "frames": path[-MAX_FRAMES:],  # the whole root traceback: which modules and classes it ran in
    }


def hint(failure_class: str, found: str | None, located: dict[str, Any] | None) -> str | None:
    """The classifier's hint, kept only where its owner is on the failing path; a cause the classifier
    named (a failed import, Bridge's weight import) is kept as it is."""
    if failure_class != "model_build" or located is None or found not in (None, HINTS["model_build"]):
        return found
    bridge = [f["path"] for f in located["bridge_frames"]]
    if any("/peft/" in p for p in bridge):
        return PEFT_HINT
    innermost = located["bridge_frames"][-1] if located["bridge_frames"] else {}
    if "/models/" in str(innermost.get("path", "")) and str(innermost["path"]).endswith("_bridge.py"):
        return MAPPING_HINT  # a model bridge's HF->Megatron mapping, not the provider's finalisation
    if any("/models/" in p for p in bridge):
        return PROVIDER_HINT
    if not bridge:
        return None  # the verdict reads it as a verl/Megatron-Core compatibility problem instead
    return found
