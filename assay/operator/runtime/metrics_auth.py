"""Who may read /metrics: a bearer token the API server vouches for, as controller-runtime's
secure serving does (`filters.WithAuthenticationAndAuthorization`).

The series name every namespace's Evaluations, models and scores, so a tenant must not read
them just because it can reach the pod. Each caller presents a token (Prometheus: its own
service account's); a TokenReview asks the API server who that is, and a SubjectAccessReview
whether they may `get` the non-resource URL `/metrics` (the chart's `<release>-metrics-reader`
ClusterRole grants exactly that; kube-prometheus's Prometheus role already has it). No or an
unknown token: 401; a known caller without that permission: 403.

Answers are kept per token, as controller-runtime's delegating authorizer keeps them: an allowed
caller for `ALLOWED_TTL` (5 min), a refused one (unknown token, or no permission) for
`DENIED_TTL` (30 s), so a scrape every 15 s costs two reviews every five minutes. A review the
API server cannot answer is not kept: the next scrape asks again.

Made-up tokens are what an attacker who reaches the pod can send for free, each costing the
operator a TokenReview. So they cannot get in the way of the real scrape or of the operator's
work: a cached answer is read under a lock held for a dictionary look-up only, never during a
review (callers with the same token wait for the one review in flight, nobody else does);
reviews have their own rate budget (`REVIEW_QPS`, `REVIEW_BURST`), not the operator's API
budget (`kube.rate_limit`), and a caller past it, or past `MAX_IN_FLIGHT` reviews at once, is
answered 429 at once instead of queued; allowed and refused answers are kept in separate
bounded caches, so a flood of refused tokens pushes out only other refused ones.
"""

from __future__ import annotations

import collections
import enum
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from assay.operator.kube import api_client, rate_limit

ALLOWED_TTL = 300.0
"""Seconds an allowed caller's answer is reused (controller-runtime's AllowCacheTTL): a revoked
reader is refused at most five minutes late."""
DENIED_TTL = 30.0
"""Seconds a refused token's answer is reused (controller-runtime's DenyCacheTTL): a reader just
bound is let in at most 30 s late."""
MAX_ALLOWED, MAX_DENIED = 256, 4096
"""Answers kept at once, oldest pushed out first: allowed callers are a cluster's few scrapers;
refused ones are whatever anyone sends."""
REVIEW_QPS, REVIEW_BURST = 5.0, 20
"""The reviews' own budget, in tokens checked (a TokenReview, and a SubjectAccessReview for a known
caller): bursts of 20, then 5 a second. A cluster's scrapers need a few every five minutes."""
MAX_REVIEW_WAIT = 1.0
"""Seconds a caller may wait for the budget; past it, 429."""
MAX_IN_FLIGHT = 32
"""Tokens being reviewed at once; more callers with other tokens are answered 429."""
REVIEW_TIMEOUT = 10.0
"""Seconds one review request may take (no retry: the scraper comes again)."""
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

Post = Callable[[str, dict[str, Any]], Any]
"""(API path, body) → the created review as the API server returned it."""


class ReviewsBusy(Exception):
    """The review budget is spent or too many reviews are in flight: answer 429, ask nothing."""


class Verdict(enum.Enum):
    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403


def _post_to_api(path: str, body: dict[str, Any]) -> Any:
    # One attempt with its own timeout and outside the operator's rate limit: the budget is the authorizer's.
    return api_client.client().request_once("POST", path, body=body, timeout=REVIEW_TIMEOUT)


class _Review:
    """One review in flight: callers with the same token wait for it instead of asking again."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.verdict: Verdict | None = None
        self.busy = False
        """True when it was turned away by the budget (429 for its waiters too), not failed."""


class TokenAuthorizer:
    """Checks bearer tokens for `get` on `path` with the API server; thread-safe."""

    def __init__(
        self,
        *,
        post: Post = _post_to_api,
        path: str = "/metrics",
        verb: str = "get",
        budget: rate_limit.TokenBucket | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._post, self.path, self.verb, self._clock = post, path, verb, clock
        self.budget = budget or rate_limit.TokenBucket(qps=REVIEW_QPS, burst=REVIEW_BURST)
        # sha256 of a token → (verdict, when it expires); the tokens themselves are not kept.
        self._allowed: collections.OrderedDict[bytes, tuple[Verdict, float]] = collections.OrderedDict()
        self._denied: collections.OrderedDict[bytes, tuple[Verdict, float]] = collections.OrderedDict()
        self._in_flight: dict[bytes, _Review] = {}
        self._lock = threading.Lock()  # held for look-ups and inserts only, never during a review

    def verdict(self, token: str) -> Verdict:
        """What the API server says of `token`. Raises ReviewsBusy past the budget, and what the
        request raises when the API server cannot be asked (api_errors.ApiError, OSError)."""
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            cached = self._cached(digest)
            if cached is not None:
                return cached
            review = self._in_flight.get(digest)
            asking = review is None
            if review is None:
                if len(self._in_flight) >= MAX_IN_FLIGHT:
                    raise ReviewsBusy(f"{MAX_IN_FLIGHT} tokens are being checked already")
                review = self._in_flight[digest] = _Review()
        if not asking:
            review.done.wait(REVIEW_TIMEOUT * 2 + MAX_REVIEW_WAIT)
            if review.verdict is not None:
                return review.verdict
            if review.busy or not review.done.is_set():
                raise ReviewsBusy("the review of this token in flight was turned away or is late")
            raise OSError("the API server did not answer the review of this token")  # as the asking caller was told

        try:
            if not self.budget.take(MAX_REVIEW_WAIT):
                review.busy = True
                raise ReviewsBusy("the budget of token reviews is spent")
            review.verdict = self._review(token)
            self._keep(digest, review.verdict)
            return review.verdict
        finally:
            with self._lock:
                del self._in_flight[digest]
            review.done.set()

    def cached(self) -> tuple[int, int]:
        """(allowed, refused) answers kept now."""
        with self._lock:
            return len(self._allowed), len(self._denied)

    def _cached(self, digest: bytes) -> Verdict | None:
        for cache in (self._allowed, self._denied):
            entry = cache.get(digest)
            if entry is not None:
                if entry[1] > self._clock():
                    return entry[0]
                del cache[digest]
        return None

    def _keep(self, digest: bytes, verdict: Verdict) -> None:
        allowed = verdict is Verdict.ALLOWED
        cache, ttl, most = (
            (self._allowed, ALLOWED_TTL, MAX_ALLOWED) if allowed else (self._denied, DENIED_TTL, MAX_DENIED)
        )
        with self._lock:
            cache.pop(digest, None)
            while len(cache) >= most:
                cache.popitem(last=False)
            cache[digest] = (verdict, self._clock() + ttl)

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
