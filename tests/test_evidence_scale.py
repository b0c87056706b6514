"""Memory stays flat with log size (the speed figure comes from tools/bench_evidence.py, not a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

SCRIPT = """
import resource, sys
sys.path.insert(0, {tools!r})
from pathlib import Path
from bench_evidence import write_log
from verl_e2e.judge.parallel import parse_file
log = Path(sys.argv[1])
write_log(log, int(sys.argv[2]), None)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ev = parse_file(log, workers=1)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
log.unlink()
print(ev.step_lines, (after - before) // 1024)
"""


def _peak_growth_mb(tmp_path: Path, mb: int) -> tuple[int, int]:
    code = SCRIPT.format(tools=str(ROOT / "tools"))
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / f"{mb}.log"), str(mb)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    steps, growth = out.stdout.split()
    return int(steps), int(growth)


def test_memory_does_not_grow_with_log_size(tmp_path: Path) -> None:
    small_steps, small = _peak_growth_mb(tmp_path, 16)
    big_steps, big = _peak_growth_mb(tmp_path, 160)
    assert big_steps > 9 * small_steps  # ten times the log was really read
    assert big < 64, f"parsing 160 MB grew the peak RSS by {big} MB"
    assert big - small < 48, (small, big)
