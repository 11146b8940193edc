"""A local HTTP server standing in for the API server's Evaluation endpoints, for the runner's
status sink: real HTTP, the product's own client (assay.kube), patches applied as kube-apiserver does."""

from __future__ import annotations

import json
from typing import Any

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.runner.results.status_sink import KubernetesStatusSink


class ApiServer:
    """One Evaluation served over real HTTP: GET, and PATCH of its status subresource as a
    merge patch or a JSON patch (all or nothing; 422 when a `test` fails, as kube-apiserver
    answers). `refuse` answers every PATCH with that code instead (403: RBAC took the right
    away); `invalid` answers 422 without any test failing (a status the schema refuses)."""

    def __init__(self, *, job_name: str = "ev-g1", generation: int = 1) -> None:
        import http.server
        import threading

        self.object: dict[str, Any] = {
            "metadata": {"name": "ev", "namespace": "team", "generation": generation},
            "status": {"jobName": job_name},
        }
        self.others: dict[str, dict[str, Any]] = {}
        """Other Evaluations of the namespace (a baseline), by name; GET of any other is a 404."""
        self.refuse: int | None = None
        self.invalid = False
        self.requests: list[tuple[str, str | None]] = []
        self.patches: list[Any] = []
        """Every PATCH body, refused or not."""
        self.waits: list[float] = []
        """What the sinks it made slept between tries."""
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(("GET", None))
                name = self.path.rstrip("/").rsplit("/", 1)[-1]
                if name == "ev":
                    self._answer(200, server.object)
                elif name in server.others:
                    self._answer(200, server.others[name])
                else:
                    self._answer(404, _status_body(404, f'evaluations.assay.dev "{name}" not found'))

            def do_PATCH(self) -> None:
                kind = self.headers["Content-Type"]
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(("PATCH", kind))
                server.patches.append(body)
                assert self.path.endswith("/namespaces/team/evaluations/ev/status"), self.path
                code, answer = server.patch(kind, body)
                self._answer(code, answer)

            def _answer(self, code: int, body: Any) -> None:
                payload = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def patch(self, kind: str, body: Any) -> tuple[int, Any]:
        if self.refuse is not None:
            return self.refuse, _status_body(
                self.refuse,
                'evaluations.assay.dev "ev" is forbidden: User '
                '"system:serviceaccount:team:ev-runner" cannot patch resource',
            )
        if self.invalid:
            return 422, _status_body(422, 'Evaluation.assay.dev "ev" is invalid: status.results: Invalid value')
        if kind == "application/merge-patch+json":
            self.object["status"].update(body["status"])
            return 200, self.object
        assert kind == "application/json-patch+json", kind
        updated = json.loads(json.dumps(self.object))
        for op in body:
            *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
            target = updated
            for part in parents:
                target = target[part]
            if op["op"] == "test" and target.get(last, object()) != op["value"]:
                return 422, _status_body(422, "the server rejected our request due to an error in our request")
            if op["op"] == "add":
                target[last] = op["value"]
        self.object = updated
        return 200, self.object

    def api(self) -> kube_client.ApiClient:
        server = credentials.Credentials(server=f"http://127.0.0.1:{self.httpd.server_address[1]}")
        return kube_client.ApiClient(api_session.Session(server))

    def sink(self, **fields: Any) -> KubernetesStatusSink:
        fields = {"job_name": "ev-g1", "generation": 1, "min_interval": 0, **fields}
        return KubernetesStatusSink(name="ev", namespace="team", api=self.api(), sleep=self.waits.append, **fields)


def _status_body(code: int, message: str) -> dict[str, Any]:
    reasons = {403: "Forbidden", 404: "NotFound", 422: "Invalid"}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reasons[code],
        "code": code,
    }
