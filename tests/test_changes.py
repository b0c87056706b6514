"""Changed-file input: name-status parsing, and diffs from a real git repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from verl_e2e.errors import UsageError
from verl_e2e.plan.changes import ChangedFile, is_cosmetic_python_change, parse_name_status
from verl_e2e.plan.gitchanges import changes_from_git


def test_parses_statuses_renames_and_bare_paths() -> None:
    text = "M\tsrc/a.py\nA\tsrc/b.py\nD\tsrc/c.py\nR087\told/x.py\tnew/x.py\n./bare/path.py\n\n# note\r\nC100\ta\tb\n"
    files = parse_name_status(text)
    assert files == [
        ChangedFile("src/a.py", "M"),
        ChangedFile("src/b.py", "A"),
        ChangedFile("src/c.py", "D"),
        ChangedFile("new/x.py", "R", "old/x.py"),
        ChangedFile("bare/path.py", "M"),
        ChangedFile("b", "C", "a"),
    ]
    assert files[3].paths == ("old/x.py", "new/x.py")
    assert files[0].diff_lines is None  # a listing carries no diff


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Q\tsrc/a.py\n", "line 1: unknown status 'Q'"),
        ("M\tsrc/a.py\nR100\tonly-one\n", "line 2: status R needs 2 path(s), found 1"),
        ("M\t\n", "line 1: empty path"),
        ("MX\ta\n", "unknown status 'MX'"),
    ],
)
def test_malformed_lines_are_reported_with_line_numbers(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as info:
        parse_name_status(text, "changes.txt")
    assert "changes.txt" in str(info.value) and "\n" not in str(info.value)


def test_all_problems_reported_at_once() -> None:
    with pytest.raises(UsageError, match=r"line 1.*line 2.*line 3.*and 1 more"):
        parse_name_status("Q\ta\nZ\tb\nY\tc\nW\td\n")


@pytest.mark.parametrize(
    ("old", "new", "cosmetic"),
    [
        (b"x = 1\n", b"x = 1  # why\n", True),
        (
            b'def f():\n    """Old."""\n    return 1\n',
            b'def f():\n    """New words."""\n    return 1\n',
            True,
        ),
        (b"def f():\n    return 1\n", b'def f():\n    """Added docstring."""\n    return 1\n', True),
        (b"x = 1\n", b"x = 2\n", False),
        (b'X = "a"\n', b'X = "b"\n', False),  # a string constant is code, not a docstring
        (b"x = (\n", b"x = 1\n", False),  # unparsable: never discounted
        (b"def f(key):\n    return key\n", b"def f(key: str | tuple) -> str:\n    return key\n", True),  # hints
        (b"class C:\n    x: int = 1\n", b"class C:\n    x: float = 1\n", False),  # a field's type is the field's
    ],
)
def test_cosmetic_python_changes(old: bytes, new: bytes, cosmetic: bool) -> None:
    assert is_cosmetic_python_change(old, new) is cosmetic


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def bridge_repo(tmp_path: Path) -> Path:
    """A small Bridge-shaped git repository with a feature branch off main."""
    repo = tmp_path / "bridge"
    (repo / "src/megatron/bridge/models/qwen").mkdir(parents=True)
    _git(repo.parent, "init", "-q", "-b", "main", str(repo))
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    (repo / "src/megatron/bridge/models/qwen/qwen_provider.py").write_text('def f():\n    """Doc."""\n    return 1\n')
    (repo / "src/megatron/bridge/models/qwen/old_name.py").write_text("A = 1\nB = 2\nC = 3\nD = 4\n")
    (repo / "pyproject.toml").write_text('dependencies = ["megatron-core==0.13"]\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    _git(repo, "checkout", "-qb", "feature")
    (repo / "src/megatron/bridge/models/qwen/qwen_provider.py").write_text(
        'def f():\n    """Better doc."""\n    return 1\n'
    )
    _git(
        repo,
        "mv",
        "src/megatron/bridge/models/qwen/old_name.py",
        "src/megatron/bridge/models/qwen/new_name.py",
    )
    (repo / "pyproject.toml").write_text('dependencies = ["megatron-core==0.14"]\n')
    _git(repo, "commit", "-qam", "feature")
    _git(repo, "checkout", "-q", "main")
    (repo / "unrelated.txt").write_text("main moved on\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "main moves")
    return repo


def test_git_diff_against_merge_base(bridge_repo: Path) -> None:
    files, merge_base, head = changes_from_git(str(bridge_repo), "main", "feature")
    by_path = {f.path: f for f in files}
    assert "unrelated.txt" not in by_path  # main's own commits are not the PR's changes
    assert merge_base == _git(bridge_repo, "rev-parse", "main~1").strip()
    assert head == _git(bridge_repo, "rev-parse", "feature").strip()
    renamed = by_path["src/megatron/bridge/models/qwen/new_name.py"]
    assert renamed.status == "R" and renamed.old_path == "src/megatron/bridge/models/qwen/old_name.py"
    assert by_path["src/megatron/bridge/models/qwen/qwen_provider.py"].cosmetic
    assert by_path["pyproject.toml"].diff_lines == (
        'dependencies = ["megatron-core==0.13"]',
        'dependencies = ["megatron-core==0.14"]',
    )


@pytest.mark.parametrize(
    ("repo", "base", "head", "message"),
    [
        ("missing", "main", "feature", "no such directory"),
        ("plain", "main", "feature", "not a git repository"),
        ("bridge", "nope", "feature", "--base 'nope' is not a commit"),
        ("bridge", "main", "--output=/tmp/x", "--head '--output=/tmp/x' is not a commit"),
    ],
)
def test_git_errors_are_usage_errors(
    bridge_repo: Path, tmp_path: Path, repo: str, base: str, head: str, message: str
) -> None:
    (tmp_path / "plain").mkdir()
    path = {"bridge": bridge_repo, "plain": tmp_path / "plain", "missing": tmp_path / "missing"}[repo]
    with pytest.raises(UsageError, match=message):
        changes_from_git(str(path), base, head)
