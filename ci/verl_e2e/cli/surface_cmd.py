"""`verl-e2e surface`: rebuild the shipped index of verl's surface on Bridge from two checkouts, and
fold real cells' records of what they executed into the shipped runtime records.

The index (`data/surface.json`) records the verl and Bridge commits it was read from; rebuild it when
verl's pin moves (`defaults.verl_ref` in matrix.yaml) or Bridge gains models. Without --verl the
import list of the current index is kept, so a Bridge-only refresh needs no verl checkout.
`--runs RUN_DIR ...` merges each run dir's `bridge-functions.json` into `data/runtime.json` (a newer
record of the same cell replaces the older one); the scheduled run does this on the base branch.
With `--runs`, `--bridge DIR` names the checkout the runs ran: line records written before the driver
recorded each file's blob id get them from it (line numbers are only ever compared within one blob).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from verl_e2e.cli.progress import Progress
from verl_e2e.errors import UsageError
from verl_e2e.plan import runtime, surface
from verl_e2e.resources import data_dir


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "surface",
        help="rebuild the index of what verl imports from Bridge, what that reaches, who registers which model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bridge", type=Path, metavar="DIR", help="a Megatron-Bridge checkout or sdist tree")
    p.add_argument(
        "--bridge-commit",
        metavar="SHA",
        type=_sha,
        help="the commit an sdist tree (no .git) was cut from, recorded in the index (a checkout records its HEAD)",
    )
    p.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="real run dirs whose bridge-functions.json says what each cell ran (merged into data/runtime.json)",
    )
    p.add_argument("--verl", type=Path, metavar="DIR", help="a verl checkout (default: keep the index's imports)")
    p.add_argument("--out", type=Path, metavar="FILE", help="where to write it (default: the shipped index)")


def cmd_surface(args: argparse.Namespace, stdout: TextIO, progress: Progress) -> int:
    if args.runs:
        return _merge_runs(args, stdout, progress)
    if args.bridge is None:
        raise UsageError("surface: pass --bridge DIR to rebuild the index, or --runs RUN_DIR ... to merge records")
    previous = surface.shipped()
    what = f"--bridge {args.bridge}" + (f" and --verl {args.verl}" if args.verl else " (verl's imports kept)")
    with progress.step(f"reading every module of {what} and following verl's imports (a minute or so)", slow=True):
        built = surface.build(args.bridge, args.verl, previous, args.bridge_commit)
    out = args.out or data_dir() / "surface.json"
    with progress.step(f"writing {out}"):
        out.write_text(json.dumps(surface.to_json(built), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    registered = sorted({a for archs in built.architectures.values() for a in archs})
    stdout.write(
        f"verl-e2e surface: {out}: verl {built.verl_commit[:12]} imports {len(built.verl_imports)} Bridge symbols; "
        f"Bridge {built.bridge_commit[:12]}: {len(built.reachable)} modules on the surface, "
        f"{len(built.unreachable)} off it, {len(registered)} registered architectures\n"
    )
    if built.bridge_commit == "unknown":
        stdout.write("verl-e2e surface: the Bridge tree has no git history; pass --bridge-commit SHA to record it\n")
    return 0


def _sha(text: str) -> str:
    """A commit id of 7 to 40 hex digits, lower-cased (argparse reports the error and exits 2)."""
    if not 7 <= len(text) <= 40 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a commit id (7 to 40 hex digits)")
    return text.lower()


def _merge_runs(args: argparse.Namespace, stdout: TextIO, progress: Progress) -> int:
    records = []
    for run_dir in args.runs:
        with progress.step(f"reading {run_dir}/bridge-functions.json"):
            ran = runtime.from_run_dir(run_dir, args.bridge)
        if ran is None:
            raise UsageError(f"surface --runs {run_dir}: needs cell.json, provenance.json and bridge-functions.json")
        if not ran.functions:
            raise UsageError(f"surface --runs {run_dir}: bridge-functions.json records no Bridge function")
        records.append(ran)
        count = sum(len(q) for q in ran.functions.values())
        stdout.write(f"verl-e2e surface: {ran.cell} at Bridge {ran.bridge_commit[:12]}: {count} functions\n")
    out = args.out or data_dir() / "runtime.json"
    merged = runtime.merge(runtime.shipped(), records)  # --out: the merged index elsewhere, shipped one untouched
    out.write_text(json.dumps(runtime.to_json(merged), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    stdout.write(f"verl-e2e surface: {out}: {len(merged)} recorded cell(s)\n")
    return 0
