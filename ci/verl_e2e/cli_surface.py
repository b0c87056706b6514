"""`verl-e2e surface`: rebuild the shipped index of verl's surface on Bridge from two checkouts.

The index (`data/surface.json`) records the verl and Bridge commits it was read from; rebuild it when
verl's pin moves (`defaults.verl_ref` in matrix.yaml) or Bridge gains models. Without --verl the
import list of the current index is kept, so a Bridge-only refresh needs no verl checkout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from verl_e2e import surface
from verl_e2e.resources import data_dir


def add_command(sub: Any) -> None:
    p = sub.add_parser(
        "surface",
        help="rebuild the index of what verl imports from Bridge, what that reaches, who registers which model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--bridge", type=Path, required=True, metavar="DIR", help="a Megatron-Bridge checkout or sdist tree")
    p.add_argument("--verl", type=Path, metavar="DIR", help="a verl checkout (default: keep the index's imports)")
    p.add_argument("--out", type=Path, metavar="FILE", help="where to write it (default: the shipped index)")


def cmd_surface(args: argparse.Namespace, stdout: TextIO) -> int:
    previous = surface.shipped()
    built = surface.build(args.bridge, args.verl, previous)
    out = args.out or data_dir() / "surface.json"
    out.write_text(json.dumps(surface.to_json(built), indent=0, sort_keys=True) + "\n", encoding="utf-8")
    registered = sorted({a for archs in built.architectures.values() for a in archs})
    stdout.write(
        f"verl-e2e surface: {out}: verl {built.verl_commit[:12]} imports {len(built.verl_imports)} Bridge symbols; "
        f"Bridge {built.bridge_commit[:12]}: {len(built.reachable)} modules on the surface, "
        f"{len(built.unreachable)} off it, {len(registered)} registered architectures\n"
    )
    return 0
