"""`ApiClient.stream`: an answer read as it arrives (a followed pod log), over real HTTP from
a server on 127.0.0.1 that sends its answer in chunks and holds the rest until told."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from assay.kube import api_errors, api_session, credentials
from assay.kube import client as kube_client


class LogServer:
    """/.../pods/p/log: one line, then the next once `release` is set; /.../pods/gone/log: 404; /.../pods/mute/log: nothing."""

    def __init__(self) -> None:
        self.release, self.paths = threading.Event(), list[str]()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.paths.append(self.path)
                if "/pods/gone/" in self.path:
                    status = {"kind": "Status", "reason": "NotFound", "message": 'pods "gone" not found', "code": 404}
                    body = json.dumps(status).encode()
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if "/pods/mute/" in self.path:
                    server.release.wait(10)
                    return
                self._chunk(b"first line\n")
                server.release.wait(10)
                self._chunk(b"second line\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        address = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.client = kube_client.ApiClient(api_session.Session(credentials.Credentials(server=address)))


@pytest.fixture
def logs() -> Iterator[LogServer]:
    server = LogServer()
    yield server
    server.release.set()
    server.httpd.shutdown()
    server.httpd.server_close()


def test_each_chunk_arrives_before_the_answer_ends(logs: LogServer) -> None:
    chunks = logs.client.stream("/api/v1/namespaces/team/pods/p/log", query={"follow": "true"}, read_timeout=None)
    assert next(chunks) == b"first line\n"  # the server holds the rest until released
    logs.release.set()
    assert b"".join(chunks) == b"second line\n"
    assert logs.paths == ["/api/v1/namespaces/team/pods/p/log?follow=true"]


def test_an_error_answer_is_an_api_error_with_its_status(logs: LogServer) -> None:
    with pytest.raises(api_errors.ApiError) as refused:
        list(logs.client.stream("/api/v1/namespaces/team/pods/gone/log", read_timeout=5))
    assert (refused.value.code, refused.value.reason, refused.value.message) == (
        404,
        "NotFound",
        'pods "gone" not found',
    )


def test_a_silent_answer_times_out_unless_followed(logs: LogServer) -> None:
    chunks = logs.client.stream("/api/v1/namespaces/team/pods/mute/log", read_timeout=0.2)
    with pytest.raises(TimeoutError):
        next(chunks)  # within 0.2 s of silence, not the 10 s the server would hold it
