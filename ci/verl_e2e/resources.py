"""Files that ship with the package: matrix.yaml, containers/ (Dockerfile, cell driver, probe), data/."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _shipped(name: str) -> Path:
    """The wheel's copy (verl_e2e/data/<name>) or, in a checkout, the repository's own."""
    packaged = Path(str(resources.files("verl_e2e").joinpath("data").joinpath(name)))
    return packaged if packaged.exists() else _REPO / name


def matrix_path() -> Path:
    return _shipped("matrix.yaml")


def containers_dir() -> Path:
    return _shipped("containers")


def data_dir() -> Path:
    """The package's data directory (failure signatures, the surface index)."""
    return Path(str(resources.files("verl_e2e").joinpath("data")))
