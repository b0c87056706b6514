"""Steps of a slow command, on stderr, with how long each took.

A command that sat silent for a minute (`surface` reading a Bridge tree) looks hung. A step that
is known to be slow is announced when it starts; any other step says nothing unless it runs past
two seconds, so fast commands keep a clean stderr. While a step runs, a line every fifteen
seconds says it still does. Output (stdout) stays the command's result alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

QUIET_FOR_S = 2.0
EVERY_S = 15.0


class Progress:
    """One command's steps; `say` writes one line to stderr."""

    def __init__(
        self,
        err: TextIO,
        prog: str,
        *,
        quiet_for: float = QUIET_FOR_S,
        every: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.err, self.prog, self.quiet_for, self.every, self.clock = err, prog, quiet_for, every, clock
        self._lock = threading.Lock()

    def say(self, line: str) -> None:
        with self._lock:
            self.err.write(f"{self.prog}: {line}\n")
            self.err.flush()

    @contextmanager
    def step(self, what: str, *, slow: bool = False) -> Iterator[None]:
        """Run the body as one step: announced at once when `slow`, else only past `quiet_for`."""
        start, done = self.clock(), threading.Event()
        spoke = threading.Event()
        if slow:
            self.say(f"{what} ...")
            spoke.set()

        def beat() -> None:
            wait = self.every if spoke.is_set() else self.quiet_for
            while not done.wait(wait):
                self.say(f"{what} ... ({self.clock() - start:.0f} s so far)")
                spoke.set()
                wait = self.every

        watcher = threading.Thread(target=beat, daemon=True)
        watcher.start()
        ended = "stopped after"  # unless the body finishes: an error never reads as done
        try:
            yield
            ended = "done in"
        finally:
            done.set()
            watcher.join()
            if spoke.is_set():
                self.say(f"{what}: {ended} {self.clock() - start:.1f} s")
