"""tools/parallel_runs.sh gives every cell its own /tmp, because verl's trainer-to-rollout weight socket is
a fixed /tmp path per Ray job id and each cell's own Ray cluster numbers its jobs from 01000000 (a real
Level 1 cell on the H200 was sent another cell's weights). Where no private /tmp can be had, cells run
one at a time.

The cell stands in for `tools/offline_node.sh run`: like verl, it binds /tmp/rl-colocate-zmq-01000000-...
(exclusively: a second bind of the same path fails), holds it while it "trains", and removes it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FAKE_CELL = """#!/usr/bin/env bash
# stands in for offline_node.sh run WORK CELL --out DIR ...: binds verl's socket path, holds it, leaves
set -euo pipefail
shift 3
out=$2
sock=/tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock
( set -o noclobber; echo "$$" > "$sock" ) || { echo "socket in use: $sock"; exit 7; }
sleep 2
mkdir -p "$out" && echo ok > "$out/done"
rm -f "$sock"
"""


def _layout(root: Path) -> tuple[Path, Path]:
    repo, work = root / "repo", root / "work"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "parallel_runs.sh", repo / "tools")
    (repo / "tools" / "offline_node.sh").write_text(FAKE_CELL)
    (repo / "tools" / "offline_node.sh").chmod(0o755)
    (repo / "tools" / "mutate_bridge.py").write_text("import sys\nsys.exit(0)\n")  # --reset only
    (work / "Megatron-Bridge").mkdir(parents=True)
    return repo, work


def _run(repo: Path, work: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "tools" / "parallel_runs.sh"), str(work), "a:-:L0-lora-ddp-qwen", "b:-:L0-lora-ddp-qwen"],
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "STAGGER": "0", "MAX_PARALLEL": "2", "CELL_RAM_GIB": "1", **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _unshare_works() -> bool:
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, check=False)
    return shutil.which("unshare") is not None and probe.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare --mount (root); tools/test.sh runs as root")
def test_cells_at_once_each_bind_verls_socket_in_their_own_tmp(tmp_path: Path) -> None:
    root = Path("/var/tmp") / f"verl-e2e-test-{tmp_path.name}"  # outside /tmp, as the script requires
    try:
        repo, work = _layout(root)
        out = _run(repo, work)
        assert "running one at a time" not in out.stderr
        for label in ("a", "b"):
            code = (work / f"exit-{label}").read_text().split()[0]
            assert code == "0", (work / f"log-{label}.txt").read_text()
            assert (work / "runs" / label / "done").is_file()
        assert not Path("/tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock").exists()  # never in the host's /tmp
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_work_under_tmp_runs_one_at_a_time_and_says_so() -> None:
    root = Path(tempfile.mkdtemp(prefix="verl-e2e-test-", dir="/tmp"))  # under /tmp whatever pytest's basetemp is
    try:
        repo, work = _layout(root)
        out = _run(repo, work)
        assert "cannot get a private /tmp here" in out.stderr and "one at a time" in out.stderr
        assert [(work / f"exit-{label}").read_text().split()[0] for label in ("a", "b")] == ["0", "0"]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_cells_start_only_while_the_hosts_ram_holds_them() -> None:
    """Every cell's Ray kills a worker when the node's RAM runs low: a cell more than RAM holds loses them all."""
    root = Path(tempfile.mkdtemp(prefix="verl-e2e-test-", dir="/tmp"))
    try:
        repo, work = _layout(root)
        out = _run(repo, work, CELL_RAM_GIB="100000")  # no machine has 100,000 GiB per cell: one at a time
        assert "about 100000 GiB per cell (CELL_RAM_GIB): 1 at once instead of 2" in out.stderr
        assert [(work / f"exit-{label}").read_text().split()[0] for label in ("a", "b")] == ["0", "0"]
        roomy = _run(repo, work)  # 1 GiB per cell: this machine holds two
        assert "CELL_RAM_GIB" not in roomy.stderr
    finally:
        shutil.rmtree(root, ignore_errors=True)
