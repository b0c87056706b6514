"""A stand-in for GitHub's OIDC token endpoint (what a job with `id-token: write` reaches through
ACTIONS_ID_TOKEN_REQUEST_URL / ACTIONS_ID_TOKEN_REQUEST_TOKEN): it answers `{"value": <JWT>}` for the
job's bearer token, with the claims a test sets. The JWT's signature is a placeholder: the workflow
reads the claims of a token it fetched itself over the runner's channel and verifies nothing more."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

TOKEN = "job-token"


@contextmanager
def serve_oidc(claims: dict[str, Any]) -> Iterator[str]:
    """Serve until the block ends; yields ACTIONS_ID_TOKEN_REQUEST_URL (with GitHub's api-version query)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"bearer {TOKEN}" or "audience=verl-e2e" not in self.path:
                self.send_response(401)
                self.end_headers()
                return
            part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
            body = json.dumps({"value": f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/token?api-version=2.0"
    finally:
        server.shutdown()


def claims_for(workflow: str, repository: str, sha: str) -> dict[str, str]:
    """The claims of a job in `repository`'s reusable `workflow` at `sha` (job_workflow_ref/_sha)."""
    return {"job_workflow_ref": f"{repository}/.github/workflows/{workflow}@{sha}", "job_workflow_sha": sha}
