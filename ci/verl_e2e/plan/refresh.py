"""A lockfile whose diff is not shown, read from the declared pins changed beside it.

GitHub (and a diff trimmed for size) leaves a large lockfile's diff out: `uv.lock` arrives as a path only,
and a diff rule with `when_no_diff: match` fires on it, since any pin might have moved. Beside a
declaration file of the same rule whose diff is known (`pyproject.toml`), the lockfile is the refresh
that follows that change: `uv lock` re-resolves what the declarations changed. When none of those known
diffs names a package the rule watches (a `wandb` pin, a comment realigned), the lockfile is read the
same way, and the rule does not fire on it. Without such a sibling (a lockfile-only PR), nothing says
what moved, and the rule keeps its `when_no_diff` answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_e2e.config.matrix import Rule
from verl_e2e.plan.changes import ChangedFile


def follows_declarations(rule: Rule, file: ChangedFile, files: Sequence[ChangedFile]) -> bool:
    """`file` (no diff) is the refresh of sibling files of `rule` whose diffs are known and match none of
    its patterns (False when the rule reads no diff, `file`'s diff is known, or no such sibling exists)."""
    if rule.diff is None or file.diff_lines is not None:
        return False
    known = [
        f.diff_lines
        for f in files
        if f.path != file.path and f.diff_lines is not None and any(rule.paths.matches(p) for p in f.paths)
    ]
    return bool(known) and not any(rule.diff.search(line) for lines in known for line in lines)
