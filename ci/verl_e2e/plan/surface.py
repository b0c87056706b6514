"""verl's surface on Bridge as data: what verl imports, what that reaches, and who registers which model.

verl imports a dozen Bridge symbols (AutoBridge, create_peft, create_ddp_config, the checkpointing
helpers, the param mappings ...). Everything those modules import, at module level or inside a function,
is on the surface; a changed `src/` file outside it cannot break verl's PPO loop, and the plan says so.
The index ships as `data/surface.json` with the verl and Bridge commits it was read from, and
`verl-e2e surface --bridge DIR --verl DIR` rebuilds it from two checkouts; `plan --repo` reads the
registrations from the PR's own tree instead of the index.
"""

from __future__ import annotations

import ast
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from verl_e2e.errors import UsageError
from verl_e2e.plan.callgraph import module_of, reachable_symbols, unreached_symbols
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.registry import SHARED, architectures_by_file, local_imports

MODELS = "src/megatron/bridge/models/"


@dataclass(frozen=True)
class Surface:
    verl_commit: str
    bridge_commit: str
    verl_imports: tuple[str, ...]  # "megatron.bridge.peft.utils:create_peft"
    reachable: frozenset[str]  # repository paths of the Bridge modules those imports reach
    architectures: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # path -> HF architectures
    symbols: Mapping[str, frozenset[str]] = field(default_factory=dict)  # path -> names nothing verl calls reaches
    verl_attributes: tuple[str, ...] = ()  # attribute names verl uses where it touches Bridge objects
    unreachable: frozenset[str] = frozenset()  # modules of the tree that nothing verl imports reaches

    def on_surface(self, path: str) -> bool:
        """False only for a module the index knows and knows to be unreached (newer code counts as on)."""
        return path not in self.unreachable

    def unreached(self, path: str, scopes: tuple[str, ...]) -> list[str]:
        """The changed scopes of `path` when none of them is reached by verl's calls, else []."""
        unreached = self.symbols.get(path, frozenset())
        if path not in self.reachable or not scopes or not all(s in unreached for s in scopes):
            return []
        return list(scopes)

    def entry_modules(self) -> list[str]:
        return sorted({i.split(":", 1)[0] for i in self.verl_imports})


def verl_imports(verl_root: Path) -> list[str]:
    """`module:symbol` for every `from megatron.bridge... import symbol` in verl's package (not its tests)."""
    found: dict[str, None] = {}
    for path in sorted((verl_root / "verl").rglob("*.py")):
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("megatron.bridge"):
                for alias in node.names:
                    found[f"{node.module}:{alias.name}"] = None
    return sorted(found)


def verl_attributes(verl_root: Path) -> list[str]:
    """Attribute names verl uses in the files that import Bridge (the methods it calls on Bridge objects)."""
    found: set[str] = set()
    for path in sorted((verl_root / "verl").rglob("*.py")):
        text = path.read_bytes()
        if b"megatron.bridge" not in text and b"bridge" not in text:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        found |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    return sorted(found)


def _module_path(module: str, sources: Mapping[str, bytes]) -> list[str]:
    base = "src/" + module.replace(".", "/")
    return [p for p in (f"{base}.py", f"{base}/__init__.py") if p in sources]


def reachable(sources: Mapping[str, bytes], entries: list[str]) -> set[str]:
    """Transitive closure of imports (any depth, function-level ones too) from the entry modules."""
    todo = [p for module in entries for p in _module_path(module, sources)]
    seen = set(todo)
    while todo:
        path = todo.pop()
        for dep in local_imports(path, sources[path]):
            if dep in sources and dep not in seen:
                seen.add(dep)
                todo.append(dep)
            package_init = str(Path(dep).parent / "__init__.py")
            if package_init in sources and package_init not in seen:  # importing a.b.c runs a/b/__init__
                seen.add(package_init)
                todo.append(package_init)
    return seen


def _commit(root: Path) -> str:
    proc = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def bridge_sources(bridge_root: Path) -> dict[str, bytes]:
    src = bridge_root / "src" / "megatron" / "bridge"
    if not src.is_dir():
        raise UsageError(
            f"--bridge {bridge_root}: no src/megatron/bridge in it; pass a Megatron-Bridge checkout or unpacked sdist"
        )
    return {str(p.relative_to(bridge_root)): p.read_bytes() for p in sorted(src.rglob("*.py"))}


def build(
    bridge_root: Path, verl_root: Path | None, previous: Surface | None = None, bridge_commit: str | None = None
) -> Surface:
    """Read a Bridge tree (and a verl tree, or keep the previous import list) into a Surface. An sdist
    tree has no git history, so its commit comes from `bridge_commit` (a checkout's HEAD must agree)."""
    sources = bridge_sources(bridge_root)
    commit = _commit(bridge_root)
    if bridge_commit is not None and commit != "unknown" and not commit.startswith(bridge_commit):
        raise UsageError(
            f"--bridge-commit {bridge_commit}: {bridge_root} is a checkout at {commit[:12]}; "
            "drop --bridge-commit or check out that commit"
        )
    commit = commit if commit != "unknown" else (bridge_commit or commit)
    if verl_root is not None:
        imports, verl_commit = verl_imports(verl_root), _commit(verl_root)
        attributes = verl_attributes(verl_root)
        if not imports:
            raise UsageError(f"--verl {verl_root}: no megatron.bridge imports under verl/; pass a verl checkout")
    elif previous is not None:
        imports, verl_commit = list(previous.verl_imports), previous.verl_commit
        attributes = list(previous.verl_attributes)
    else:
        raise UsageError("surface: pass --verl DIR (no shipped index to take verl's imports from)")
    entries = sorted({i.split(":", 1)[0] for i in imports} | {"megatron.bridge"})
    models = {p: t for p, t in sources.items() if p.startswith(MODELS)}
    archs = {
        p: tuple(a)
        for p, a in architectures_by_file(models).items()
        if p.count("/") > 4 and p.split("/")[4] not in SHARED
    }
    registry_loaded = [f"{module_of(p)}:*" for p in models if p.count("/") > 4 and p.split("/")[4] not in SHARED]
    reached = reachable_symbols(sources, [*imports, *registry_loaded], attributes)
    symbols = {p: frozenset(n) for p, n in unreached_symbols(sources, reached).items()}
    files = frozenset(reachable(sources, entries))
    symbols = {p: n for p, n in symbols.items() if p in files}
    unreached = frozenset(sources) - files
    return Surface(verl_commit, commit, tuple(imports), files, archs, symbols, tuple(attributes), unreached)


def off_surface(s: Surface, file: ChangedFile) -> str | None:
    """Why a src/ change cannot matter to verl: its module is one verl never reaches, or the change is
    only inside functions nothing verl calls reaches; None otherwise (or where the index cannot say)."""
    if not file.path.startswith("src/megatron/bridge/") or file.status == "A" or not file.path.endswith(".py"):
        return None
    rest = file.path.removeprefix(MODELS)
    if file.path.startswith(MODELS) and "/" in rest and rest.split("/", 1)[0] not in SHARED:
        return None  # model directories are loaded through the registry: file-wise on the surface
    if not any(s.on_surface(p) for p in file.paths):
        entries = ", ".join(m.removeprefix("megatron.bridge.") or "megatron.bridge" for m in s.entry_modules()[:4])
        return (
            f"not on verl's surface: none of the Bridge modules verl {s.verl_commit[:7]} imports "
            f"({entries}, ...) reaches it by import"
        )
    unreached = [] if file.module_level or file.diff_lines is None else s.unreached(file.path, file.scopes)
    if not unreached:
        return None
    more = " ..." if len(unreached) > 3 else ""
    return (
        f"not on verl's surface: the change is inside {', '.join(unreached[:3])}{more}, which no Bridge "
        f"function verl {s.verl_commit[:7]} calls reaches"
    )


def to_json(surface: Surface) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "verl_commit": surface.verl_commit,
        "bridge_commit": surface.bridge_commit,
        "verl_imports": list(surface.verl_imports),
        "reachable": sorted(surface.reachable),
        "architectures": {p: list(a) for p, a in sorted(surface.architectures.items())},
        "unreached": {p: sorted(n) for p, n in sorted(surface.symbols.items())},
        "verl_attributes": list(surface.verl_attributes),
        "unreachable": sorted(surface.unreachable),
    }


def from_json(data: Mapping[str, Any]) -> Surface:
    return Surface(
        data["verl_commit"],
        data["bridge_commit"],
        tuple(data["verl_imports"]),
        frozenset(data["reachable"]),
        {p: tuple(a) for p, a in data["architectures"].items()},
        {p: frozenset(n) for p, n in data.get("unreached", {}).items()},
        tuple(data.get("verl_attributes", ())),
        frozenset(data.get("unreachable", ())),
    )


@cache
def shipped() -> Surface:
    """The index shipped with the package (rebuilt by `verl-e2e surface`)."""
    text = resources.files("verl_e2e").joinpath("data/surface.json").read_text(encoding="utf-8")
    return from_json(json.loads(text))
