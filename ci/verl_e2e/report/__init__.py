"""Report: every planned cell's verdict -> JUnit, one PR comment, the job summary, a check run, a tracking issue.

`collect` re-judges each planned cell's run dir (an artifact's verdict.json is not trusted) and
gives a cell that never reported a Fail row; `regression` compares with the merge base (its results
kept per runner by `basecache`); `comment` renders the one-screen PR comment (its parts in `sections`
and `rows`, all run-dir text quoted literally by `markup`) and `fullsummary` every cell in full for
the job summary and the check run; `notices` the bot's short replies; `publish` writes them through
the GitHub stage, edited in place, never duplicated. `reporting` is the entry the CLI calls: a
`ReportRequest` in, everything above done in order, the outcome out.
"""

from verl_e2e.report.comment import Context
from verl_e2e.report.publish import PublishOptions
from verl_e2e.report.reporting import ReportOutcome, ReportRequest, report

__all__ = ["Context", "PublishOptions", "ReportOutcome", "ReportRequest", "report"]
