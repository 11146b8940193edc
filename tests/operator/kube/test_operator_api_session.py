"""The operator's connections to the API server (`api_session`), against a real local HTTPS server.

The server is Python's own (TLS with a CA and a server certificate made here by openssl);
the e2e suite (tests/e2e/test_kube_calls.py) runs the same client against kube-apiserver.
"""

from __future__ import annotations

import http.server
import json
import select
import socket
import socketserver
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import api_client


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA and a certificate for the name `apiserver.test` (not the address dialled)."""
    root = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=root, check=True, capture_output=True)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=apiserver.test",
    )
    (root / "ext.cnf").write_text("subjectAltName=DNS:apiserver.test\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return root


class Server:
    """An HTTPS server answering JSON; it records each request's connection and headers."""

    def __init__(self, pki: Path, *, client_ca: Path | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.close_after_reply = False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "peer": self.client_address,
                        "auth": self.headers.get("Authorization"),
                        "body": body,
                        "content_type": self.headers.get("Content-Type"),
                    }
                )
                status = 404 if self.path.endswith("/missing") else 200
                data = json.dumps({"path": self.path, "echo": body.decode()}).encode()
                for namespace, cause in (("terminating", "NamespaceTerminating"), ("forbidden", "RBAC")):
                    if f"/namespaces/{namespace}/" in self.path:  # as kube-apiserver refuses a write there
                        status, data = (
                            403,
                            json.dumps(
                                {"kind": "Status", "reason": "Forbidden", "details": {"causes": [{"reason": cause}]}}
                            ).encode(),
                        )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if outer.close_after_reply:
                    self.close_connection = True

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki / "server.crt", pki / "server.key")
        if client_ca is not None:  # as kube-apiserver's --client-ca-file
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def drop_idle_connections(self) -> None:
        """What an API server does to a kept-alive connection left idle: close it."""
        self.close_after_reply = True


class Token:
    """A bearer token that changes each time it is read: which read a request carries."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> str:
        self.reads += 1
        return f"Bearer t{self.reads}"


def _credentials(
    server: str, ca: Path, *, tls_server_name: str | None = "apiserver.test", proxy: str | None = None
) -> credentials.Credentials:
    return credentials.Credentials(
        server=server, ca_file=str(ca), tls_server_name=tls_server_name, proxy=proxy, authorization=Token()
    )


@pytest.fixture
def server(pki: Path) -> Iterator[Server]:
    running = Server(pki)
    yield running
    running.httpd.shutdown()


def _get(session: api_session.Session, path: str) -> api_session.Response:
    return session.send("GET", path, body=None, headers={"Accept": "application/json", **session.auth_headers()})


def test_one_kept_alive_connection_per_thread_and_the_token_sent(server: Server, pki: Path) -> None:
    session = api_session.Session(_credentials(f"https://127.0.0.1:{server.port}", pki / "ca.crt"))
    answers = [_get(session, f"/api/v1/x{i}") for i in range(3)]
    assert [a.status for a in answers] == [200, 200, 200]
    assert json.loads(answers[2].data)["path"] == "/api/v1/x2"
    assert len({r["peer"] for r in server.requests}) == 1 and server.requests[0]["auth"] == "Bearer t1"
    other = threading.Thread(target=_get, args=(session, "/api/v1/y"))
    other.start()
    other.join()
    assert len({r["peer"] for r in server.requests}) == 2  # another thread, its own connection
    patched = session.send("PATCH", "/apis/a/b", body=b'{"status": {}}', headers={"Content-Type": "application/json"})
    assert json.loads(patched.data)["echo"] == '{"status": {}}' and server.requests[-1]["method"] == "PATCH"
    assert _get(session, "/api/v1/missing").status == 404  # statuses are the caller's to judge


def test_a_connection_the_server_closed_is_replaced_without_losing_the_request(server: Server, pki: Path) -> None:
    session = api_session.Session(_credentials(f"https://127.0.0.1:{server.port}", pki / "ca.crt"))
    assert _get(session, "/first").status == 200
    # The server now closes after each reply; the client reuses its connection until it sees that.
    server.drop_idle_connections()
    assert _get(session, "/second").status == 200
    assert _get(session, "/third").status == 200
    assert [r["path"] for r in server.requests] == ["/first", "/second", "/third"]


def test_the_certificate_is_checked_against_the_api_servers_name(server: Server, pki: Path) -> None:
    wrong = api_session.Session(_credentials(f"https://127.0.0.1:{server.port}", pki / "ca.crt", tls_server_name=None))
    with pytest.raises(ssl.SSLCertVerificationError):
        _get(wrong, "/x")  # the certificate names apiserver.test, not 127.0.0.1
    stranger = api_session.Session(_credentials(f"https://127.0.0.1:{server.port}", pki / "server.crt"))
    with pytest.raises(ssl.SSLCertVerificationError):
        _get(stranger, "/x")  # a CA that did not sign it


def test_a_client_certificate_given_as_data_is_presented(pki: Path) -> None:
    """A kubeconfig's client-certificate-data (or an exec plugin's): ssl loads only files, so it
    passes through a private temporary directory, gone once loaded."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=operator"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.crt",
        "-days",
        "2",
    )
    server = Server(pki, client_ca=pki / "ca.crt")
    try:
        given = credentials.Credentials(
            server=f"https://127.0.0.1:{server.port}",
            ca_file=str(pki / "ca.crt"),
            tls_server_name="apiserver.test",
            client_cert=((pki / "client.crt").read_bytes(), (pki / "client.key").read_bytes()),
        )
        assert _get(api_session.Session(given), "/with-certificate").status == 200
        without = credentials.Credentials(server=given.server, ca_file=given.ca_file, tls_server_name="apiserver.test")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _get(api_session.Session(without), "/without")
    finally:
        server.httpd.shutdown()


class ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that only tunnels (CONNECT), recording where to."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.tunnels: list[str] = []
        proxy = self

        class Tunnel(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                target = self.rfile.readline().decode().split()[1]
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                proxy.tunnels.append(target)
                host, port = target.rsplit(":", 1)
                upstream = socket.create_connection((host, int(port)))
                self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.wfile.flush()
                ends = [self.connection, upstream]
                while True:
                    readable, _, _ = select.select(ends, [], [], 5)
                    if not readable:
                        return
                    for end in readable:
                        data = end.recv(65536)
                        if not data:
                            return
                        (upstream if end is self.connection else self.connection).sendall(data)

        super().__init__(("127.0.0.1", 0), Tunnel)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_kubeconfig_proxy_tunnels_to_the_api_server(server: Server, pki: Path) -> None:
    proxy = ConnectProxy()
    try:
        session = api_session.Session(
            _credentials(
                f"https://127.0.0.1:{server.port}", pki / "ca.crt", proxy=f"http://127.0.0.1:{proxy.server_address[1]}"
            )
        )
        assert _get(session, "/through").status == 200
        assert proxy.tunnels == [f"127.0.0.1:{server.port}"] and server.requests[-1]["path"] == "/through"
    finally:
        proxy.shutdown()
    with pytest.raises(credentials.ConfigError, match="http:// proxies only"):
        api_session.Session(_credentials("https://127.0.0.1:1", pki / "ca.crt", proxy="socks5://127.0.0.1:1"))


def test_a_json_patch_is_sent_as_kube_apiserver_reads_one(
    server: Server, pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kube.json_patch`'s request, with which the operator changes a child it owns: a PATCH of
    the object's own path, json-patch content, the operations as the body (tests first, so
    that kube-apiserver applies all of them or none)."""
    from assay.kube import api_errors
    from assay.operator.build import runner_identity
    from assay.operator.kube import kube

    session = api_session.Session(_credentials(f"https://127.0.0.1:{server.port}", pki / "ca.crt"))
    monkeypatch.setattr(api_client, "client", lambda: kube_client.ApiClient(session))
    operations = [
        {"op": "test", "path": "/metadata/labels/app.kubernetes.io~1managed-by", "value": "assay-operator"},
        {"op": "add", "path": "/rules", "value": runner_identity.role("evals")["rules"]},
    ]
    kube.json_patch(runner_identity.role("evals"), operations)
    sent = server.requests[-1]
    assert (
        sent["method"] == "PATCH"
        and sent["path"] == "/apis/rbac.authorization.k8s.io/v1/namespaces/evals/roles/assay-runner"
    )
    assert sent["content_type"] == "application/json-patch+json" and sent["auth"] == "Bearer t1"
    assert json.loads(sent["body"]) == operations
    with pytest.raises(api_errors.ApiError, match="403"):
        kube.json_patch(runner_identity.role("forbidden"), operations)
