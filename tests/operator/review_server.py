"""A stand-in API server for /metrics' authentication (TokenReview, SubjectAccessReview), and a
client of /metrics: shared by the tests of metrics_auth and metrics_tls.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from assay.operator.runtime.metrics import EvaluationMetrics
from assay.operator.runtime.metrics_auth import (
    ACCESS_REVIEWS,
    TOKEN_REVIEWS,
)

READER, STRANGER = "reader-token", "stranger-token"


USERS = {READER: "system:serviceaccount:monitoring:prometheus", STRANGER: "system:serviceaccount:team:default"}


class ReviewServer:
    """Answers TokenReviews (the tokens in USERS) and SubjectAccessReviews (only the reader may get
    /metrics) as the API server does; records each review it was sent."""

    def __init__(self) -> None:
        self.reviews: list[tuple[str, dict[str, Any]]] = []
        self.failing = False
        self.hold = threading.Event()
        """Cleared: TokenReviews of tokens not in USERS wait until it is set (a slow API server)."""
        self.hold.set()
        self.held = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.reviews.append((self.path, body))
                if self.path == TOKEN_REVIEWS and body["spec"]["token"] not in USERS and not outer.hold.is_set():
                    outer.held += 1
                    outer.hold.wait(30)
                if outer.failing:
                    self._send(503, {"kind": "Status", "message": "etcd is away"})
                elif self.path == TOKEN_REVIEWS:
                    user = USERS.get(body["spec"]["token"])
                    status = (
                        {"authenticated": True, "user": {"username": user, "uid": "u-1", "groups": ["g"]}}
                        if user
                        else {"authenticated": False}
                    )
                    self._send(201, {**body, "status": status})
                elif self.path == ACCESS_REVIEWS:
                    spec = body["spec"]
                    allowed = spec["user"] == USERS[READER] and spec["nonResourceAttributes"] == {
                        "path": "/metrics",
                        "verb": "get",
                    }
                    self._send(201, {**body, "status": {"allowed": allowed}})
                else:
                    self._send(404, {})

            def _send(self, code: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def serve(metrics: EvaluationMetrics, **options: Any) -> Iterator[str]:
    server, thread = metrics.start_server(0, addr="127.0.0.1", **options)
    scheme = "https" if options.get("tls") else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def get(url: str, token: str | None = None, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
