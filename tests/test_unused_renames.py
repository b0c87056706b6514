"""A definition renamed where nothing in Bridge's sources names it (renames.py) changes nothing that
runs: `plan --repo` reads it as cosmetic. A caller anywhere, a new name something already uses (an
override, a `getattr`), or a body changed beside the rename keeps it a change. Checked on a real git
repository, as `plan --repo` reads one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from verl_e2e.plan.renames import renamed_definition, unused

BASE = """\
class Bridge:
    def _get_provider_from_model(self, model):
        \"\"\"The model's config.\"\"\"
        return model.config

    def build(self, model):
        return model
"""
RENAMED = BASE.replace("_get_provider_from_model", "_provider_from_model")


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), *env, "commit", "-qm", "base"], check=True)
    return tmp_path


def test_one_definition_renamed_is_read_as_a_rename() -> None:
    assert renamed_definition(BASE.encode(), RENAMED.encode()) == ("_get_provider_from_model", "_provider_from_model")
    changed_body = RENAMED.replace("return model.config", "return model")
    assert renamed_definition(BASE.encode(), changed_body.encode()) is None
    assert renamed_definition(BASE.encode(), BASE.encode()) is None  # nothing renamed


@pytest.mark.parametrize(
    ("other", "reads", "inert"),
    [
        ("def f(b):\n    return b.build(1)\n", set(), True),  # nothing names it
        ("def f(b):\n    return b._get_provider_from_model(1)\n", set(), False),  # a caller
        ("class Base:\n    def _provider_from_model(self, m):\n        return m\n", set(), False),  # overrides
        ("def f(b):\n    return b.build(1)\n", {"_get_provider_from_model"}, False),  # verl calls it
    ],
)
def test_a_rename_is_inert_only_where_no_source_names_either_name(
    tmp_path: Path, other: str, reads: set[str], inert: bool
) -> None:
    repo = _repo(tmp_path, {"src/pkg/bridge.py": BASE, "src/pkg/other.py": other})
    renamed = ("_get_provider_from_model", "_provider_from_model")
    assert unused(repo, "HEAD", renamed, reads) is inert
