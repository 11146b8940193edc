"""The /metrics endpoint: HTTPS or plain HTTP, open or for the callers a TokenAuthorizer allows.

prometheus_client's own server has no hook to refuse a request, so this serves its WSGI app
behind a check of the bearer token (`metrics_auth`). HTTPS uses the certificate of
`metrics_tls`: one the admin provides (the chart's `metrics.tls.secretName`, e.g.
cert-manager's), read again when it changes so a renewed certificate is served without a
restart, or a self-signed one made at start. The TLS handshake happens in the request's own
thread, so a client that connects and says nothing does not hold up the others.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import ssl
import threading
import wsgiref.simple_server
from collections.abc import Callable, Iterable
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry

from assay.operator.runtime.metrics_auth import ReviewsBusy, TokenAuthorizer, Verdict
from assay.operator.runtime.metrics_tls import TlsFiles

logger = logging.getLogger(__name__)

PATH = "/metrics"
REQUEST_TIMEOUT = 30.0
"""Seconds a caller may take to finish its handshake and request."""

StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _Server(socketserver.ThreadingMixIn, wsgiref.simple_server.WSGIServer):
    daemon_threads = True
    tls: TlsFiles | None = None

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        if self.tls is not None:
            self.tls.refresh()
            connection = self.tls.context.wrap_socket(connection, server_side=True, do_handshake_on_connect=False)
        return connection, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(REQUEST_TIMEOUT)
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError):
                return  # not a TLS client, or it gave up: nothing to answer
        super().finish_request(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(wsgiref.simple_server.WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:  # a scrape every few seconds: not worth a line each
        pass


def _answer(start_response: StartResponse, status: int, text: str, *headers: tuple[str, str]) -> list[bytes]:
    reasons = {
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not Found",
        429: "Too Many Requests",
        503: "Service Unavailable",
    }
    body = text.encode()
    start_response(
        f"{status} {reasons[status]}",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body))), *headers],
    )
    return [body]


def _refusal(authorizer: TokenAuthorizer, environ: dict[str, Any]) -> tuple[int, str] | None:
    """(status, why) to answer a caller that may not read /metrics; None for one that may."""
    scheme, _, token = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return 401, "/metrics needs a bearer token of an account allowed to get /metrics.\n"
    try:
        verdict = authorizer.verdict(token)
    except ReviewsBusy:  # a flood of tokens: turned away at once, and not logged one by one
        return 429, "Too many tokens to check at once; try again.\n"
    except Exception as error:
        logger.warning("Could not check a /metrics caller's token with the API server: %s", error)
        return 503, "The API server could not check the token; try again.\n"
    if verdict is Verdict.UNAUTHENTICATED:
        return 401, "The API server does not know this token.\n"
    if verdict is Verdict.FORBIDDEN:
        return 403, "This account may not get /metrics (bind it to the chart's metrics-reader ClusterRole).\n"
    return None


def metrics_app(registry: CollectorRegistry, authorizer: TokenAuthorizer | None = None) -> App:
    """The WSGI app: /metrics of `registry`, to callers `authorizer` allows (to all without one)."""
    exposition: App = prometheus_client.make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return _answer(start_response, 404, f"The operator serves {PATH} only.\n")
        refused = _refusal(authorizer, environ) if authorizer is not None else None
        if refused is not None:
            status, why = refused
            headers = {401: [("WWW-Authenticate", 'Bearer realm="assay-operator"')], 429: [("Retry-After", "1")]}
            return _answer(start_response, status, why, *headers.get(status, []))
        return exposition(environ, start_response)

    return app


def serve(
    registry: CollectorRegistry,
    *,
    port: int,
    addr: str = "0.0.0.0",
    authorizer: TokenAuthorizer | None = None,
    tls: TlsFiles | None = None,
) -> tuple[_Server, threading.Thread]:
    """Serve /metrics in a daemon thread; port 0 picks a free one (`server.server_port`)."""
    server = (_Server6 if ":" in addr else _Server)((addr, port), _QuietHandler)
    server.set_app(metrics_app(registry, authorizer))
    server.tls = tls
    thread = threading.Thread(target=server.serve_forever, name="assay-metrics", daemon=True)
    thread.start()
    return server, thread
