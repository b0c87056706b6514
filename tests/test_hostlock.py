"""The driver's host lock: verl runs that share a /tmp run one after the other (verl's weight socket is a
fixed /tmp path per Ray job id, and every cell's own cluster is job 01000000); separate /tmps do not wait.
Real processes, real flock."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOLDER = """
import sys, time
sys.path.insert(0, {containers!r})
import hostlock
start = time.time()
with hostlock.held(lambda m: print(m, flush=True), path={lock!r}, poll=0.1) as waited:
    print(f"got {{waited:.1f}} at {{time.time():.2f}}", flush=True)
    time.sleep(1.5)
print(f"left at {{time.time():.2f}}", flush=True)
"""


def _start(lock: Path) -> subprocess.Popen[str]:
    code = HOLDER.format(containers=str(ROOT / "containers"), lock=str(lock))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _times(out: str, word: str) -> float:
    return float(next(line for line in out.splitlines() if line.startswith(word)).split()[-1])


def test_runs_sharing_a_tmp_take_turns_and_say_why(tmp_path: Path) -> None:
    first = _start(tmp_path / "lock")
    time.sleep(0.5)
    second = _start(tmp_path / "lock")
    out1, out2 = first.communicate(timeout=30)[0], second.communicate(timeout=30)[0]
    assert _times(out2, "got") >= _times(out1, "left") - 0.05  # the second ran after the first let go
    assert "waiting for another verl run on this host" in out2 and "own /tmp" in out2
    assert float(out2.split("got ")[1].split()[0]) >= 0.5


def test_runs_with_their_own_tmp_do_not_wait(tmp_path: Path) -> None:
    first, second = _start(tmp_path / "a.lock"), _start(tmp_path / "b.lock")
    out1, out2 = first.communicate(timeout=30)[0], second.communicate(timeout=30)[0]
    assert _times(out2, "got") < _times(out1, "left") and _times(out1, "got") < _times(out2, "left")
    assert "waiting" not in out1 + out2


def test_a_lock_path_that_is_a_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / "lock").symlink_to(tmp_path / "elsewhere")
    out = _start(tmp_path / "lock").communicate(timeout=30)[0]
    assert "not taken" in out and out.splitlines()[1].startswith("got 0.0")
