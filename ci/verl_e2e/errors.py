"""The package's errors: one class per exit code, caught only in `cli.main`.

Every message is a single line a user can act on: what was wrong, what was expected, what to do.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class VerlE2EError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 1


class UsageError(VerlE2EError):
    """Bad input from the user: arguments, files, revisions, names. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """matrix.yaml is unreadable or does not satisfy its schema."""


class PlanError(VerlE2EError):
    """A plan that cannot run as asked (e.g. more jobs than GitHub's matrix allows)."""

    exit_code = 2


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
