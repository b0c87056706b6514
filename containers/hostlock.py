"""One verl run at a time per /tmp: verl's trainer sends weights to the rollout engine through the socket
/tmp/rl-colocate-zmq-<Ray job id>-replica-0-rank-0.sock, and a cell that starts its own Ray cluster always
gets job id 01000000. Two cells sharing a host's /tmp would bind the same path, and one cell's rollout
would load the other's weights (seen on an H200: a 576-wide model was sent 256-wide tensors).

The lock lives in /tmp itself, so it serialises exactly the cells that share it: cells in containers, or
given a private /tmp (tools/parallel_runs.sh), each see their own lock and run side by side. Standard
library only (runs inside the verl image).
"""

import contextlib
import fcntl
import os
import time

LOCK = "/tmp/verl-e2e-verl-run.lock"


@contextlib.contextmanager
def held(log, path=LOCK, poll=5.0):
    """Hold the host's verl-run lock while the body runs; yields the seconds spent waiting for it.
    A lock file that cannot be opened safely (another user's, a symlink) is logged and not waited for."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        log(f"host lock {path}: not taken ({exc.strerror}); another verl run sharing /tmp could clash with this one")
        yield 0.0
        return
    started = time.time()
    said = 0.0
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.time() - started
                if waited - said >= 60 or said == 0:
                    log(
                        f"waiting for another verl run on this host to finish ({waited:.0f} s so far): cells that "
                        "share /tmp would share verl's weight socket; give each its own /tmp to run them together"
                    )
                    said = waited or 1e-9
                time.sleep(poll)
        yield time.time() - started
    finally:
        os.close(fd)  # releases the lock
