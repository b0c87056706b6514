"""Python and Ray tracebacks in a verl log: which frames each one passed through, and the root one.

A failing verl run prints the same error several times: the worker's own traceback, then the
driver's `RayTaskError(X)` chain that repeats it, then Hydra's summary. The first traceback that
ends in an exception is the root; its frames (outermost first, as Python prints them) say where
the run stopped, which is what the classification needs, not every frame mentioned anywhere.
A traceback printed before training went on (later step lines) was logged, not fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_FRAMES = 400
MAX_BLOCKS = 20
IGNORED_EXCEPTIONS = frozenset({"KeyboardInterrupt", "SystemExit"})

_FRAME = re.compile(r'File "([^"]*)", line (\d+), in ([\w<>]+)')
_RAY_METHOD = re.compile(r"ray::\w+\.(\w+)\(\)")
_RAY_TASK_ERROR = re.compile(r"RayTaskError\((\w+)\)")
# Ray errors that print the remote traceback after their own line (an actor that died in its creation
# task): the frames that follow, and the exception that ends them, are the same failure
_RAY_WRAPPER = re.compile(r"\b(ActorDiedError|RayActorError|ActorUnavailableError): (.*\bray::.*)")
_TRACEBACK = "Traceback (most recent call last)"
_SUBPROCESS = "Error raised in subprocess"
_UNHANDLED = re.compile(r"Unhandled error \(suppress with|Error executing job with overrides")
# a logging prefix in front of a traceback's lines: vLLM's `ERROR 12-01 10:00:00 [core.py:700] `, verl v1's
# `ERROR:2026-12-01 10:00:00,123:`, Python's `ERROR:root:`
LOG_PREFIX = re.compile(
    # vLLM's process tags ("(EngineCore pid=1)", "(Worker pid=2)") may come before its logger's prefix
    r"^(?:\((?:[\w.]+ )?pid=\d+\)\s+)*"
    r"(?:(?:ERROR|WARNING|CRITICAL|INFO|DEBUG)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] "
    r"|(?:ERROR|CRITICAL):(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+|[\w.]+):)"
)
EXCEPTION_LINE = re.compile(
    r"^(?:\[[Rr]ank[ -]?\d+\]:?\s*)?(?:[A-Za-z_]\w*\.)*"
    r"([A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)|Exception|(?:Base)?ExceptionGroup)(?::\s?(.*))?$"
)
# an exception group's tracebacks are printed behind a `|` gutter (asyncio TaskGroups in the rollout loop)
_GUTTER = re.compile(r"^\s*(?:\|\s?)+")
GROUPS = frozenset({"ExceptionGroup", "BaseExceptionGroup"})
# exceptions whose names end otherwise, recognised only with their module path (a bare "Unsupported:" is prose)
QUALIFIED_EXCEPTION_LINE = re.compile(
    r"^(?:\[[Rr]ank[ -]?\d+\]:?\s*)?(?:[A-Za-z_]\w*\.)+"
    r"(OutOfResources|BackendCompilerFailed|Unsupported|StopIteration)(?::\s?(.*))?$"
)


@dataclass
class Block:
    """One traceback: its frames as (function, file) outermost first, and how it ended."""

    frames: list[tuple[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # each frame's line number (0 where none was printed)
    ray_types: list[str] = field(default_factory=list)
    type: str | None = None
    message: str = ""
    steps_before: int = 0  # step lines seen when it ended (a later step means training went on)
    # opened by a traceback's header (Python's, Ray's, an unhandled-error line), not by a lone `File "..."`
    # line: a warning that quotes its call site (Dynamo's "This call originates from:") is no traceback
    headed: bool = False

    def add_frame(self, func: str, path: str, line: int = 0) -> None:
        if len(self.frames) >= MAX_FRAMES:
            del self.frames[: MAX_FRAMES // 4]  # keep the innermost frames, where it failed
            del self.lines[: MAX_FRAMES // 4]
        self.frames.append((func, path))
        self.lines.append(line)


@dataclass
class Tracebacks:
    """Collects tracebacks line by line; `absorb` folds a later byte range's state in."""

    blocks: list[Block] = field(default_factory=list)
    current: Block | None = None
    standalone: dict[str, str] | None = None  # an `XError: ...` line outside any traceback
    interrupted: bool = False
    unhandled: bool = False
    frame_names: dict[str, None] = field(default_factory=dict)
    awaiting: str | None = None  # RayTaskError(X) seen, X's message not yet
    ray_message: str = ""
    ignoring: bool = False  # after "Exception ignored in ...": Python printed it and went on

    def ignore_next(self) -> None:
        """The next traceback is one Python reported and ignored (`__del__`, atexit): not a failure."""
        self.current = None
        self.ignoring = True

    def line(self, text: str, steps: int) -> bool:
        """Handle one cleaned line; True when it was an exception line (a key line)."""
        text = _GUTTER.sub("", text, count=1)
        found = False
        for m in _FRAME.finditer(text):
            self._open().add_frame(m.group(3), m.group(1), int(m.group(2)))
            self._name(m.group(3))
            found = True
        for m in _RAY_METHOD.finditer(text):
            self._open().add_frame(m.group(1).removeprefix("actor_rollout_"), "ray::")
            self._name(m.group(1))
            self._open().headed = True
        ray = _RAY_TASK_ERROR.search(text)
        if ray:
            self._open().ray_types.append(ray.group(1))
            self.awaiting = self.awaiting or ray.group(1)
            return True
        wrapper = _RAY_WRAPPER.search(text)
        if wrapper:
            self._open().ray_types.append(wrapper.group(1))
            if self.awaiting is None:
                self.awaiting, self.ray_message = wrapper.group(1), wrapper.group(2).strip()[:500]
            return True
        if found:
            return False
        if _TRACEBACK in text:
            if self.current is not None and self.current.frames and not self.current.ray_types:
                self._close(None, "", steps)  # a traceback that never printed its exception (cut off)
            self._open().headed = True
            return False
        if _UNHANDLED.search(text):
            self.unhandled = True
            self._open().headed = True
            return False
        return self._exception(text.strip(), steps)

    def _exception(self, text: str, steps: int) -> bool:
        bare = LOG_PREFIX.sub("", text, count=1)
        m = EXCEPTION_LINE.match(bare) or QUALIFIED_EXCEPTION_LINE.match(bare)
        if not m:
            return False
        etype, message = m.group(1), (m.group(2) or "").strip()[:500]
        if etype in IGNORED_EXCEPTIONS:
            self.interrupted = self.interrupted or etype == "KeyboardInterrupt"
            self.current = None
            return False
        if etype in GROUPS and self.current is not None:  # its sub-exception's traceback follows: the failure
            self.current.ray_types.append(etype)
            if self.awaiting is None:
                self.awaiting, self.ray_message = etype, message
            return True
        if self.awaiting == etype and message and not self.ray_message:
            self.ray_message = message
        if self.current is not None:
            self._close(etype, message, steps)
            return True
        if self.standalone is None:
            self.standalone = {"type": etype, "message": message}
            return True
        return False

    def _open(self) -> Block:
        if self.current is None:
            self.current = Block()
        return self.current

    def _close(self, etype: str | None, message: str, steps: int) -> None:
        block, self.current = self.current, None
        if block is None:
            return
        if self.ignoring:
            self.ignoring = False
            return
        block.type, block.message, block.steps_before = etype, message, steps
        if len(self.blocks) < MAX_BLOCKS:
            self.blocks.append(block)

    def _name(self, func: str) -> None:
        if len(self.frame_names) < 500:
            self.frame_names[func] = None
            if func.startswith("actor_rollout_"):
                self.frame_names[func.removeprefix("actor_rollout_")] = None

    def absorb(self, later: Tracebacks, steps_before: int) -> None:
        """Fold in the state of the range that follows this one (`steps_before`: step lines up to it)."""
        if self.current is not None and later.blocks and not later.blocks[0].frames:
            first = later.blocks.pop(0)  # this range's open traceback ended in the next range
            self.current.ray_types += first.ray_types
            self._close(first.type, first.message, first.steps_before + steps_before)
        elif self.current is not None and later.blocks:
            self._close(None, "", steps_before)
        for block in later.blocks:
            block.steps_before += steps_before
            if len(self.blocks) < MAX_BLOCKS:
                self.blocks.append(block)
        if later.current is not None:
            if self.current is not None and self.current.headed and not later.blocks:
                later.current.headed = True  # the traceback this range left open goes on there
            self.current = later.current
        self.standalone = self.standalone or later.standalone
        self.interrupted = self.interrupted or later.interrupted
        self.unhandled = self.unhandled or later.unhandled
        for name in later.frame_names:
            self._name(name)
        if self.awaiting and not self.ray_message and later.awaiting == self.awaiting:
            self.ray_message = later.ray_message
        self.awaiting = self.awaiting or later.awaiting
        self.ray_message = self.ray_message or later.ray_message

    def root(self, total_steps: int) -> Block | None:
        """The first traceback after which training did not go on, else one left open (cut off): a
        traceback's header, then frames, then the log ends. Frames no header opened are a warning's."""
        for i, block in enumerate(self.blocks):
            if block.steps_before >= total_steps and (block.type or block.ray_types):
                return past_subprocess(self.blocks, i)
        current = self.current
        if current is not None and (current.ray_types or (current.frames and current.headed)):
            return current
        return None

    def exception(self, total_steps: int) -> dict[str, str] | None:
        """The root exception as {type, message}: a traceback's, a RayTaskError's, else a standalone line."""
        block = self.root(total_steps)
        if block is not None and block.type:
            return {"type": block.type, "message": block.message}
        if block is not None and block.ray_types:
            etype = block.ray_types[-1]
            return {"type": etype, "message": self.ray_message if self.awaiting == etype else ""}
        return dict(self.standalone) if self.standalone else None


def past_subprocess(blocks: list[Block], i: int) -> Block:
    """The subprocess's own traceback where a failure is a child process that died: vLLM inspects a
    model class in a child (`python -m vllm.model_executor.models.registry`) and reports
    CalledProcessError, then `RuntimeError: Error raised in subprocess:`, then the child's traceback,
    whose exception is the cause (a wheel missing on the node: "No module named 'mistral_common'")."""
    if blocks[i].type != "CalledProcessError":
        return blocks[i]
    j = i + 1
    if j < len(blocks) and blocks[j].type == "RuntimeError" and blocks[j].message.startswith(_SUBPROCESS):
        j += 1
        if j < len(blocks) and blocks[j].type and blocks[j].steps_before == blocks[i].steps_before:
            return blocks[j]
    return blocks[i]
