"""The full report: the job summary and the check run's summary. Pure: no I/O, exact text.

The PR comment is kept to one screen; everything it leaves out is here: each cell's whole summary
in the skill's format (deliverables, both repositories, the image, the command line that reproduces
the run, every key line, limitations, follow-ups), passing cells included. GitHub caps a check
run's summary at 65,535 characters and a step's summary at 1 MiB: details of passing cells are
dropped first, then failing details are shortened; the top, the table and the failures stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from verl_e2e.judge.verdict import Verdict, render_text
from verl_e2e.report.markup import block, html_code
from verl_e2e.report.rows import ICON, ordered
from verl_e2e.report.sections import USAGE, Context, limitations, skipped_levels, top

CHECK_SUMMARY_LIMIT = 65_535
STEP_SUMMARY_LIMIT = 250_000  # characters: at most 4 bytes each, so always under a step's 1 MiB
FULL_HEADING = "### Every cell in full"


def details(v: Verdict, limit: int | None = None, *, text: str | None = None) -> str:
    """One cell as a collapsed block: its summary as literal text, shortened to `limit` if given."""
    body = (text if text is not None else render_text(v)).rstrip("\n")
    if limit is not None and len(body) > limit:
        body = body[: max(0, limit - 40)].rstrip() + "\n… (shortened; the full summary is in the run dir)"
    return (
        f"<details><summary>{ICON.get(v.result, '')} {html_code(v.cell_id)}: {v.result}</summary>\n\n"
        f"{block(body)}\n\n</details>"
    )


def fit(verdicts: Sequence[Verdict], budget: int) -> list[str]:
    """Blocks of every failing cell (shortened to share `budget` if need be), then of passing cells
    while they fit, then a line saying how many were left out."""
    failing = [v for v in ordered(verdicts) if v.result in ("Fail", "Blocked")]
    passing = [v for v in ordered(verdicts) if v not in failing]
    blocks = [details(v) for v in failing]
    if sum(len(b) + 2 for b in blocks) > budget and failing:
        share = max(200, budget // len(failing) - 200)
        blocks = [details(v, share) for v in failing]
    used, omitted = sum(len(b) + 2 for b in blocks), 0
    for v in passing:
        one = details(v)
        if used + len(one) + 2 <= budget:
            blocks.append(one)
            used += len(one) + 2
        else:
            omitted += 1
    if omitted:
        blocks.append(
            f"<sub>Details of {omitted} passing cell(s) left out to fit GitHub's size limit; they are in the "
            "run dirs (verdict.json).</sub>"
        )
    return blocks


def render_full(verdicts: Sequence[Verdict], ctx: Context, limit: int = STEP_SUMMARY_LIMIT) -> str:
    """The job summary (or check run summary): the comment's top, then every cell in full."""
    head = "\n".join([*top(verdicts, ctx), *limitations(verdicts)])
    tail = "\n".join([*skipped_levels(ctx), "", f"<sub>Comment with {USAGE} to run other levels.</sub>"])
    heading = f"\n\n{FULL_HEADING}\n\n" if verdicts else "\n\n"
    blocks = fit(verdicts, limit - len(head) - len(tail) - len(heading) - 200)
    text = head + heading + "\n\n".join(blocks) + "\n" + tail + "\n"
    if len(text) > limit:  # a last resort for pathological inputs: keep the head, cut the rest
        text = text[: limit - 80] + "\n\n… (cut to fit GitHub's limit; see the run dirs)\n"
    return text
