"""GitHub: the only stage that speaks to GitHub's API, and the trust decisions made from its events.

`client` is a small REST client (retries, rate limits, pagination, typed errors); `trigger` turns a
push, pull request, `/verl-e2e level=N` comment or dispatch into one run request; `gate` decides from
facts GitHub reports (author association, fork, the checked-out commit), never from text a PR
controls, whether GPU runners may run that request. It sits just above config: report's publishing
and the CLI use it; plan, judge and run never touch the network.
"""

from verl_e2e.github.client import GitHubClient, GitHubError
from verl_e2e.github.gate import GateRefused
from verl_e2e.github.trigger import RunRequest

__all__ = ["GateRefused", "GitHubClient", "GitHubError", "RunRequest"]
