"""An API client: every request to the API server is one `ApiClient` call.

Credentials from `credentials`, a connection per thread from `api_session`, errors read
into `api_errors.ApiError` by the answer's Status. A `request` waits for a token of the
caller's rate limit, if it gives one (the operator's: `assay.operator.kube.rate_limit`)
and, answered 429 or 503 with a Retry-After, waits that long (at most
MAX_RETRY_AFTER_SECONDS) and asks again, up to RETRY_AFTER_ATTEMPTS times, as client-go
does. `request_once` is one attempt within a timeout (leader election's Lease calls: never
retried by the client, never held by the rate limit); `stream` reads an answer as it
arrives (a pod's log, followed).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Generator
from typing import Any, Protocol

from assay.kube import api_errors, api_session

RETRY_AFTER_CODES = frozenset({429, 503})
RETRY_AFTER_ATTEMPTS = 3
"""How often one request is sent again on a Retry-After; past that the ApiError is raised
(and the caller's own backoff, if any, takes over)."""
MAX_RETRY_AFTER_SECONDS = 10.0
"""The longest one Retry-After is waited: the calling thread is held meanwhile."""
STREAM_CHUNK = 4096


class Limiter(Protocol):
    """A rate limit: `wait` takes one request's token, sleeping until there is one."""

    def wait(self) -> float: ...


class ApiClient:
    """Requests over `session` as `user_agent`, limited by `limiter` (None: no limit); `sleep` waits out a Retry-After."""

    def __init__(
        self,
        session: api_session.Session,
        *,
        user_agent: str = "assay",
        limiter: Limiter | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.session, self.user_agent, self.limiter, self._sleep = session, user_agent, limiter, sleep

    @property
    def server(self) -> str:
        """The API server's address, as the credentials name it (for messages)."""
        return self.session.credentials.server

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
        """One API request; the decoded JSON answer. Raises ApiError for an error answer, one of
        `api_session.UNREACHABLE` when there is no answer."""
        url = _with_query(url, query)
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

    def stream(
        self, url: str, *, query: dict[str, str] | None = None, read_timeout: float | None
    ) -> Generator[bytes, None, None]:
        """A GET whose answer is yielded as it arrives, on a connection of its own; `read_timeout`
        None waits for ever between chunks (a followed log). Raises ApiError for an error answer."""
        headers = self._headers(None, "application/json", "*/*")
        with self.session.stream("GET", _with_query(url, query), headers=headers, read_timeout=read_timeout) as answer:
            if answer.status >= 400:
                raise api_errors.from_answer(answer.status, answer.read(), retry_after=answer.getheader("Retry-After"))
            while chunk := answer.read1(STREAM_CHUNK):
                yield chunk

    def _headers(self, payload: bytes | None, content_type: str, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": self.user_agent, **self.session.auth_headers()}
        if payload is not None:
            headers["Content-Type"] = content_type
        return headers


def _with_query(url: str, query: dict[str, str] | None) -> str:
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(query) if query else url


def _retry_after(response: api_session.Response) -> float | None:
    """Seconds to wait before asking again, when a 429 or 503 says (whole seconds, as client-go reads it)."""
    if response.status not in RETRY_AFTER_CODES or response.retry_after is None:
        return None
    try:
        seconds = int(response.retry_after.strip())
    except ValueError:
        return None  # an HTTP date: the API server sends seconds
    return min(max(seconds, 0), MAX_RETRY_AFTER_SECONDS)
