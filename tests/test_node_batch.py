"""tools/node_batch.sh, how a batch reaches a node through small transfers: the bundle split into parts with
their checksum, a join that refuses a short or missing part before anything is installed, and a poll that
packs what the batch left (run dirs, logs) into one archive, finished or not. Real bash, tar and split."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
import zipfile
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


def _tgz(path: Path, tree: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in tree.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_offline_setup_names_the_upstream_verl_and_the_pinned_megatron_lm_without_being_told(tmp_path: Path) -> None:
    """`offline_node.sh setup` with neither VERL_COMMIT nor a Megatron-LM commit given, on the bundle's own
    tarball names: the verl copy is tagged with its upstream commit and the Bridge commit pins Megatron-LM
    as a gitlink, as a clone has it, so `--megatron-lm auto` finds matrix.yaml's record. The assets script
    stands in for make-tiny-assets.py and stops the set-up right after the trees are laid out."""
    record = yaml.safe_load((ROOT / "matrix.yaml").read_text())["compatibility"][0]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "tiny-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr("tiny/__init__.py", "")
        zf.writestr("tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n")
        zf.writestr("tiny-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr("tiny-1.0.dist-info/RECORD", "")
    verl = _tgz(tmp_path / "verl-1dda039.tgz", {"setup.py": "", "verl/__init__.py": ""})
    bridge = _tgz(
        tmp_path / "megatron-bridge-067f987-with-megatron-lm-2a75ac1.tgz",
        {"Megatron-Bridge/pyproject.toml": "", "Megatron-LM/megatron/core/__init__.py": ""},
    )
    stop = tmp_path / "assets.py"
    stop.write_text("raise SystemExit(3)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_COMMIT", "MEGATRON_LM_COMMIT")}
    work = tmp_path / "work"
    done = subprocess.run(
        ["bash", str(ROOT / "tools" / "offline_node.sh"), "setup", str(work), str(wheels), str(verl), str(bridge),
         str(stop)],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the stand-in assets script stopped it after the trees
    tags = subprocess.run(["git", "-C", str(work / "verl"), "tag"], capture_output=True, text=True, check=True)
    assert tags.stdout.split() == [f"upstream-{record['verl']}"]
    link = subprocess.run(
        ["git", "-C", str(work / "Megatron-Bridge"), "ls-tree", "HEAD", "3rdparty/Megatron-LM"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert link.stdout.split()[:3] == ["160000", "commit", record["incompatible"][0]["megatron_lm"]]


def test_the_mamba_families_cells_run_last_after_their_kernels_build(tmp_path: Path) -> None:
    """`start` builds the Mamba kernels beside the other cells and runs the Mamba families' cells after it
    (a family is the entry's fifth field); comments and blank lines are no entries."""
    entries = tmp_path / "entries"
    entries.write_text(
        "# a batch\n"
        "l0-nemotronh:-:L0-lora-ddp-nemotronh::nemotronh\n"
        "l1-qwen:-:L1-save-resume-qwen::qwen\n"
        "\n"
        "l0-mamba:-:L0-lora-ddp-mamba::mamba:tiny/nemotronh\n"
        "mut-vis25:vision-embeds-dropped:L4-vlm-qwen25_vl::qwen25_vl\n"
        "l0-llama:-:L0-lora-ddp-llama\n"
    )
    done = _bash("order", str(entries))
    assert done.returncode == 0, done.stderr
    assert [line.split(":", 1)[0] for line in done.stdout.splitlines()] == [
        "l1-qwen", "mut-vis25", "l0-llama", "l0-nemotronh", "l0-mamba",
    ]  # fmt: skip


def _stubbed(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A copy of node_batch.sh beside stand-ins for the tools `start` calls, each logging to `events` when
    it begins and ends; the parts of a bundle that brings a Mamba sdist; two entries, one a Mamba family's.
    Returns (the copy, the parts, the entries, the events file)."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "tools" / "node_batch.sh").write_text(TOOL.read_text())
    (repo / "matrix.yaml").write_text((TOOL.parents[1] / "matrix.yaml").read_text())  # `launch` checks entries
    events = tmp_path / "events"
    stub = f'echo "$(date +%s.%N) {{name}} start $*" >> {events}; {{body}}; echo "$(date +%s.%N) {{name}} end" >> {events}\n'
    stubs = {
        "offline_node.sh": ("setup", 'mkdir -p "$2/site" "$2/assets/tiny/qwen2"'),
        "build_mamba.sh": ("build", "sleep 2"),
        "parallel_runs.sh": ("cells", "sleep 0.5"),
        "make_tiny_model.py": ("tiny", ""),
    }
    for name, (label, body) in stubs.items():
        text = stub.format(name=label, body=body or "true")
        if name.endswith(".py"):
            text = f"import subprocess, sys\nsubprocess.run(['bash', '-c', {text!r}, 'x', *sys.argv[1:]])\n"
        (repo / "tools" / name).write_text(text)
    bundle = tmp_path / "bundle"
    for d in ("wheels", "src"):
        (bundle / d).mkdir(parents=True)
    (bundle / "src" / "mamba_ssm-2.3.2.post1.tar.gz").write_bytes(b"sdist")
    (bundle / "src" / "verl-1dda039.tgz").write_bytes(b"verl")
    parts = tmp_path / "parts"
    split = _bash("split", str(bundle), str(parts))
    assert split.returncode == 0, split.stderr
    entries = tmp_path / "entries"
    entries.write_text("l0-nemotronh:-:L0-lora-ddp-nemotronh::nemotronh\nl1-qwen:-:L1-save-resume-qwen::qwen\n")
    return repo / "tools" / "node_batch.sh", parts, entries, events


def _order_checked(events: Path, work: Path) -> None:
    log = [line.split(" ", 3)[1:] for line in events.read_text().splitlines()]
    order = [f"{what} {edge}" for what, edge, *_ in log]
    assert order.index("setup end") < order.index("build start") < order.index("cells start")
    first, second = [i for i, (what, edge, *_) in enumerate(log) if (what, edge) == ("cells", "start")]
    assert "l1-qwen" in log[first][2] and "nemotronh" not in log[first][2]  # the others, while the build runs
    assert order.index("build end") < second and "l0-nemotronh" in log[second][2]  # Mamba cells after it
    assert "MAMBA rc=0" in (work / "batch" / "batch.log").read_text()


def test_start_runs_the_other_cells_while_the_mamba_kernels_build(tmp_path: Path) -> None:
    """`start`'s order of work, its tools stubbed: set-up, the Mamba build in the background, the tiny
    models, the other cells while the build runs, then the Mamba families' cells once it is done."""
    tool, parts, entries, events = _stubbed(tmp_path)
    work = tmp_path / "work"
    done = subprocess.run(
        ["bash", str(tool), "start", str(parts), str(work), str(entries)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (work / "batch" / "done").exists(), done.stderr
    _order_checked(events, work)


def test_launch_returns_at_once_and_runs_start_from_its_own_copy(tmp_path: Path) -> None:
    """On a lent machine each call replaces the checkout, so `launch` copies it into WORK/repo and runs
    `start` from there, detached; the call that launched it returns before the batch ends."""
    tool, parts, entries, events = _stubbed(tmp_path)
    work = tmp_path / "work"
    began = time.monotonic()
    done = subprocess.run(
        ["bash", str(tool), "launch", str(parts), str(work), str(entries)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "poll" in done.stdout, done.stderr
    assert not (work / "batch" / "done").exists() or time.monotonic() - began > 2  # not waited for
    for _ in range(100):
        if (work / "batch" / "done").exists():
            break
        time.sleep(0.2)
    assert (work / "repo" / "tools" / "node_batch.sh").exists() and (work / "entries").exists()
    _order_checked(events, work)
    missing = _bash("launch", str(parts), str(work), str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no entries file" in missing.stderr


def test_check_names_each_entry_and_family_that_matrix_yaml_lacks(tmp_path: Path) -> None:
    """The twentieth batch passed the entries' model column (`tiny/llama`) as the families to build: the tiny
    builder refused the list, nothing was built, and nineteen cells ran without a model. `check` (which
    `launch` runs) says so before any device time goes into the batch."""
    entries = tmp_path / "entries"
    entries.write_text(
        "# comment\n"
        "l0-llama:-:L0-lora-ddp-llama::llama:tiny/llama\n"
        "\n"
        "l0-glm:-:L0-lora-ddp-glm::tiny/glm\n"
        "no fields here\n"
    )
    done = _bash("check", str(entries), "llama", "tiny/llama")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"node_batch.sh: {entries}:4: 'tiny/glm' is no family of matrix.yaml (the fifth field is the family, the sixth the model)",
        f"node_batch.sh: {entries}:5: expected LABEL:MUTATION:CELL[:HYDRA[:FAMILY[:MODEL]]] with a label of letters, digits, '.', '_' or '-'",
        "node_batch.sh: 'tiny/llama' (a family to build) is no family of matrix.yaml",
    ]  # fmt: skip
    entries.write_text("l0-llama:-:L0-lora-ddp-llama::llama:tiny/llama\nl1-qwen:-:L1-save-resume-qwen::qwen\n")
    good = _bash("check", str(entries), "llama")
    assert good.returncode == 0 and "2 entries, 1 families to build: ok" in good.stdout, good.stderr


def test_launch_refuses_entries_that_do_not_check(tmp_path: Path) -> None:
    tool, parts, entries, _ = _stubbed(tmp_path)
    work = tmp_path / "work"
    done = subprocess.run(
        ["bash", str(tool), "launch", str(parts), str(work), str(entries), "tiny/llama"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "'tiny/llama' (a family to build)" in done.stderr
    assert not (work / "batch").exists() and not (work / "repo").exists()


def test_start_runs_no_cell_when_the_tiny_builder_refuses_its_arguments(tmp_path: Path) -> None:
    tool, parts, entries, events = _stubbed(tmp_path)
    (tool.parent / "make_tiny_model.py").write_text("import sys\nsys.exit(2)\n")  # a bad family list
    work = tmp_path / "work"
    subprocess.run(
        ["bash", str(tool), "start", str(parts), str(work), str(entries)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    log = (work / "batch" / "batch.log").read_text()
    assert (work / "batch" / "done").exists() and "TINY rc=2" in log and "no cell started" in log
    assert "cells start" not in events.read_text()
