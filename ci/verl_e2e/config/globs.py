"""Path globs with ordered `!` excludes, compiled once to regular expressions.

Semantics follow GitHub Actions' `paths:` filters and .gitignore, which is what users of path rules
expect: patterns are anchored at the repository root, `*` and `?` never cross `/`, `**` does, and
within one list the *last* pattern that matches a path decides, so `!x` excludes what came before it.
A `PathSet` is evaluated per path. That avoids the dorny/paths-filter pitfall where, with
`predicate-quantifier: some`, a path set like [`src/**`, `!src/docs/**`] fires for a change under
`src/docs/` because the negated pattern alone "matches" every other path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from verl_e2e.errors import ConfigError


def _brace_split(body: str) -> list[str]:
    """Split the inside of `{a,b{c,d}}` on top-level commas."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current.append(ch)
    parts.append("".join(current))
    return parts


def _translate(pattern: str) -> str:
    """Translate one glob to regex source (no anchors)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                j = i + 2
                if before_ok and j < n and pattern[j] == "/":
                    out.append("(?:[^/]*/)*")  # `**/` : zero or more whole directories
                    i = j + 1
                    continue
                out.append(".*")
                i = j
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                raise ValueError(f"unclosed '[' at position {i}")
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        elif ch == "{":
            depth, j = 0, i
            while j < n:
                depth += pattern[j] == "{"
                depth -= pattern[j] == "}"
                if depth == 0:
                    break
                j += 1
            if j >= n:
                raise ValueError(f"unclosed '{{' at position {i}")
            alts = [_translate(alt) for alt in _brace_split(pattern[i + 1 : j])]
            out.append("(?:" + "|".join(alts) + ")")
            i = j
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@lru_cache(maxsize=4096)
def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile one glob (without a leading `!`) to an anchored regular expression.

    A trailing `/` matches the directory and everything below it, as users write `docs/`.
    """
    if not pattern or pattern.startswith("!"):
        raise ValueError("empty pattern" if not pattern else "negation belongs to PathSet, not here")
    if pattern.endswith("/"):
        pattern += "**"
    if pattern.startswith("/"):
        pattern = pattern[1:]
    return re.compile(_translate(pattern) + r"\Z", re.DOTALL)


@dataclass(frozen=True)
class PathSet:
    """An ordered list of globs; `!` negates. `matches(path)` asks the last pattern that applies."""

    patterns: tuple[str, ...]
    _compiled: tuple[tuple[re.Pattern[str], bool], ...] = field(init=False, repr=False, compare=False)
    _any: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = []
        for pattern in self.patterns:
            negate = pattern.startswith("!")
            compiled.append((glob_to_regex(pattern[1:] if negate else pattern), negate))
        object.__setattr__(self, "_compiled", tuple(compiled))
        positives = [rx.pattern for rx, neg in compiled if not neg] or [r"(?!)"]
        # One alternation as a fast pre-filter: most paths match no positive pattern at all.
        object.__setattr__(self, "_any", re.compile("|".join(f"(?:{p})" for p in positives), re.DOTALL))

    @classmethod
    def parse(cls, patterns: list[str] | tuple[str, ...], where: str) -> PathSet:
        """Build from config, turning a bad glob into a ConfigError that names where it is."""
        for pattern in patterns:
            try:
                glob_to_regex(pattern[1:] if pattern.startswith("!") else pattern)
            except (ValueError, re.error) as exc:
                raise ConfigError(
                    f"{where}: invalid glob {pattern!r} ({exc}); expected a path glob such as "
                    "'src/**/*.py' or '!docs/**'; fix the pattern in matrix.yaml"
                ) from None
        return cls(tuple(patterns))

    def matches(self, path: str) -> bool:
        if not self._any.match(path):
            return False
        for rx, negate in reversed(self._compiled):
            if rx.match(path):
                return not negate
        return False
