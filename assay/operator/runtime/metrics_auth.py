"""Who may read /metrics: a bearer token the API server vouches for, as controller-runtime's
secure serving does (`filters.WithAuthenticationAndAuthorization`).

The series name every namespace's Evaluations, models and scores, so a tenant must not read
them just because it can reach the pod. Each caller presents a token (Prometheus: its own
service account's); a TokenReview asks the API server who that is, and a SubjectAccessReview
whether they may `get` the non-resource URL `/metrics` (the chart's `<release>-metrics-reader`
ClusterRole grants exactly that; kube-prometheus's Prometheus role already has it). No or an
unknown token: 401; a known caller without that permission: 403.

Answers are kept for `REVIEW_TTL` seconds per token, allowed or not, so a scrape every 15 s
costs at most the two reviews, and a caller retrying a refused token costs nothing more. A
review the API server cannot answer is not kept: the next scrape asks again.
"""

from __future__ import annotations

import enum
import hashlib
import threading
import time
from typing import Any, Callable

from assay.operator.kube import api_client

REVIEW_TTL = 10.0
"""Seconds an answer about one token is reused: shorter than a 15 s scrape interval, so each scrape
of a revoked reader is checked again at most one interval late."""
MAX_CACHED = 1024
"""Tokens remembered at once; a flood of made-up tokens empties the cache rather than grow it."""
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Post = Callable[[str, dict[str, Any]], Any]
"""(API path, body) → the created review as the API server returned it."""


class Verdict(enum.Enum):
    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403


def _post_to_api(path: str, body: dict[str, Any]) -> Any:
    return api_client.request("POST", path, body=body)


class TokenAuthorizer:
    """Checks bearer tokens for `get` on `path` with the API server; thread-safe."""

    def __init__(
        self,
        *,
        post: Post = _post_to_api,
        path: str = "/metrics",
        verb: str = "get",
        ttl: float = REVIEW_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post, self.path, self.verb, self.ttl, self._clock = post, path, verb, ttl, clock
        self._cache: dict[bytes, tuple[Verdict, float]] = {}
        # One review at a time: scrapes that arrive together with one token cost one review.
        self._lock = threading.Lock()

    def verdict(self, token: str) -> Verdict:
        """What the API server says of `token`; raises when it cannot be asked (api_errors.ApiError, OSError)."""
        digest = hashlib.sha256(token.encode()).digest()  # the token itself is not kept
        with self._lock:
            cached = self._cache.get(digest)
            if cached is not None and cached[1] > self._clock():
                return cached[0]
            verdict = self._review(token)
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[digest] = (verdict, self._clock() + self.ttl)
            return verdict

    def _review(self, token: str) -> Verdict:
        review = self._post(
            TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        )
        status = (review or {}).get("status") or {}
        if not status.get("authenticated"):
            return Verdict.UNAUTHENTICATED
        user = status.get("user") or {}
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "nonResourceAttributes": {"path": self.path, "verb": self.verb},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        access = self._post(
            ACCESS_REVIEWS, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        )
        allowed = ((access or {}).get("status") or {}).get("allowed")
        return Verdict.ALLOWED if allowed is True else Verdict.FORBIDDEN
