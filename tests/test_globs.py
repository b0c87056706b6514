"""Glob semantics: anchored, `*` within a segment, `**` across, ordered `!` excludes per path."""

from __future__ import annotations

import fnmatch
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_e2e.config.globs import PathSet, glob_to_regex
from verl_e2e.errors import ConfigError

CASES = [
    # pattern, path, expected
    ("src/**", "src/a.py", True),
    ("src/**", "src/a/b/c.py", True),
    ("src/**", "srcx/a.py", False),
    ("src/*", "src/a/b.py", False),
    ("src/*.py", "src/a.py", True),
    ("*.md", "README.md", True),
    ("*.md", "docs/README.md", False),
    ("**/*.md", "docs/a/README.md", True),
    ("**/*.md", "README.md", True),
    ("src/**/x.py", "src/x.py", True),
    ("src/**/x.py", "src/a/b/x.py", True),
    ("src/**/x.py", "src/a/bx.py", False),
    ("a?c", "abc", True),
    ("a?c", "a/c", False),
    ("[ab].py", "b.py", True),
    ("[!ab].py", "c.py", True),
    ("[!ab].py", "a.py", False),
    ("models/{qwen,llama}/**", "models/llama/x.py", True),
    ("models/{qwen,llama}/**", "models/gemma/x.py", False),
    ("m/{a,b{c,d}}.py", "m/bd.py", True),
    ("docs/", "docs/a/b.md", True),
    ("/uv.lock", "uv.lock", True),
    ("3rdparty/Megatron-LM", "3rdparty/Megatron-LM", True),
    ("3rdparty/Megatron-LM", "3rdparty/Megatron-LM/x.py", False),
    ("a.b", "axb", False),  # dots are literal
    ("a+b(c)", "a+b(c)", True),  # regex metacharacters are literal
]


@pytest.mark.parametrize(("pattern", "path", "expected"), CASES)
def test_glob_table(pattern: str, path: str, expected: bool) -> None:
    assert PathSet((pattern,)).matches(path) is expected


EXCLUDES = [
    # patterns, path, expected: the last matching pattern decides
    (("src/**", "!src/docs/**"), "src/docs/a.md", False),
    (("src/**", "!src/docs/**"), "src/core/a.py", True),
    (("src/**", "!src/docs/**", "src/docs/keep.md"), "src/docs/keep.md", True),
    (("!src/docs/**",), "src/core/a.py", False),  # an exclude alone never includes anything
    (("models/*/**", "!models/{conversion,common}/**"), "models/conversion/x.py", False),
    (("models/*/**", "!models/{conversion,common}/**"), "models/qwen/x.py", True),
]


@pytest.mark.parametrize(("patterns", "path", "expected"), EXCLUDES)
def test_ordered_excludes(patterns: tuple[str, ...], path: str, expected: bool) -> None:
    assert PathSet(patterns).matches(path) is expected


def test_exclude_is_per_path_not_per_change() -> None:
    """The paths-filter pitfall: [src/**, !src/docs/**] must not fire for a docs-only change."""
    rule = PathSet(("src/**", "!src/docs/**"))
    change = ["src/docs/a.md", "src/docs/b.md", "README.md"]
    assert not any(rule.matches(p) for p in change)


@pytest.mark.parametrize("bad", ["src/[abc", "src/{a,b", ""])
def test_invalid_globs_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="invalid glob"):
        PathSet.parse([bad], "$.rules[0].paths")


segment = st.text(alphabet="abcxyz_.-0", min_size=1, max_size=6).filter(lambda s: s not in {".", ".."})
paths = st.lists(segment, min_size=1, max_size=5).map("/".join)


@given(paths)
def test_literal_pattern_matches_only_itself(path: str) -> None:
    escaped = re.sub(r"([*?\[\]{}])", r"[\1]", path)
    assert PathSet((escaped,)).matches(path)
    assert not PathSet((escaped,)).matches(path + "x")


@given(paths)
def test_double_star_matches_everything(path: str) -> None:
    assert PathSet(("**",)).matches(path)
    assert not PathSet(("**", "!**")).matches(path)


@given(st.lists(segment, min_size=1, max_size=4), segment)
def test_single_star_stays_in_one_directory(dirs: list[str], name: str) -> None:
    path = "/".join([*dirs, name])
    assert PathSet(("/".join([*dirs, "*"]),)).matches(path)
    assert PathSet(("*",)).matches(path) is (len(dirs) == 0)


@given(paths, st.sampled_from(["*", "?", "*.py", "a*", "*x*", "[ab]*"]))
def test_agrees_with_fnmatch_within_one_segment(path: str, pattern: str) -> None:
    name = path.rsplit("/", 1)[-1]
    assert PathSet((pattern,)).matches(name) is fnmatch.fnmatchcase(name, pattern)


@given(
    st.lists(paths, max_size=20),
    st.lists(st.sampled_from(["a/**", "!a/b/**", "**/*.py", "x*"]), min_size=1, max_size=4),
)
def test_matching_is_deterministic(candidates: list[str], patterns: list[str]) -> None:
    first = [PathSet(tuple(patterns)).matches(p) for p in candidates]
    glob_to_regex.cache_clear()
    assert [PathSet(tuple(patterns)).matches(p) for p in candidates] == first
