"""The bot's short notes outside the report: the reply to a refused `/verl-e2e` comment and the
sticky note on a fork's pull request. Pure: exact text.

No note ever holds a ready-to-paste approval with a commit SHA in it. An approval is a maintainer
saying "I read this commit"; the SHA in it must come from the commit they read. A note rewritten
on every push that offered `/verl-e2e sha=<head>` would hand out the newest, unreviewed commit for
a one-click approval, so the notes show a placeholder and say where the SHA has to come from.
"""

from __future__ import annotations

from verl_e2e.report.comment import MARKER
from verl_e2e.report.markup import span
from verl_e2e.report.sections import USAGE

APPROVE = "`/verl-e2e sha=<the full SHA of the commit you reviewed>`"


def refusal(reason: str) -> str:
    """The reply to a `/verl-e2e` comment that could not be run; the reason quotes the commenter's
    text, so it is shown literally (backticks made quotes: the span stays one span)."""
    shown = span(reason.replace("`", "'"), table=False)
    return f"{MARKER.replace('pr-comment', 'reply')}\n⚠️ verl-e2e did not run: {shown}\n\nUsage: {USAGE}\n"


def fork_notice(sha: str) -> str:
    """The sticky comment on a fork's PR: nothing ran, and how a maintainer who reviewed it starts it."""
    return (
        f"{MARKER}\n## ⏸️ verl-e2e: waiting for a maintainer\n\n"
        "This pull request comes from a fork, so its code does not run on the GPU runners by itself "
        f"(last commit seen: {sha[:12]}). A maintainer with write access who has reviewed the code starts "
        f"the run by naming the commit they reviewed:\n\n{APPROVE}\n\n"
        "Copy the SHA from the commit you read, not from this comment: the run uses exactly that commit, "
        "and commits pushed after your review need a review of their own. Add `level=...` to choose levels. "
        f"Usage: {USAGE}\n"
    )
