"""The Lease calls of leader election (coordination.k8s.io/v1), on the operator's one client.

Each is `assay.kube.client.ApiClient.request_once`: a timeout of the caller's (shorter than the
renew deadline), no retry by the client, no wait for the rate limit. An update is a PUT of
the Lease as read, so the API server applies it only if its resourceVersion is still the
stored one (409 Conflict otherwise: another replica wrote first). `runtime.leader` keeps the
protocol, its clocks and threads; this module only the requests.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import cast

from assay.kube import client as kube_client
from assay.operator import objects
from assay.operator.kube import api_client

API_VERSION = "coordination.k8s.io/v1"


def _path(namespace: str, name: str | None = None) -> str:
    collection = f"/apis/{API_VERSION}/namespaces/{namespace}/leases"
    return collection if name is None else f"{collection}/{name}"


def micro_time(moment: datetime.datetime) -> str:
    """A Lease's acquireTime and renewTime: RFC 3339 in UTC with microseconds (meta/v1 MicroTime)."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Leases:
    """Get, create and update one namespace's Leases; `client` gives the client to use (the
    operator's, which `api_client.load_config` may replace, unless a test gives its own)."""

    def __init__(self, client: Callable[[], kube_client.ApiClient] = api_client.client) -> None:
        self._client = client

    def get(self, *, namespace: str, name: str, timeout: float) -> objects.Lease:
        """The Lease; raises ApiError (NotFound when there is none)."""
        return cast(objects.Lease, self._client().request_once("GET", _path(namespace, name), timeout=timeout))

    def create(self, lease: objects.Lease, *, timeout: float) -> objects.Lease:
        """Create `lease`; raises ApiError (AlreadyExists when another replica created it first)."""
        namespace = lease["metadata"]["namespace"]
        return cast(objects.Lease, self._client().request_once("POST", _path(namespace), body=lease, timeout=timeout))

    def update(self, lease: objects.Lease, *, timeout: float) -> objects.Lease:
        """Replace `lease` if its resourceVersion is still the stored one; raises ApiError (Conflict when not)."""
        meta = lease["metadata"]
        return cast(
            objects.Lease,
            self._client().request_once("PUT", _path(meta["namespace"], meta["name"]), body=lease, timeout=timeout),
        )


def new_lease(*, namespace: str, name: str, identity: str, lease_seconds: int, now: datetime.datetime) -> objects.Lease:
    """A Lease held by `identity` from `now`, as its first holder creates it."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": lease_seconds,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": 0,
        },
    }
