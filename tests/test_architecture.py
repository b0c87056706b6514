"""The package's shape: stage packages in one order, imports only downward, no circles, small parts.

Reads the sources with `ast` (no import runs), so a lazy import inside a function counts the same as
one at the top: an upward import hidden in a function body is still an upward import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ci" / "verl_e2e"
# bottom to top; "" is the floor: the package root and the modules left at its top
LAYERS = ("", "config", "github", "plan", "judge", "run", "report", "cli")
MAX_TOP_MODULES, MIN_STAGES, MAX_MODULE_LINES, MAX_CLASS_LINES = 12, 5, 400, 150


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every verl_e2e import; `from verl_e2e.x import y` names module
    `verl_e2e.x.y` where that is a module, else `verl_e2e.x`."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "verl_e2e":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if sub in known else node.module), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "verl_e2e":
                    yield alias.name, node.lineno


def _stage(module: str) -> str:
    if module == "verl_e2e.__main__":
        return "cli"  # `python -m verl_e2e` is the CLI's second door
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else ""


def _graph() -> dict[str, list[tuple[str, int]]]:
    mods = _modules()
    known = set(mods)
    return {m: [(i, line) for i, line in _imports(p, known) if i != m] for m, p in mods.items()}


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = {m for m in _modules() if _stage(m) not in LAYERS}
    assert not unknown, f"modules in a package no layer names: {sorted(unknown)}"


def test_imports_only_go_down_between_stages() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = [
        f"{m}:{line} imports {i} ({_stage(m) or 'floor'} -> {_stage(i) or 'floor'})"
        for m, deps in _graph().items()
        for i, line in deps
        if rank[_stage(i)] > rank[_stage(m)]
    ]
    assert not upward, "imports climb a floor:\n" + "\n".join(upward)


def test_the_import_graph_has_no_circles() -> None:
    edges = {m: sorted({i for i, _ in deps if i in _modules()}) for m, deps in _graph().items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = 1
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                cycle.extend([*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*trail, nxt]):
                return True
        state[node] = 2
        return False

    for start in sorted(edges):
        if state.get(start) is None and visit(start, [start]):
            break
    assert not cycle, "import circle: " + " -> ".join(cycle)


def test_the_top_is_small_and_the_stages_are_packages_with_a_face() -> None:
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top
    stages = [name for name in LAYERS if name and (PKG / name / "__init__.py").is_file()]
    assert len(stages) >= MIN_STAGES and stages == [n for n in LAYERS if n]
    for name in stages:
        doc = ast.get_docstring(ast.parse((PKG / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 30, f"{name}/__init__.py: the face says what the stage is for"


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_modules_and_classes_stay_small(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) < MAX_MODULE_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"class {node.name}: {size} lines"


def test_the_run_stage_never_reads_the_command_line() -> None:
    """run-cell's inputs arrive as one CellRequest: nothing below the CLI parses or walks argparse."""
    for path in PKG.rglob("*.py"):
        if _stage(_module(path)) == "cli":
            continue
        text = path.read_text(encoding="utf-8")
        assert "argparse.Namespace" not in text, f"{path.relative_to(PKG)} takes an argparse namespace"
