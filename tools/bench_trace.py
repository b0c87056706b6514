#!/usr/bin/env python3
"""What the Bridge function records cost: a synthetic Bridge tree of N functions (plus as many other
functions outside it), each called M times, run with and without the probe's tracer.

    python3.12 tools/bench_trace.py [--functions 5000] [--calls 200] [--repeat 3]

Prints the best wall time of each mode, the overhead and the records written. Needs Python 3.12+
(`sys.monitoring`); rerun it to check a change to containers/probe/sitecustomize.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "containers" / "probe"


def make_tree(root: Path, functions: int) -> None:
    for name in ("bridge", "other"):
        pkg = root / "src" / "megatron" / name if name == "bridge" else root / "other"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text("")
        body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(functions))
        body += f"FUNCS = [{', '.join(f'f{i}' for i in range(functions))}]\n"
        (pkg / "mod.py").write_text(body)
    (root / "src" / "megatron" / "__init__.py").write_text("")
    (root / "work.py").write_text(
        "import sys\nfrom megatron.bridge import mod as b\nfrom other import mod as o\n"
        "calls = int(sys.argv[1])\n"
        "for _ in range(calls):\n    for f in b.FUNCS:\n        f(1)\n    for f in o.FUNCS:\n        f(1)\n"
    )


def run(root: Path, calls: int, traced: bool) -> float:
    env = dict(os.environ, PYTHONPATH=f"{PROBE}:{root / 'src'}:{root}")
    if traced:
        env |= {"VERL_E2E_TRACE_DIR": str(root / "trace"), "VERL_E2E_TRACE_ROOT": str(root)}
    started = time.perf_counter()
    subprocess.run([sys.executable, str(root / "work.py"), str(calls)], env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", type=int, default=5000)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if sys.version_info < (3, 12):
        print("bench_trace: needs Python 3.12+ (sys.monitoring)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, args.functions)
        plain = min(run(root, args.calls, False) for _ in range(args.repeat))
        traced = min(run(root, args.calls, True) for _ in range(args.repeat))
        records = sum(len(p.read_text().splitlines()) for p in (root / "trace").glob("*.jsonl"))
    calls = 2 * args.functions * args.calls
    print(
        f"{calls:,} calls of {2 * args.functions:,} functions: plain {plain:.3f} s, traced {traced:.3f} s, "
        f"overhead {100 * (traced - plain) / plain:+.1f}% ({records:,} records over {args.repeat} runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
