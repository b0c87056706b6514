"""tools/node_batch.sh, how a batch reaches a node through small transfers: the bundle split into parts with
their checksum, a join that refuses a short or missing part before anything is installed, and a poll that
packs what the batch left (run dirs, logs) into one archive, finished or not. Real bash, tar and split."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "node_batch.sh"


def _bash(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(TOOL), *args], capture_output=True, text=True, timeout=120, check=False)


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "src").mkdir()
    (bundle / "wheels" / "a-1.0-py3-none-any.whl").write_bytes(bytes(range(256)) * 12000)  # ~3 MiB
    (bundle / "src" / "verl-x.tgz").write_bytes(b"verl")
    return bundle


def test_split_makes_parts_whose_join_matches_the_checksum(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    done = _bash("split", str(_bundle(tmp_path)), str(parts), "1")
    assert done.returncode == 0, done.stderr
    pieces = sorted(parts.glob("part-*"))
    assert len(pieces) >= 3 and all(p.stat().st_size <= 1 << 20 for p in pieces)
    joined = b"".join(p.read_bytes() for p in pieces)
    assert hashlib.sha256(joined).hexdigest() == (parts / "BUNDLE_SHA").read_text().strip()


def test_a_missing_part_stops_the_batch_before_any_set_up(tmp_path: Path) -> None:
    parts, work = tmp_path / "parts", tmp_path / "work"
    assert _bash("split", str(_bundle(tmp_path)), str(parts), "1").returncode == 0
    sorted(parts.glob("part-*"))[1].unlink()
    (tmp_path / "entries").write_text("l0:-:L0-lora-ddp-qwen\n")
    _bash("start", str(parts), str(work), str(tmp_path / "entries"))
    log = (work / "batch" / "batch.log").read_text()
    assert "a part is missing or short" in log and (work / "batch" / "done").exists()
    assert not (work / "site").exists() and not (work / "bundle").exists()


def test_poll_packs_what_is_there_and_says_whether_the_batch_ended(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    run = work / "runs" / "l0-qwen"
    run.mkdir(parents=True)
    (run / "verdict.json").write_text(json.dumps({"result": "Pass", "failure_class": "none", "duration_s": 208.0}))
    (work / "log-l0-qwen.txt").write_text("console\n")
    (work / "batch").mkdir()
    (work / "batch" / "batch.log").write_text("BATCH DONE\n")
    (work / "batch" / "done").touch()
    done = _bash("poll", str(work), "5", str(out))
    assert done.returncode == 0, done.stderr
    assert "BATCH FINISHED" in done.stdout and "l0-qwen Pass none 208.0" in done.stdout
    (archive,) = out.glob("batch-*.tgz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "runs/l0-qwen/verdict.json" in names and "log-l0-qwen.txt" in names and "batch/batch.log" in names


def test_no_command_is_one_clear_line() -> None:
    done = _bash()
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "split, start or poll" in done.stderr


def test_a_bundle_without_its_layout_is_refused(tmp_path: Path) -> None:
    done = _bash("split", str(tmp_path), str(tmp_path / "parts"))
    assert done.returncode == 2 and "needs wheels/ and src/" in done.stderr and not (tmp_path / "parts").exists()


def test_make_bundle_names_a_folder_without_the_wheel_list(tmp_path: Path) -> None:
    """tools/make_bundle.sh reads the wheel list from the shared gpu folder; another folder is bad input,
    said before anything is downloaded or made."""
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "make_bundle.sh"), str(tmp_path), str(tmp_path / "bundle")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "requirements-gpu-node.txt" in done.stderr
    assert not (tmp_path / "bundle").exists()


def test_the_bundles_tarballs_name_the_commits_the_compatibility_record_is_kept_under() -> None:
    """`start` exports these where they are unset: without them no cell finds matrix.yaml's record of
    which Megatron-Core runs with this verl, and every cell runs the submodule it cannot run with."""
    record = yaml.safe_load((ROOT / "matrix.yaml").read_text())["compatibility"][0]
    done = _bash("commits", "/b/src/verl-1dda039.tgz", "/b/src/megatron-bridge-067f987-with-megatron-lm-2a75ac1.tgz")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"VERL_COMMIT={record['verl']}",
        f"MEGATRON_LM_COMMIT={record['incompatible'][0]['megatron_lm']}",
    ]
    unknown = _bash("commits", "/b/verl-fffffff.tgz", "/b/megatron-bridge-067f987.tgz")  # no record, no pin named
    assert unknown.stdout.splitlines() == ["VERL_COMMIT=", "MEGATRON_LM_COMMIT="]
