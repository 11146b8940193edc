"""A small API server on 127.0.0.1 for the operator's own client (`kube` and `leases` over `api_client`).

It keeps objects by their REST path and answers the requests the operator makes: create
(POST; 409 AlreadyExists when the name is taken), get, list (equality label and field
selectors), merge patch (the status subresource included), JSON patch (RFC 6902's test,
add, replace and remove, all or none: a failed test or a missing path is 422 Invalid, as
kube-apiserver answers), update (PUT, conditional on the resourceVersion sent:
409 Conflict when it is stale; creates, updates and merge patches stamp a new one) and
delete. It can be told to refuse a create with a recorded Status, to answer every request
with an error for a while, as a kube-apiserver does whose etcd is gone, to answer the next
requests 429 or 503 with a Retry-After, as an overloaded one does, or to hold chosen
requests unanswered, as a hung API server or a dropped network does. It also lists a kind
across all namespaces and serves pod logs as text (`logs`), for `assay get -A` and `assay
logs`, which read through the same client (assay.kube). It is a stand-in for the API server's REST
surface, not for its validation: the e2e suite runs the same clients against kube-apiserver.
"""

from __future__ import annotations

import http.server
import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import api_client, kube

Status = tuple[int, dict[str, Any]]
"""(HTTP code, Status body)."""


def status(code: int, reason: str, message: str) -> Status:
    return code, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


class PatchFailed(Exception):
    pass


def json_patch(target: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 on a copy of `target`; PatchFailed when an operation does not apply."""
    doc = json.loads(json.dumps(target))
    for operation in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
            if node is None:
                raise PatchFailed(f"{operation['path']}: missing")
        key: Any = int(last) if isinstance(node, list) and last != "-" else last
        present = (0 <= key < len(node)) if isinstance(node, list) and isinstance(key, int) else key in node
        if operation["op"] == "test":
            if not present or node[key] != operation["value"]:
                raise PatchFailed(f"testing value {operation['path']} failed")
        elif operation["op"] == "add" or (operation["op"] == "replace" and present):
            if isinstance(node, list) and operation["op"] == "add":
                node.insert(len(node) if key == "-" else key, operation["value"])
            else:
                node[key] = operation["value"]
        elif operation["op"] == "remove" and present:
            del node[key]
        else:
            raise PatchFailed(f"{operation['op']} {operation['path']}: does not apply")
    return dict(doc)


def _lookup(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _matches(obj: dict[str, Any], label_selector: str, field_selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, label_selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    for term in filter(None, field_selector.split(",")):
        key, _, value = term.partition("=")
        if str(_lookup(obj, key)) != value:
            return False
    return True


def _is_collection(path: str) -> bool:
    """/api/v1/namespaces/<ns>/<plural>, or /apis/<group>/<version>/namespaces/<ns>/<plural>."""
    parts = path.split("/")
    return len(parts) >= 3 and parts[-3] == "namespaces" and parts[-1] in kube.PLURALS.values()


def _every_namespace(path: str) -> re.Pattern[str] | None:
    """For /api/v1/<plural> or /apis/<group>/<version>/<plural>: what its objects' paths look like."""
    match = re.fullmatch(r"(/api/v1|/apis/[^/]+/[^/]+)/([a-z]+)", path)
    if match is None or match.group(2) not in kube.PLURALS.values():
        return None
    return re.compile(re.escape(match.group(1)) + r"/namespaces/[^/]+/" + re.escape(match.group(2)) + r"/[^/]+")


class LocalApiServer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.failing: Status | None = None
        """Answer every request with this while set."""
        self.failed_answers = 0
        self.overloaded: list[tuple[int, str]] = []
        """(429 or 503, Retry-After) answers to give, one per request, before answering as usual."""
        self.refuse: Callable[[str, dict[str, Any]], Status | None] = lambda path, body: None
        """(collection path, object) of a create or a JSON patch → the Status to refuse it with, or None to
        make it."""
        self.hang: Callable[[str, str], bool] = lambda method, path: False
        """(method, path) → True to hold the request unanswered, for as long as this says so (or the server closes)."""
        self.held = 0
        """Requests that were held."""
        self.logs: dict[tuple[str, str], str] = {}
        """(pod path, container) → its log, served as text; a container without one is waiting to start (400)."""
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._names = itertools.count(1)
        self._versions = itertools.count(1)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if not server.hold(self.command, self.path):
                    self.close_connection = True  # closing: the client sees the connection drop
                    return
                overloaded = server.overload(self.command, self.path)
                retry_after = overloaded[1] if overloaded else None
                code, answer = (
                    overloaded[0]
                    if overloaded
                    else server.handle(self.command, self.path, body, self.headers.get("Content-Type") or "")
                )
                text = isinstance(answer, str)  # a pod's log
                data = answer.encode() if text else json.dumps(answer).encode()
                self.send_response(code)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.session = api_session.Session(
            credentials.Credentials(server=f"http://127.0.0.1:{self.httpd.server_address[1]}")
        )
        self.sleeps: list[float] = []
        """What the client waited for a Retry-After (recorded, not slept)."""
        self.client = kube_client.ApiClient(self.session, sleep=self.sleeps.append)
        """The operator's client as the operator makes it, without its rate limit (tests make their own)."""

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def put(self, obj: dict[str, Any], path: str) -> None:
        """Store `obj` at its object path, as if it had been created."""
        with self._lock:
            self.objects[path] = json.loads(json.dumps(obj))

    def get(self, path: str) -> dict[str, Any] | None:
        with self._lock:
            return self.objects.get(path)

    def hold(self, method: str, url: str) -> bool:
        """Wait while `hang` holds this request; False when the server closes meanwhile."""
        path = urllib.parse.urlsplit(url).path
        if not self.hang(method, path):
            return True
        with self._lock:
            self.held += 1
        while self.hang(method, path):
            if self._closing.wait(0.02):
                return False
        return True

    def overload(self, method: str, url: str) -> tuple[Status, str] | None:
        """The next of `overloaded` as (Status, Retry-After), recorded as a request; None when none is left."""
        with self._lock:
            if not self.overloaded:
                return None
            self.requests.append((method, urllib.parse.urlsplit(url).path))
            code, retry_after = self.overloaded.pop(0)
            return status(
                code, "TooManyRequests" if code == 429 else "ServiceUnavailable", "try again later"
            ), retry_after

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        return obj

    def handle(self, method: str, url: str, body: Any, content_type: str) -> tuple[int, Any]:
        parsed = urllib.parse.urlsplit(url)
        path, query = parsed.path, dict(urllib.parse.parse_qsl(parsed.query))
        with self._lock:
            self.requests.append((method, path))
            if self.failing is not None:
                self.failed_answers += 1
                return self.failing

            if method == "POST":
                return self._create(path, body)
            target = path.removesuffix("/status")
            if method == "GET" and path in self.objects:
                return 200, self.objects[path]
            if method == "GET" and path.endswith("/log"):
                return self._log(path.removesuffix("/log"), query.get("container", ""))
            every = _every_namespace(path) if method == "GET" else None
            if every is not None:
                items = [
                    o
                    for p, o in sorted(self.objects.items())
                    if every.fullmatch(p)
                    and _matches(o, query.get("labelSelector", ""), query.get("fieldSelector", ""))
                ]
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
            if method == "GET" and _is_collection(path):
                prefix = path + "/"
                items = [
                    o
                    for p, o in sorted(self.objects.items())
                    if p.startswith(prefix)
                    and "/" not in p[len(prefix) :]
                    and _matches(o, query.get("labelSelector", ""), query.get("fieldSelector", ""))
                ]
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items}
            if target not in self.objects:
                return status(404, "NotFound", f"{path.rsplit('/', 1)[-1]!r} not found")
            if method == "PATCH" and "json-patch" in content_type:
                try:
                    patched = json_patch(self.objects[target], body)
                except PatchFailed as failed:
                    return status(422, "Invalid", str(failed))
                refused = self.refuse(target.rsplit("/", 1)[0], patched)
                if refused is not None:
                    return refused
                self.objects[target] = self._stamp(patched)
                return 200, patched
            if method == "PATCH":
                self.objects[target] = self._stamp(_merge(self.objects[target], body))
                return 200, self.objects[target]
            if method == "PUT":
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if sent and sent != self.objects[target]["metadata"].get("resourceVersion"):
                    return status(
                        409,
                        "Conflict",
                        "the object has been modified; please apply your changes to the latest version and try again",
                    )
                self.objects[target] = self._stamp(body)
                return 200, body
            if method == "DELETE":
                return 200, self.objects.pop(target)
            return status(405, "MethodNotAllowed", method)

    def _log(self, pod: str, container: str) -> tuple[int, Any]:
        if pod not in self.objects:
            return status(404, "NotFound", f'pods "{pod.rsplit("/", 1)[-1]}" not found')
        if (pod, container) not in self.logs:
            return status(
                400,
                "BadRequest",
                f'container "{container}" in pod "{pod.rsplit("/", 1)[-1]}" is waiting to start: ContainerCreating',
            )
        return 200, self.logs[(pod, container)]

    def _create(self, collection: str, body: dict[str, Any]) -> Status:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'x-')}{next(self._names)}"
        path = f"{collection}/{meta['name']}"
        if path in self.objects:
            return status(409, "AlreadyExists", f"{collection.rsplit('/', 1)[-1]} {meta['name']!r} already exists")
        refused = self.refuse(collection, body)
        if refused is not None:
            return refused
        meta.setdefault("uid", f"uid-{next(self._names)}")
        self.objects[path] = self._stamp(body)
        return 201, body


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalApiServer]:
    """A LocalApiServer that the operator's `kube` calls go to for one test."""
    server = LocalApiServer()
    monkeypatch.setattr(api_client, "client", lambda: server.client)
    yield server
    server.close()
