"""Merge the import probe's per-process function records into the run dir's bridge-functions.json.

Each of verl's processes (its driver, Ray workers, their children) appends one line per Bridge
function it ran to trace/<phase>/functions-<pid>.jsonl (see probe/sitecustomize.py). The driver folds
them into one record after every phase, so a cell stopped later still keeps what ran before:

    {"functions": [{"file": "src/megatron/bridge/peft/lora.py", "qualname": "LoRA.transform",
                    "line": 120, "phases": ["run"]}, ...],
     "processes": {"run": 5}, "python": "3.12.3",
     "lines": {"run": {"src/megatron/bridge/peft/lora.py": [[120, 131], [140, 140]], ...}},
     "blobs": {"src/megatron/bridge/peft/lora.py": "<git blob id of the file the lines are of>", ...}}

Standard library only (runs inside the verl image). Lines that are not records are skipped.
"""

import hashlib
import json
import sys
from pathlib import Path

MAX_LINE = 4096
MAX_FUNCTIONS = 200_000


def _json_lines(path):
    """The JSON objects of a probe's file, one a line; overlong lines and lines cut off by a kill skipped."""
    with open(path, "rb") as fh:
        for raw in fh:
            if len(raw) > MAX_LINE:
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec


def _records(path):
    for rec in _json_lines(path):
        if isinstance(rec.get("file"), str) and isinstance(rec.get("qualname"), str):
            line = rec.get("line")
            yield rec["file"], rec["qualname"], line if isinstance(line, int) else 0


def blob_id(path):
    """The git blob id of a file (what `git hash-object` prints): the plan compares a change's base file
    with the file a cell's line records are of by this id, so line numbers are never read against
    another version of the file."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()  # git's object id


def _blobs(root, files):
    out = {}
    for file in sorted(files):
        target = Path(root, file)
        if not file.startswith("src/") or ".." in Path(file).parts or not target.is_file():
            continue
        try:
            out[file] = blob_id(target)
        except OSError:
            continue
    return out


def merge(trace_dir, out_file, root=None):
    """Fold every phase's records under `trace_dir` into `out_file`; returns the function count.
    `root`: the Bridge checkout the cell ran, whose files' blob ids go with the line records."""
    seen = {}
    processes = {}
    for phase_dir in sorted(p for p in Path(trace_dir).glob("*") if p.is_dir()):
        files = sorted(phase_dir.glob("functions-*.jsonl"))
        processes[phase_dir.name] = len(files)
        for path in files:
            for key in _records(path):
                if key not in seen and len(seen) >= MAX_FUNCTIONS:
                    continue
                phases = seen.setdefault(key, [])
                if phase_dir.name not in phases:
                    phases.append(phase_dir.name)
    functions = [{"file": f, "qualname": q, "line": n, "phases": phases} for (f, q, n), phases in sorted(seen.items())]
    data = {"functions": functions, "processes": processes, "python": sys.version.split()[0]}
    lines = _merge_lines(trace_dir)
    if lines:
        data["lines"] = lines
        if root is not None:
            data["blobs"] = _blobs(root, {f for per_file in lines.values() for f in per_file})
    tmp = Path(str(out_file) + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out_file)
    return len(functions)


MAX_LINES = 2_000_000


def _line_records(path):
    """(file, line) pairs of a probe's lines-<pid>.txt (`F<TAB>index<TAB>path` declares a file)."""
    files = {}
    with open(path, "rb") as fh:
        for raw in fh:
            parts = raw.decode("utf-8", "replace").rstrip("\n").split("\t")
            if len(parts) == 3 and parts[0] == "F" and parts[1].isdigit():
                files[parts[1]] = parts[2][:500]
            elif len(parts) == 2 and parts[0] in files and parts[1].isdigit():
                yield files[parts[0]], int(parts[1])


def _ranges(numbers):
    """Sorted line numbers as [[first, last], ...] runs (what the plan compares changed lines with)."""
    out = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def _merge_lines(trace_dir):
    """{phase: {file: [[first, last], ...]}}: every Bridge line a phase's processes ran."""
    merged, count = {}, 0
    for phase_dir in sorted(p for p in Path(trace_dir).glob("*") if p.is_dir()):
        seen = {}
        for path in sorted(phase_dir.glob("lines-*.txt")):
            for file, line in _line_records(path):
                lines = seen.setdefault(file, set())
                if line not in lines and count < MAX_LINES:
                    lines.add(line)
                    count += 1
        if seen:
            merged[phase_dir.name] = {f: _ranges(n) for f, n in sorted(seen.items())}
    return merged


MAX_UPDATES = 20_000
UPDATE_KEYS = {
    "pid": int,
    "optimizer": int,
    "class": str,
    "step": int,
    "params": int,
    "elements": int,
    "lr": float,
    "grad_norm": float,
    "grads_missing": int,
    "weight_norm": float,
    "update_norm": float,
    "changed_tensors": int,
    "zero_before": int,
    "zero_after": int,
    "sum_before": float,
    "sum_after": float,
    "model_zero_before": int,  # the model's own weights at a process's first step (mixed precision)
    "model_sum_before": float,
}


def _update_records(path):
    for rec in _json_lines(path):
        kept = {}
        for key, kind in UPDATE_KEYS.items():
            value = rec.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                continue
            if kind is str and isinstance(value, str):
                kept[key] = value[:80]
            elif kind is not str and isinstance(value, (int, float)):
                kept[key] = kind(value)
        if "step" in kept and "optimizer" in kept:
            yield kept


def merge_updates(trace_dir, out_file):
    """Fold the probe's optimizer-step records (updates-<pid>.jsonl) into `out_file`; returns the count.

    {"steps": [{"phase": "run", "pid": 12, "optimizer": 1, "class": "FusedAdam", "step": 1, "params": 56,
                "elements": 80000, "lr": 1e-06, "grad_norm": 0.06, "grads_missing": 0,
                "weight_norm": 9.1, "update_norm": 0.0004}, ...]}
    Nothing is written when no process recorded a step (an old image, or a run that never stepped).
    """
    steps = []
    for phase_dir in sorted(p for p in Path(trace_dir).glob("*") if p.is_dir()):
        for path in sorted(phase_dir.glob("updates-*.jsonl")):
            for rec in _update_records(path):
                if len(steps) < MAX_UPDATES:
                    steps.append({"phase": phase_dir.name, **rec})
    if not steps:
        return 0
    tmp = Path(str(out_file) + ".tmp")
    tmp.write_text(json.dumps({"steps": steps}, indent=1) + "\n")
    tmp.replace(out_file)
    return len(steps)
