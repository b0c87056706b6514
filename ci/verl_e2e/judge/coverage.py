"""Changed-code coverage: which of the PR's changed functions a cell actually executed.

A Pass says the cell ran; it says something about the change only if the cell ran the changed code.
The plan records the PR's changed functions (`changes.json`, `functions`: the innermost def/class of
every changed line, per path), and every process of a cell records the Bridge functions it started
(`bridge-functions.json`). Their intersection is what the verdict can vouch for: "executed 3 of 4
changed functions; not executed: `X.y`". A cell that executed none of them says its Pass proves
nothing about the change. Pure: both records in, a `Coverage` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MAX_NAMED = 5


@dataclass(frozen=True)
class Coverage:
    executed: tuple[str, ...]  # "path:Qual.name" of changed functions the cell ran
    not_executed: tuple[str, ...]

    @property
    def total(self) -> int:
        return len(self.executed) + len(self.not_executed)

    def summary(self) -> str:
        """'executed 3 of 4 changed functions; not executed: `X.y`' (names shortened to the function)."""
        text = f"executed {len(self.executed)} of {self.total} changed function{'s' if self.total != 1 else ''}"
        if self.not_executed:
            named = [f"`{n.split(':', 1)[1]}`" for n in self.not_executed[:MAX_NAMED]]
            more = len(self.not_executed) - MAX_NAMED
            text += "; not executed: " + ", ".join(named) + (f" and {more} more" if more > 0 else "")
        return text

    def limitation(self) -> str | None:
        if self.total and not self.executed:
            return (
                f"this cell executed none of the PR's {self.total} changed function(s): its result proves "
                "nothing about the change itself"
            )
        return None


def _normal(qualname: str) -> str:
    return qualname.replace(".<locals>", "")


def measure(changed: Mapping[str, Sequence[str]], ran: Iterable[tuple[str, str]]) -> Coverage | None:
    """`changed`: path -> qualnames the plan names (Bridge sources only count); `ran`: (path, qualname)
    the cell recorded. A plain name (a plan made from a diff alone) matches a recorded function of
    that name. None when the change names no Bridge function."""
    seen: dict[str, set[str]] = {}
    for path, qualname in ran:
        seen.setdefault(path, set()).add(_normal(qualname))
    executed: list[str] = []
    missing: list[str] = []
    for path, names in sorted(changed.items()):
        if not path.startswith("src/megatron/bridge/") or not path.endswith(".py"):
            continue
        there = seen.get(path, set())
        short = {q.rsplit(".", 1)[-1] for q in there}
        for name in dict.fromkeys(_normal(n) for n in names):
            hit = name in there if "." in name else name in short or name in there
            (executed if hit else missing).append(f"{path}:{name}")
    if not executed and not missing:
        return None
    return Coverage(tuple(executed), tuple(missing))
