"""The one API client: every request the operator sends to the API server is one `ApiClient` call.

Credentials from `credentials`, a connection per thread from `api_session`, errors read
into `api_errors.ApiError` by the answer's Status. A `request` waits for a token of the
operator's own rate limit (`rate_limit`) and, answered 429 or 503 with a Retry-After,
waits that long (at most MAX_RETRY_AFTER_SECONDS) and asks again, up to
RETRY_AFTER_ATTEMPTS times, as client-go does. Leader election's Lease calls are
`request_once`: one attempt within a timeout shorter than the renew deadline, never
retried by the client and never held by the rate limit (the renew loop keeps its own
clock, and a leader must not lose its Lease to its own burst of reconciles).
"""

from __future__ import annotations

import functools
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from assay.operator.kube import api_errors, api_session, credentials, rate_limit

CLIENT_NAME = "assay-operator"
"""The operator's name to the API server: its User-Agent (and, in `kube`, the component of
its Events and its field manager)."""
RETRY_AFTER_CODES = frozenset({429, 503})
RETRY_AFTER_ATTEMPTS = 3
"""How often one request is sent again on a Retry-After; past that the ApiError is raised
(and the decision is tried again later, by its own backoff)."""
MAX_RETRY_AFTER_SECONDS = 10.0
"""The longest one Retry-After is waited: a handler thread is held meanwhile."""


class ApiClient:
    """Requests over `session`, limited by `limiter` (None: no limit); `sleep` waits out a Retry-After."""

    def __init__(
        self,
        session: api_session.Session,
        *,
        limiter: rate_limit.TokenBucket | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.session, self.limiter, self._sleep = session, limiter, sleep

    def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        """One API request; the decoded JSON answer. Raises ApiError for an error answer."""
        if query:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in range(RETRY_AFTER_ATTEMPTS + 1):
            if self.limiter is not None:
                self.limiter.wait()
            response = self.session.send(
                method, url, body=payload, headers=self._headers(payload, content_type, accept)
            )
            if response.status < 400:
                return json.loads(response.data) if response.data else None
            wait = _retry_after(response)
            if wait is None or attempt == RETRY_AFTER_ATTEMPTS:
                break
            self._sleep(wait)
        raise api_errors.from_answer(response.status, response.data, retry_after=response.retry_after)

    def request_once(self, method: str, url: str, *, body: Any = None, timeout: float) -> Any:
        """One attempt, each connect and read within `timeout`: no rate limit, no retry (leader election's)."""
        payload = json.dumps(body).encode() if body is not None else None
        response = self.session.send(
            method,
            url,
            body=payload,
            headers=self._headers(payload, "application/json", "application/json"),
            timeout=timeout,
            retry_stale=False,
        )
        if response.status >= 400:
            raise api_errors.from_answer(response.status, response.data, retry_after=response.retry_after)
        return json.loads(response.data) if response.data else None

    def _headers(self, payload: bytes | None, content_type: str, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": CLIENT_NAME, **self.session.auth_headers()}
        if payload is not None:
            headers["Content-Type"] = content_type
        return headers


def _retry_after(response: api_session.Response) -> float | None:
    """Seconds to wait before asking again, when a 429 or 503 says (whole seconds, as client-go reads it)."""
    if response.status not in RETRY_AFTER_CODES or response.retry_after is None:
        return None
    try:
        seconds = int(response.retry_after.strip())
    except ValueError:
        return None  # an HTTP date: the API server sends seconds
    return min(max(seconds, 0), MAX_RETRY_AFTER_SECONDS)


_loaded: credentials.Credentials | None = None
_limiter: rate_limit.TokenBucket | None = rate_limit.TokenBucket(
    qps=rate_limit.DEFAULT_QPS, burst=rate_limit.DEFAULT_BURST
)


class _Kept:
    """The rate limit set before (`load_config` called again, by kopf's startup handler)."""


_KEPT = _Kept()


def load_config(kubeconfig: str | None = None, *, limiter: rate_limit.TokenBucket | None | _Kept = _KEPT) -> None:
    """The pod's service account in a cluster, else `kubeconfig` or $KUBECONFIG (~/.kube/config),
    and the rate limit of the operator's settings (ASSAY_API_QPS and ASSAY_API_BURST; None: none;
    not given: the one set before, else the default). Raises credentials.ConfigError when there are none."""
    global _loaded, _limiter
    _loaded = credentials.load(kubeconfig)
    if not isinstance(limiter, _Kept):
        _limiter = limiter
    client.cache_clear()


@functools.lru_cache(maxsize=1)
def client() -> ApiClient:
    """The operator's client, on the credentials `load_config` read (the default ones if it was
    not called) and its rate limit (the default one if it was not called)."""
    return ApiClient(api_session.Session(_loaded or credentials.load()), limiter=_limiter)


def waited_seconds() -> float:
    """The seconds the operator's requests have waited on its rate limit so far (0 with no limit)."""
    limiter = client().limiter
    return limiter.waited_seconds if limiter is not None else 0.0


def request(
    method: str,
    url: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> Any:
    """`ApiClient.request` on the operator's client."""
    return client().request(method, url, body=body, query=query, content_type=content_type, accept=accept)
