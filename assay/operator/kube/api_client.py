"""The operator's client: one `assay.kube.client.ApiClient` with the operator's name, its
credentials and its rate limit, which every request of `kube` goes through.

`load_config` reads the credentials (`assay.kube.credentials`: the pod's service account,
else a kubeconfig) and sets the rate limit (`rate_limit`); `client` is the ApiClient made
from them; `request` sends on it. Leader election's Lease calls (`leases`) use the same
client's `request_once`, which the rate limit never holds (the renew loop keeps its own
clock, and a leader must not lose its Lease to its own burst of reconciles).
"""

from __future__ import annotations

import functools
from typing import Any

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import rate_limit

CLIENT_NAME = "assay-operator"
"""The operator's name to the API server: its User-Agent (and, in `kube`, the component of
its Events and its field manager)."""

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
def client() -> kube_client.ApiClient:
    """The operator's client, on the credentials `load_config` read (the default ones if it was
    not called) and its rate limit (the default one if it was not called)."""
    session = api_session.Session(_loaded or credentials.load())
    return kube_client.ApiClient(session, user_agent=CLIENT_NAME, limiter=_limiter)


def waited_seconds() -> float:
    """The seconds the operator's requests have waited on its rate limit so far (0 with no limit)."""
    limiter = client().limiter
    return limiter.waited_seconds if isinstance(limiter, rate_limit.TokenBucket) else 0.0


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
