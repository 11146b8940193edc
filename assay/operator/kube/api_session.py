"""The operator's HTTP connections to the API server: one kept-alive connection per thread.

The kubernetes package only reads the credentials (in-cluster service account or
kubeconfig: server, CA, client certificate, token, proxy) and refreshes tokens; its
ApiClient and urllib3 pool are not on the request path. Their per-request parameter
handling, body sanitizing, URL parsing and pool bookkeeping cost 0.63 ms of CPU per
request against 0.37 ms for http.client on a kept-alive connection (measured on the e2e
control plane), and under a burst of Evaluations the operator's CPU is mostly requests.
Each handler thread keeps its own connection, so there is no pool to wait for.
"""

from __future__ import annotations

import dataclasses
import http.client
import ssl
import threading
import time
import urllib.parse
from typing import Any

TIMEOUT = 60.0
"""Seconds a connect or a read may take: a request to a hung API server fails (and its
decision is tried again) rather than hold a handler thread for ever."""
AUTH_REFRESH_SECONDS = 10.0
"""How long a bearer token is reused before the credentials are asked again (in-cluster
tokens are rotated on disk; the kubernetes loader re-reads them)."""
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)
"""What a kept-alive connection the server has meanwhile closed raises on its next request."""


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    reason: str
    data: bytes


class Session:
    """The API server's address, TLS and credentials, and a connection per thread."""

    def __init__(self, configuration: Any) -> None:
        self.configuration = configuration  # kubernetes.client.Configuration: it refreshes tokens
        server = urllib.parse.urlsplit(configuration.host)
        self.tls = server.scheme == "https"
        self.host, self.port = server.hostname or "localhost", server.port or (443 if self.tls else 80)
        self.prefix = server.path.rstrip("/")
        self.context = _tls_context(configuration) if self.tls else None
        self.proxy = urllib.parse.urlsplit(configuration.proxy) if configuration.proxy else None
        if self.proxy is not None and self.proxy.scheme != "http":
            raise ValueError(f"the operator reaches the API server through http:// proxies only, not {configuration.proxy}")
        self._local = threading.local()
        self._auth: dict[str, str] = {}
        self._auth_at = -AUTH_REFRESH_SECONDS
        self._lock = threading.Lock()

    def auth_headers(self) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            if now - self._auth_at >= AUTH_REFRESH_SECONDS:
                headers = {}
                for setting in self.configuration.auth_settings().values():
                    if setting.get("in") == "header" and setting.get("value"):
                        headers[str(setting["key"])] = str(setting["value"])
                self._auth, self._auth_at = headers, now
            return self._auth

    def send(self, method: str, path: str, *, body: bytes | None, headers: dict[str, str]) -> Response:
        """One request on this thread's connection; a stale kept-alive connection is replaced once."""
        for attempt in (1, 2):
            connection = getattr(self._local, "connection", None)
            reused = connection is not None
            if connection is None:
                connection = self._local.connection = self._connect()
            try:
                connection.request(method, self.prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except _STALE:
                self.close_thread_connection()
                if reused and attempt == 1:
                    continue  # the server closed it while idle: the request never reached it
                raise
            except BaseException:
                self.close_thread_connection()
                raise
            if response.will_close:
                self.close_thread_connection()
            return Response(response.status, response.reason, data)
        raise AssertionError("unreachable")

    def close_thread_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def _connect(self) -> http.client.HTTPConnection:
        if self.proxy is None:
            address = (self.host, self.port)
        else:
            address = (self.proxy.hostname or "", self.proxy.port or 80)
        connection: http.client.HTTPConnection
        if self.context is not None:
            connection = _ApiServerTLS(*address, timeout=TIMEOUT, context=self.context,
                                       server_name=self.configuration.tls_server_name or self.host)  # fmt: skip
        else:
            connection = http.client.HTTPConnection(*address, timeout=TIMEOUT)
        if self.proxy is not None:
            connection.set_tunnel(self.host, self.port)  # CONNECT through the proxy; TLS end to end
        return connection


class _ApiServerTLS(http.client.HTTPSConnection):
    """HTTPS whose certificate is checked against `server_name`: the API server's own name, or
    the kubeconfig's `tls-server-name` (http.client would use the host it dials)."""

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._context = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and the proxy's tunnel if any
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)


def _tls_context(configuration: Any) -> ssl.SSLContext:
    """TLS as the kubeconfig or the service account says: the CA (file or data), a client
    certificate, `insecure-skip-tls-verify`."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None,
                                         cadata=configuration.ca_cert_data or None)  # fmt: skip
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
