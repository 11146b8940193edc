"""The Lease calls of leader election (coordination.k8s.io/v1), through the kubernetes client.

Not on `kube`'s connection (`api_session`): each election request carries a timeout shorter
than the renew deadline and must not be retried by the client, and a Lease's update is
conditional on the resourceVersion read, which the client's CoordinationV1Api gives as it
is. `runtime.leader` keeps the protocol, its clocks and threads; this module only the client.
"""

from __future__ import annotations

import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

__all__ = ["ApiException", "api", "new_lease"]


def api(configuration: Any = None) -> Any:
    """A CoordinationV1Api (on the default credentials, or `configuration`) with urllib3's
    retries off: by default it sends a GET or PUT that timed out three more times, which
    would stretch one Lease call to four timeouts. The renew loop retries on its own clock."""
    configuration = configuration if configuration is not None else client.Configuration.get_default_copy()
    configuration.retries = False
    return client.CoordinationV1Api(client.ApiClient(configuration))


def new_lease(*, namespace: str, name: str, identity: str, lease_seconds: int, now: datetime.datetime) -> Any:
    """A Lease held by `identity` from `now`, as its first holder creates it."""
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        spec=client.V1LeaseSpec(holder_identity=identity, lease_duration_seconds=lease_seconds,
                                acquire_time=now, renew_time=now, lease_transitions=0),  # fmt: skip
    )
