"""Merge the import probe's per-process function records into the run dir's bridge-functions.json.

Each of verl's processes (its driver, Ray workers, their children) appends one line per Bridge
function it ran to trace/<phase>/functions-<pid>.jsonl (see probe/sitecustomize.py). The driver folds
them into one record after every phase, so a cell stopped later still keeps what ran before:

    {"functions": [{"file": "src/megatron/bridge/peft/lora.py", "qualname": "LoRA.transform",
                    "line": 120, "phases": ["run"]}, ...],
     "processes": {"run": 5}, "python": "3.12.3"}

Standard library only (runs inside the verl image). Lines that are not records are skipped.
"""

import json
import sys
from pathlib import Path

MAX_LINE = 4096
MAX_FUNCTIONS = 200_000


def _records(path):
    with open(path, "rb") as fh:
        for raw in fh:
            if len(raw) > MAX_LINE:
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                continue  # a line cut off by a kill
            if isinstance(rec, dict) and isinstance(rec.get("file"), str) and isinstance(rec.get("qualname"), str):
                line = rec.get("line")
                yield rec["file"], rec["qualname"], line if isinstance(line, int) else 0


def merge(trace_dir, out_file):
    """Fold every phase's records under `trace_dir` into `out_file`; returns the function count."""
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
    functions = [
        {"file": f, "qualname": q, "line": n, "phases": phases} for (f, q, n), phases in sorted(seen.items())
    ]
    data = {"functions": functions, "processes": processes, "python": sys.version.split()[0]}
    tmp = Path(str(out_file) + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out_file)
    return len(functions)
