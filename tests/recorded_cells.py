"""Recorded-cell doubles: what `data/runtime.json` holds for one real cell (the Bridge functions it ran,
the lines it ran of each file and the git blob id of the file it ran them in), built from a test's own
source text so line records and blob ids agree as a real record's do with its Bridge checkout."""

from __future__ import annotations

from collections.abc import Iterable

from verl_e2e.plan.runtime import Ran, blob_id


def recorded(
    path: str,
    source: str,
    functions: Iterable[str],
    lines: Iterable[int],
    *,
    family: str = "qwen",
    level: int = 0,
    variant: str = "lora-ddp",
    cells: int = 1,
) -> list[Ran]:
    """`cells` records of one family's cell that ran `functions` and `lines` of `path` at `source`."""
    blob = blob_id(source.encode())
    ran = frozenset(functions)
    took = frozenset(lines)
    return [Ran(level, variant, family, "b", "v", {path: ran}, {path: took}, {path: blob}) for _ in range(cells)]
