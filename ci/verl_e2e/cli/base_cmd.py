"""`base-run`: the same cell on the merge base, from the runner's cache or run once and kept there."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TextIO

from verl_e2e.cli.run_cmd import request_from
from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import UsageError
from verl_e2e.plan.cells import Cell
from verl_e2e.report import basecache
from verl_e2e.run import launch


def cmd_base_run(args: argparse.Namespace, stdout: TextIO) -> int:
    matrix = load_matrix(args.matrix)
    cell = launch.cell_from_file(args.cell, args.cell_id)
    fields = base_fields(args, cell)
    root = (args.cache or Path(matrix.defaults.host_cache)).resolve()
    if basecache.fetch(root, fields, args.out) is not None:
        stdout.write(f"verl-e2e: {cell.id}: the merge base's result from the cache ({fields['merge_base'][:12]})\n")
        return 0
    if not args.run:
        stdout.write(f"verl-e2e: {cell.id}: no result on the merge base {fields['merge_base'][:12]} is cached\n")
        return 0
    verdict = launch.run_prepared(cell, request_from(args), matrix, stdout, args.image)
    # the environment's word (Blocked) says nothing about the base: not kept; nor a run of another commit
    if verdict.result != "Blocked" and basecache.store(root, fields, args.out) is None:
        stdout.write(f"verl-e2e: {cell.id}: the run did not test the merge base {fields['merge_base'][:12]}\n")
    stdout.write(f"verl-e2e: {cell.id} on the merge base: {verdict.result}\n")
    return 0


def base_fields(args: argparse.Namespace, cell: Cell) -> dict[str, str]:
    """The cache key of the cell on the merge base, from the plan and the change's own run."""
    try:
        plan = json.loads(args.cell.read_text(encoding="utf-8"))
        provenance = json.loads((args.like / "provenance.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"base-run: cannot read the plan or --like {args.like}/provenance.json ({exc})") from None
    merge_base = args.merge_base or str((plan.get("context") or {}).get("merge_base") or "")
    image = provenance.get("image") or {}
    verl = provenance.get("verl") or {}
    environment = str(image.get("tag") or verl.get("full_commit") or verl.get("commit") or "")
    if not merge_base or not environment:
        raise UsageError(
            "base-run: the plan has no merge base (plan with --repo, or pass --merge-base) or the run dir no "
            "image/verl commit; nothing to key the base result by"
        )
    return {"cell_id": cell.id, "merge_base": merge_base, "environment": environment, "runner": ",".join(cell.runs_on)}
