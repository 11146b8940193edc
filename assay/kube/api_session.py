"""HTTP connections to the API server: one kept-alive connection per thread.

http.client, not the kubernetes package's ApiClient and urllib3 pool: their per-request
parameter handling, body sanitizing, URL parsing and pool bookkeeping cost 0.63 ms of CPU
per request against 0.37 ms for http.client on a kept-alive connection (measured on the
e2e control plane), and under a burst of Evaluations the operator's CPU is mostly requests.
Each handler thread keeps its own connection, so there is no pool to wait for; a streamed
answer (a followed pod log) gets a connection of its own. Where the server is and who the
client is to it: `credentials`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import os
import select
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator

from assay.kube import credentials
from assay.kube.credentials import ConfigError

TIMEOUT = 60.0
"""Seconds a connect or a read may take: a request to a hung API server fails (and its
decision is tried again) rather than hold a handler thread for ever."""
AUTH_REFRESH_SECONDS = 10.0
"""How long a bearer token is reused before the credentials are asked again (in-cluster
tokens are rotated on disk: `credentials` reads them again)."""
UNREACHABLE = (OSError, http.client.HTTPException, credentials.ConfigError)
"""What a request raises when the API server, or the way to it, is the trouble (refused or reset
connections, timeouts, TLS, a garbled answer, credentials not readable yet): worth a retry."""
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError)
"""What a kept-alive connection the server has meanwhile closed raises on its next request."""


@dataclasses.dataclass(frozen=True)
class Response:
    status: int
    reason: str
    data: bytes
    retry_after: str | None = None
    """The Retry-After header, if any (a 429 or 503 says when to ask again)."""


class Session:
    """The API server's address, TLS and credentials, and a connection per thread."""

    def __init__(self, credentials: credentials.Credentials, *, connect_timeout: float | None = None) -> None:
        """`connect_timeout`: seconds a connect may take, when shorter than TIMEOUT (a command line's)."""
        self.credentials = credentials
        self.connect_timeout = connect_timeout
        server = urllib.parse.urlsplit(credentials.server)
        self.tls = server.scheme == "https"
        self.host, self.port = server.hostname or "localhost", server.port or (443 if self.tls else 80)
        self.prefix = server.path.rstrip("/")
        self.context = _tls_context(credentials) if self.tls else None
        self.proxy = urllib.parse.urlsplit(credentials.proxy) if credentials.proxy else None
        if self.proxy is not None and self.proxy.scheme != "http":
            raise ConfigError(f"the API server is reached through http:// proxies only, not {credentials.proxy}")
        self._local = threading.local()
        self._auth: dict[str, str] = {}
        self._auth_at = -AUTH_REFRESH_SECONDS
        self._lock = threading.Lock()

    def auth_headers(self) -> dict[str, str]:
        now = time.monotonic()
        with self._lock:
            if now - self._auth_at >= AUTH_REFRESH_SECONDS:
                value = self.credentials.authorization()
                self._auth, self._auth_at = ({"Authorization": value} if value else {}), now
            return self._auth

    def send(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None,
        headers: dict[str, str],
        timeout: float | None = None,
        retry_stale: bool = True,
    ) -> Response:
        """One request on this thread's connection. `timeout` bounds each connect and read (else
        TIMEOUT). A kept-alive connection the server closed meanwhile is replaced before use
        (as urllib3 does), or, when that shows only as the request fails, the request is sent
        again once unless `retry_stale` is off."""
        for attempt in (1, 2):
            connection = getattr(self._local, "connection", None)
            if connection is not None and _dropped(connection):
                self.close_thread_connection()
                connection = None
            reused = connection is not None
            if connection is None:
                connection = self._local.connection = self._connect()
            _set_timeout(connection, TIMEOUT if timeout is None else timeout)
            try:
                connection.request(method, self.prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except _STALE:
                self.close_thread_connection()
                if reused and attempt == 1 and retry_stale:
                    continue  # the server closed it while idle: the request never reached it
                raise
            except BaseException:
                self.close_thread_connection()
                raise
            if response.will_close:
                self.close_thread_connection()
            elif timeout is not None:
                _set_timeout(connection, TIMEOUT)
            return Response(response.status, response.reason, data, response.getheader("Retry-After"))
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def stream(
        self, method: str, path: str, *, headers: dict[str, str], read_timeout: float | None
    ) -> Iterator[http.client.HTTPResponse]:
        """One request on a connection of its own, its answer to be read as it arrives; the
        connection is closed after. `read_timeout` None: no limit between reads (a followed log)."""
        connection = self._connect()
        try:
            if connection.sock is None:
                connection.timeout = self.connect_timeout or TIMEOUT
                connection.connect()
            assert connection.sock is not None
            connection.sock.settimeout(read_timeout)
            connection.timeout = read_timeout
            connection.request(method, self.prefix + path, headers=headers)
            yield connection.getresponse()
        finally:
            connection.close()

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
            connection = _ApiServerTLS(
                *address,
                timeout=TIMEOUT,
                context=self.context,
                server_name=self.credentials.tls_server_name or self.host,
            )
        else:
            connection = http.client.HTTPConnection(*address, timeout=TIMEOUT)
        if self.proxy is not None:
            connection.set_tunnel(self.host, self.port)  # CONNECT through the proxy; TLS end to end
        if self.connect_timeout is not None:
            connection.timeout = self.connect_timeout
            connection.connect()  # now, within the shorter limit; `send` sets TIMEOUT for the reads
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


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept-alive connection was closed by the server while idle: an idle socket has
    nothing to read, so a readable one holds the end of the stream (urllib3's test)."""
    sock = connection.sock
    if sock is None:
        return False
    poller = select.poll()  # not select.select: a busy operator's descriptors may pass FD_SETSIZE
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _set_timeout(connection: http.client.HTTPConnection, timeout: float) -> None:
    if connection.timeout == timeout:
        return
    connection.timeout = timeout  # for its next connect
    if connection.sock is not None:
        connection.sock.settimeout(timeout)


def _tls_context(given: credentials.Credentials) -> ssl.SSLContext:
    """TLS as the kubeconfig or the service account says: the CA (file or data), a client
    certificate, `insecure-skip-tls-verify`."""
    context = ssl.create_default_context(cafile=given.ca_file or None, cadata=given.ca_data or None)
    if given.client_cert is not None:
        _load_client_cert(context, *given.client_cert)
    if given.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_client_cert(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl loads a certificate only from files: written to a private directory, loaded, removed."""
    with tempfile.TemporaryDirectory(prefix="assay-client-cert-") as folder:
        cert_file, key_file = os.path.join(folder, "tls.crt"), os.path.join(folder, "tls.key")
        for path, data in ((cert_file, cert), (key_file, key)):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(data)
        context.load_cert_chain(cert_file, key_file)
