"""Shared fixtures: the shipped matrix, a CLI runner in-process, and a subprocess runner."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from verl_e2e.cli.main import main
from verl_e2e.config.matrix import Matrix, load_matrix

ROOT = Path(__file__).resolve().parents[1]


def _shared() -> Path:
    """The team's shared data (verl log excerpts), read in place: $VERL_E2E_SHARED, ../shared or /work/shared."""
    candidates = [os.environ.get("VERL_E2E_SHARED", ""), str(ROOT.parent / "shared"), "/work/shared"]
    return next((Path(c) for c in candidates if c and (Path(c) / "reference").is_dir()), ROOT.parent / "shared")


SHARED = _shared()


def load_tool(name: str) -> ModuleType:
    """One of tools/*.py as a module (the tools are scripts, not a package), for tests of its functions."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine_missing(reason: str) -> None:
    """No Docker engine: skip with the reason, except where the engine is promised (CI sets
    VERL_E2E_REQUIRE_ENGINE=1 after starting dockerd), where it is a failure, never a silent skip."""
    if os.environ.get("VERL_E2E_REQUIRE_ENGINE") == "1":
        pytest.fail(f"VERL_E2E_REQUIRE_ENGINE=1 but {reason}")
    pytest.skip(reason)


def prepared(path: Path, what: str, step: str = "") -> Path:
    """Data or a tool `tools/test.sh` fetches into .cache/: skipped with a message on a fresh clone, a
    failure where CI promised it (VERL_E2E_REQUIRE_ENGINE=1). `step` names the set-up step that makes it."""
    if not path.exists():
        command = f"tools/test.sh --setup {step}".strip()
        engine_missing(f"{what} is missing at {path}: `{command}` fetches it")
    return path


def stock_models(cache_root: Path, *extra: str) -> Path:
    """Stands in for `verl-e2e prefetch` on a runner's cache: an empty folder under `models/` for every
    checkpoint matrix.yaml runs (and `extra` ones), in both cache layouts' place. The fake verl of the
    container tests reads no weights, but every container runs with the hub off, so a cell whose model is
    not in the cache stops before verl (containers/prepare.py). Returns the cache root."""
    ids = set(extra)
    for family in load_matrix(None).families.values():
        ids |= {ref.model for ref in (family.model, family.moe_model, family.mtp_model) if ref is not None}
    for model in ids:
        (cache_root / "models" / model).mkdir(parents=True, exist_ok=True)
    return cache_root


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrix.yaml")


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Run `verl-e2e` in-process with its own streams and environment."""

    def run(*argv: str, stdin: str = "", env: dict[str, str] | None = None) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = main(list(argv), env=env or {}, stdin=io.StringIO(stdin), stdout=out, stderr=err)
        return Result(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def subproc() -> Callable[..., Result]:
    """Run the real console entry point in a subprocess (what users and workflows do)."""

    def run(*argv: str, stdin: str = "", env: dict[str, str] | None = None, cwd: Path | None = None) -> Result:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")} | (env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "verl_e2e", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            env=full_env,
            cwd=cwd or ROOT,
            timeout=120,
            check=False,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run
