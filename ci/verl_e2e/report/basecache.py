"""Results of cells on the merge base, kept on the runner, so a failure is compared without a rerun.

An entry is keyed by what makes two runs of a cell the same experiment: the cell id, the merge base,
the environment (the image tag, a content hash of Dockerfile, base image, verl commit and extra
deps; or the verl commit for the local backend) and the runner labels. It holds a run dir as the
host wrote it. Nothing read back from it is trusted: the report re-judges it like any other run dir,
and the copy in and out takes only plain files (`safefs`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from verl_e2e import safefs

FIELDS = ("cell_id", "merge_base", "environment", "runner")


def key(fields: Mapping[str, str]) -> str:
    missing = [f for f in FIELDS if not fields.get(f)]
    if missing:
        raise ValueError(f"a base-run key needs {', '.join(missing)}")
    text = json.dumps({f: fields[f] for f in FIELDS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def entry(root: Path, fields: Mapping[str, str]) -> Path:
    return root / "base-runs" / key(fields)


def _copy(src: Path, dst: Path) -> None:
    """The run dir's plain files (and its kept attempts' one level down), never a link."""
    dst.mkdir(parents=True, exist_ok=True)
    for item in sorted(src.iterdir()):
        if item.is_symlink():
            continue
        if item.is_dir() and item.name.startswith("attempt-"):
            _copy(item, dst / item.name)
        elif item.is_file():
            safefs.copy_out(src, dst, [item.name])


def tested(run_dir: Path) -> str:
    """The Bridge commit a run dir's provenance says it tested ("" when it says none)."""
    try:
        provenance = json.loads(safefs.read_text(run_dir / "provenance.json"))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return ""
    bridge = provenance.get("bridge") if isinstance(provenance, dict) else None
    return str(bridge.get("full_commit") or "") if isinstance(bridge, dict) else ""


def lookup(root: Path, fields: Mapping[str, str]) -> Path | None:
    """The cached run dir for exactly these fields whose provenance shows the merge base, or None."""
    path = entry(root, fields)
    try:
        stored = json.loads(safefs.read_text(path / "key.json"))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None
    if stored != {f: fields[f] for f in FIELDS} or not (path / "cell.json").is_file():
        return None
    return path if tested(path) == fields["merge_base"] else None


def fetch(root: Path, fields: Mapping[str, str], out: Path) -> Path | None:
    """Copy the cached base run dir to `out` (a fresh dir); None when there is none."""
    found = lookup(root, fields)
    if found is None:
        return None
    shutil.rmtree(out, ignore_errors=True)
    _copy(found, out)
    (out / "key.json").unlink(missing_ok=True)
    return out


def store(root: Path, fields: Mapping[str, str], run_dir: Path) -> Path | None:
    """Keep a base run dir under its key (replacing an older one atomically); None, and nothing kept,
    when the run dir did not test the merge base itself."""
    if tested(run_dir) != fields["merge_base"]:
        return None
    path = entry(root, fields)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _copy(run_dir, tmp)
    safefs.write_text(tmp / "key.json", json.dumps({f: fields[f] for f in FIELDS}, sort_keys=True) + "\n")
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    return path
