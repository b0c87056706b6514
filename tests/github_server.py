"""A loopback stand-in for api.github.com that checks every request against GitHub's OpenAPI description.

GitHub's own description (npm @octokit/openapi, generated/api.github.com.json) decides what is valid:
the path must match a documented template, the method must exist there, query parameters must be
documented for the operation (and integers where the schema says so), path parameters must fit their
schemas, and a JSON body must satisfy the operation's requestBody schema. A request the real API
would reject is recorded in `violations` and answered 400, so the test fails. The server keeps state
(comments, check runs, statuses, reactions), paginates with `Link`, enforces the 65,536-character
comment limit (422 "Body is too long"), and can be told to fail the next requests (`faults`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jsonschema import Draft4Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from .conftest import ROOT

SPEC_PATH = Path(os.environ.get("VERL_E2E_GITHUB_OPENAPI", ROOT / ".cache/openapi/api.github.com.json"))


def _anchored(node: Any) -> Any:
    """Point the description's local `#/components/...` references at the registered document."""
    if isinstance(node, dict):
        return {
            k: ("urn:github" + v if k == "$ref" and isinstance(v, str) and v.startswith("#") else _anchored(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_anchored(v) for v in node]
    return node


class Spec:
    def __init__(self, path: Path = SPEC_PATH) -> None:
        from .conftest import prepared

        prepared(path, "GitHub's OpenAPI description (npm @octokit/openapi)", "openapi")
        self.doc = json.loads(path.read_text())
        self.registry = Registry().with_resource("urn:github", Resource(self.doc, DRAFT4))
        self.routes = []
        for template, ops in self.doc["paths"].items():
            names = re.findall(r"{(\w+)}", template)
            rx = re.compile("^" + re.sub(r"{\w+}", "([^/]+)", template) + "$")
            self.routes.append((rx, names, template, ops))
        self.routes.sort(key=lambda r: (r[2].count("{"), -len(r[2])))  # literal segments win

    def _param(self, p: dict[str, Any]) -> dict[str, Any]:
        return self.doc["components"]["parameters"][p["$ref"].split("/")[-1]] if "$ref" in p else p

    def validate(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[str | None, str]:
        for rx, names, template, ops in self.routes:
            m = rx.match(path)
            if not m:
                continue
            op = ops.get(method.lower())
            if op is None:
                return f"{method} is not documented for {template}", template
            params = {p["name"]: p for p in map(self._param, op.get("parameters", []))}
            for name, value in zip(names, m.groups(), strict=True):
                schema = params.get(name, {}).get("schema", {})
                if schema.get("type") == "integer" and not value.isdigit():
                    return f"path parameter {name}={value!r} is not an integer", template
            for name, values in query.items():
                p = params.get(name)
                if p is None or p.get("in") != "query":
                    return f"query parameter {name!r} is not documented for {method} {template}", template
                if p.get("schema", {}).get("type") == "integer" and not values[0].lstrip("-").isdigit():
                    return f"query parameter {name}={values[0]!r} is not an integer", template
            rb = op.get("requestBody")
            if rb is not None:
                schema = rb["content"].get("application/json", {}).get("schema")
                if body is None and rb.get("required"):
                    return f"{method} {template} requires a JSON body", template
                if schema is not None and body is not None:
                    validator = Draft4Validator(_anchored(schema), registry=self.registry)
                    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
                    if errors:
                        return (
                            f"body does not match the schema of {method} {template}: {errors[0].message}",
                            template,
                        )
            elif body is not None:
                return f"{method} {template} takes no body", template
            return None, template
        return f"no documented path matches {path}", ""


class GitHubState:
    def __init__(self) -> None:
        self.comments: dict[int, list[dict[str, Any]]] = {}
        self.issues: list[dict[str, Any]] = []  # issues (not pull requests), as GitHub lists them
        self.check_runs: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.reactions: list[tuple[int, str]] = []
        self.permissions: dict[str, str] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.commits: dict[str, dict[str, Any]] = {}  # ref or sha -> commit
        self.requests: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self.faults: list[tuple[int, dict[str, str], dict[str, Any]]] = []  # served before normal handling
        self.forbid_checks = False
        self.next_id = 1000

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id


def _handler(spec: Spec, state: GitHubState, base: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.requests.append((method, self.path))
            problem, template = spec.validate(method, url.path, query, body)
            if problem:
                state.violations.append(problem)
                return self._send(400, {"message": problem})
            if not (self.headers.get("Authorization") or "").startswith("Bearer "):
                state.violations.append(f"{method} {url.path} without a token")
                return self._send(401, {"message": "Requires authentication"})
            if state.faults:
                status, headers, data = state.faults.pop(0)
                return self._send(status, data, headers)
            return self._route(method, template, url.path, query, body)

        def _route(self, method: str, template: str, path: str, query: dict[str, list[str]], body: Any) -> None:
            parts = path.strip("/").split("/")
            if template == "/repos/{owner}/{repo}/issues/{issue_number}/comments":
                number = int(parts[4])
                items = state.comments.setdefault(number, [])
                if method == "POST":
                    if len(body["body"]) > 65536:
                        return self._send(
                            422,
                            {
                                "message": "Validation Failed",
                                "errors": [
                                    {
                                        "resource": "IssueComment",
                                        "code": "custom",
                                        "field": "body",
                                        "message": "Body is too long (maximum is 65536 characters)",
                                    }
                                ],
                            },
                        )
                    item = {
                        "id": state.new_id(),
                        "body": body["body"],
                        "user": {"login": "github-actions[bot]"},
                    }
                    items.append(item)
                    return self._send(201, item)
                per_page = int(query.get("per_page", ["30"])[0])
                page = int(query.get("page", ["1"])[0])
                chunk = items[(page - 1) * per_page : page * per_page]
                headers = {}
                if page * per_page < len(items):
                    headers["Link"] = f'<{base[0]}{path}?per_page={per_page}&page={page + 1}>; rel="next"'
                return self._send(200, chunk, headers)
            if template == "/repos/{owner}/{repo}/issues/comments/{comment_id}":
                cid = int(parts[5])
                for items in state.comments.values():
                    for item in items:
                        if item["id"] == cid:
                            if len(body["body"]) > 65536:
                                return self._send(422, {"message": "Body is too long"})
                            item["body"] = body["body"]
                            return self._send(200, item)
                return self._send(404, {"message": "Not Found"})
            if template == "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions":
                state.reactions.append((int(parts[5]), body["content"]))
                return self._send(201, {"id": state.new_id(), "content": body["content"]})
            if template == "/repos/{owner}/{repo}/issues":
                if method == "POST":
                    labels = [{"name": n} for n in body.get("labels", [])]
                    number = state.new_id()
                    item = {"number": number, "id": number, "title": body["title"], "body": body.get("body"),
                            "labels": labels, "state": "open", "user": {"login": "github-actions[bot]"}}  # fmt: skip
                    state.issues.append(item)
                    return self._send(201, item)
                wanted = set(query.get("labels", [""])[0].split(",")) - {""}
                found = [i for i in state.issues if wanted <= {x["name"] for x in i["labels"]} and i["state"] == "open"]
                return self._send(200, found)
            if template == "/repos/{owner}/{repo}/issues/{issue_number}" and method == "PATCH":
                issue = next((i for i in state.issues if i["number"] == int(parts[4])), None)
                if issue is None:
                    return self._send(404, {"message": "Not Found"})
                issue.update({k: v for k, v in body.items() if k in ("body", "title", "state")})
                return self._send(200, issue)
            if template == "/repos/{owner}/{repo}/check-runs":
                if state.forbid_checks:
                    return self._send(403, {"message": "Resource not accessible by integration"})
                run = {"id": state.new_id(), **body}
                state.check_runs.append(run)
                return self._send(201, run)
            if template == "/repos/{owner}/{repo}/statuses/{sha}":
                state.statuses.append({"sha": parts[4], **body})
                return self._send(201, {"id": state.new_id(), **body})
            if template == "/repos/{owner}/{repo}/collaborators/{username}/permission":
                level = state.permissions.get(parts[4], "none")
                return self._send(200, {"permission": level, "role_name": level, "user": {"login": parts[4]}})
            if template == "/repos/{owner}/{repo}/commits/{ref}":
                commit = state.commits.get(parts[4])
                return self._send(200, commit) if commit else self._send(422, {"message": "No commit found"})
            if template == "/repos/{owner}/{repo}/pulls/{pull_number}":
                pull = state.pulls.get(int(parts[4]))
                return self._send(200, pull) if pull else self._send(404, {"message": "Not Found"})
            return self._send(501, {"message": f"the stand-in does not serve {template}"})

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_PUT(self) -> None:
            self._handle("PUT")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

    return Handler


@contextmanager
def serve(spec: Spec) -> Iterator[tuple[str, GitHubState]]:
    state = GitHubState()
    base: list[str] = [""]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(spec, state, base))
    base[0] = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield base[0], state
    finally:
        server.shutdown()
        server.server_close()
