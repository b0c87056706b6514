"""`fields.segment` gives what `ast.get_source_segment` gives, on every assigned value of real Bridge
files (multi-byte characters and multi-line values included), without splitting the source per call."""

from __future__ import annotations

import ast
import tarfile

import pytest

from verl_e2e.plan import fields

from .conftest import SHARED

TARBALL = SHARED / "gpu" / "src" / "megatron-bridge-067f987-with-megatron-lm-2a75ac1.tgz"
SAMPLE = """x = "größe"  # non-ASCII before a value on the same line
class C:
    y: dict = {
        "a": 1,
        "β": (2,
              3),
    }
\r\nz = [1,\r\n     2]
"""


def _values(source: str) -> list[ast.expr]:
    return [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value]


def _same(source: str) -> None:
    lines = fields.source_lines(source)
    for value in _values(source):
        assert fields.segment(lines, value) == ast.get_source_segment(source, value)


def test_the_segment_of_multi_byte_and_multi_line_values() -> None:
    _same(SAMPLE)


def test_the_segment_of_every_value_in_real_bridge_files() -> None:
    if not TARBALL.is_file():
        pytest.skip(f"{TARBALL} is not on this machine")
    with tarfile.open(TARBALL) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(("_provider.py", "model_bridge.py", "config.py"))]
        assert len(members) > 20
        for member in members[:60]:
            data = tar.extractfile(member)
            assert data is not None
            _same(data.read().decode("utf-8", errors="replace"))
