"""A small GitHub REST client on `requests`: retries, rate limits, pagination, errors a user can act on.

The token comes from the environment mapping given to `from_env` and is never printed: not in repr,
not in exceptions (which name the method and path, never headers). The base URL follows
GITHUB_API_URL, so GitHub Enterprise works. Retried: connection errors and 5xx (exponential backoff),
secondary rate limits (403/429 with `retry-after`, or the "secondary rate limit" message). A primary
rate limit is waited out when its reset is near, and refused clearly otherwise.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from verl_e2e.errors import UsageError, VerlE2EError

DEFAULT_API = "https://api.github.com"
USER_AGENT = "verl-e2e"


class GitHubError(VerlE2EError):
    """An API call failed; the message says what to do."""

    exit_code = 1

    def __init__(self, status: int, where: str, message: str, hint: str = "") -> None:
        text = f"GitHub {where} failed ({status}: {message})"
        super().__init__(text + (f"; {hint}" if hint else ""))
        self.status = status
        self.api_message = message


class NotFoundError(GitHubError):
    pass


class ForbiddenError(GitHubError):
    pass


class UnprocessableError(GitHubError):
    pass


class RateLimitError(GitHubError):
    pass


FORK_HINT = (
    "the token cannot write here: on a pull request from a fork GITHUB_TOKEN is read-only, so publish "
    "from the `workflow_run` workflow (verl-e2e-publish.yml) that runs in the base repository instead"
)


def retry_wait(
    response: requests.Response, delay: float, where: str, max_wait: float, clock: Callable[[], float]
) -> float | None:
    """How long to wait before retrying (5xx, rate limits), None for a final answer; a wait longer than
    `max_wait` is a RateLimitError now rather than a job that sleeps for an hour."""
    status = response.status_code
    if status >= 500:
        return delay
    if status not in (403, 429):
        return None
    text = response.text.lower()
    if "retry-after" in response.headers or "secondary rate limit" in text:
        wait = float(response.headers.get("retry-after", 60))
        if wait > max_wait:
            raise RateLimitError(status, where, "secondary rate limit", f"GitHub asks to wait {wait:.0f}s; retry later")
        return wait
    if response.headers.get("x-ratelimit-remaining") == "0":
        reset = float(response.headers.get("x-ratelimit-reset", clock()))
        wait = max(0.0, reset - clock()) + 1
        if wait > max_wait:
            when = time.strftime("%H:%M:%S UTC", time.gmtime(reset))
            raise RateLimitError(
                status,
                where,
                "API rate limit exhausted",
                f"it resets at {when}; rerun after that or use a token with a higher limit",
            )
        return wait
    return None


def checked(response: requests.Response, where: str) -> requests.Response:
    """The response, or the typed error its status means (with what to do about it)."""
    if response.status_code < 400:
        return response
    try:
        message = str(response.json().get("message", response.reason))
    except ValueError:
        message = response.reason or "error"
    status = response.status_code
    if status == 404:
        raise NotFoundError(status, where, message, "check the repository, number and the token's access")
    if status == 403:
        hint = FORK_HINT if "not accessible by integration" in message.lower() else "check the token's permissions"
        raise ForbiddenError(status, where, message, hint)
    if status == 422:
        raise UnprocessableError(status, where, message)
    raise GitHubError(status, where, message)


def repo_name(value: str | None, env: Mapping[str, str]) -> str:
    """owner/name from the argument or GITHUB_REPOSITORY; anything else is one UsageError line."""
    repo = value or env.get("GITHUB_REPOSITORY", "")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise UsageError(f"--repo {repo or '(unset)'}: expected owner/name (or set GITHUB_REPOSITORY)")
    return repo


@dataclass
class GitHubClient:
    token: str | None
    api_url: str = DEFAULT_API
    timeout: float = 30.0
    max_retries: int = 5
    max_wait: float = 90.0  # the longest rate-limit or retry wait accepted before failing
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    session: requests.Session | None = None

    def __post_init__(self) -> None:
        self.api_url = self.api_url.rstrip("/")
        self._session = self.session or requests.Session()
        self._session.headers.update(
            {
                "Accept": "application/vnd.github+json",
                "User-Agent": USER_AGENT,
                "X-GitHub-Api-Version": "2022-11-28",
            }
        )
        if self.token:
            self._session.headers["Authorization"] = f"Bearer {self.token}"

    def __repr__(self) -> str:
        return f"GitHubClient(api_url={self.api_url!r}, token={'***' if self.token else None})"

    @classmethod
    def from_env(cls, env: Mapping[str, str], **kw: Any) -> GitHubClient:
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
        if not token:
            raise UsageError("no GitHub token: set GITHUB_TOKEN (or GH_TOKEN), or use --dry-run to print the requests")
        return cls(token=token, api_url=env.get("GITHUB_API_URL", DEFAULT_API), **kw)

    # ------------------------------------------------------------------------------------ requests

    def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, json: Any = None
    ) -> requests.Response:
        url = path if path.startswith("http") else f"{self.api_url}{path}"
        where = f"{method} {urlsplit(url).path}"
        delay = 1.0
        for attempt in range(self.max_retries + 1):
            try:
                response = self._session.request(method, url, params=params, json=json, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt == self.max_retries:
                    raise GitHubError(0, where, type(exc).__name__, "check the network and GITHUB_API_URL") from None
                self.sleep(delay)
                delay = min(delay * 2, 30)
                continue
            wait = retry_wait(response, delay, where, self.max_wait, self.clock)
            if wait is None or attempt == self.max_retries:
                return checked(response, where)
            self.sleep(wait)
            delay = min(delay * 2, 30)
        raise AssertionError("unreachable")  # pragma: no cover

    def paginate(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a list endpoint, following `Link: rel="next"`."""
        url: str | None = path
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        while url:
            response = self.request("GET", url, params=query)
            yield from response.json()
            url = response.links.get("next", {}).get("url")
            query = None  # the next link carries the query

    # ------------------------------------------------------------------------------- operations

    def pull(self, repo: str, number: int) -> dict[str, Any]:
        data: dict[str, Any] = self.request("GET", f"/repos/{repo}/pulls/{number}").json()
        return data

    def permission(self, repo: str, user: str) -> str:
        data = self.request("GET", f"/repos/{repo}/collaborators/{user}/permission").json()
        return str(data.get("permission", "none"))

    def comments(self, repo: str, number: int) -> Iterator[dict[str, Any]]:
        return self.paginate(f"/repos/{repo}/issues/{number}/comments")

    def create_comment(self, repo: str, number: int, body: str) -> dict[str, Any]:
        data: dict[str, Any] = self.request(
            "POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body}
        ).json()
        return data

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict[str, Any]:
        data: dict[str, Any] = self.request(
            "PATCH", f"/repos/{repo}/issues/comments/{comment_id}", json={"body": body}
        ).json()
        return data

    def issues(self, repo: str, label: str) -> Iterator[dict[str, Any]]:
        """Open issues carrying `label` (pull requests, which the endpoint lists too, left out)."""
        return (
            i
            for i in self.paginate(f"/repos/{repo}/issues", {"labels": label, "state": "open"})
            if "pull_request" not in i
        )

    def create_issue(self, repo: str, title: str, body: str, label: str) -> dict[str, Any]:
        data: dict[str, Any] = self.request(
            "POST", f"/repos/{repo}/issues", json={"title": title, "body": body, "labels": [label]}
        ).json()
        return data

    def update_issue(self, repo: str, number: int, body: str) -> dict[str, Any]:
        data: dict[str, Any] = self.request("PATCH", f"/repos/{repo}/issues/{number}", json={"body": body}).json()
        return data

    def react(self, repo: str, comment_id: int, content: str) -> None:
        self.request("POST", f"/repos/{repo}/issues/comments/{comment_id}/reactions", json={"content": content})

    def create_check_run(self, repo: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = self.request("POST", f"/repos/{repo}/check-runs", json=dict(payload)).json()
        return data

    def update_check_run(self, repo: str, check_id: int, payload: Mapping[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = self.request("PATCH", f"/repos/{repo}/check-runs/{check_id}", json=dict(payload)).json()
        return data

    def create_status(self, repo: str, sha: str, payload: Mapping[str, Any]) -> None:
        self.request("POST", f"/repos/{repo}/statuses/{sha}", json=dict(payload))
