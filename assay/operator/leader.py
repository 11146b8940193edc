"""Leader election on a coordination.k8s.io Lease: several operator replicas, one reconciling.

kopf's own peering pauses an operator only for a peer of *higher* priority, and replicas of
one Deployment share a priority, so it cannot elect one of them. This is the Lease protocol
client-go's leaderelection uses, reduced to what the operator needs:

- a replica holds the Lease while it renews it (`renewTime`) within `leaseDurationSeconds`;
- a standby takes the Lease over only after it has seen the record unchanged for a whole
  lease duration, timed by its *own* monotonic clock (so clock skew between nodes does not
  matter), with an update conditional on the resourceVersion it read (two standbys cannot
  both win);
- a leader that cannot renew for a lease duration, or finds another holder, has lost: the
  caller ends the process (crash-only: the pod restarts as a standby) rather than risk two
  replicas reconciling;
- a leader that stops cleanly releases the Lease, so a rolling update hands over at once.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class LeaseLock:
    """One replica's view of the Lease `namespace/name`, as `identity`."""

    def __init__(self, namespace: str, name: str, identity: str, *, lease_seconds: int = 15,
                 renew_seconds: float = 5.0, retry_seconds: float = 2.0, api: Any = None) -> None:  # fmt: skip
        if not renew_seconds < lease_seconds:
            raise ValueError(f"renew_seconds ({renew_seconds}) must be shorter than lease_seconds ({lease_seconds}).")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_seconds, self.retry_seconds = lease_seconds, renew_seconds, retry_seconds
        self.api = api if api is not None else client.CoordinationV1Api()
        self._seen: tuple[str, float] | None = None  # (resourceVersion, monotonic time first seen)
        self._renewed_at: float | None = None  # monotonic time of this replica's last successful write

    # -- one attempt ------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take or renew the Lease once; True while this replica holds it."""
        try:
            lease: Any = self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            return self._create()
        spec = lease.spec
        version = str(lease.metadata.resource_version)
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, time.monotonic())
        holder = spec.holder_identity or ""
        if holder and holder != self.identity and not self._expired(spec):
            return False
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = self.lease_seconds
        spec.renew_time = _now()
        spec.lease_transitions = transitions
        if holder != self.identity:
            spec.acquire_time = spec.renew_time
        try:
            updated: Any = self.api.replace_namespaced_lease(self.name, self.namespace, lease)  # conditional on resourceVersion
        except ApiException as error:
            if error.status == 409:  # another replica wrote first
                return False
            raise
        self._seen = (str(updated.metadata.resource_version), time.monotonic())
        self._renewed_at = time.monotonic()
        if holder != self.identity:
            log.info("Became the leader (Lease %s/%s, previous holder %r).", self.namespace, self.name, holder or None)
        return True

    def _expired(self, spec: Any) -> bool:
        assert self._seen is not None
        duration = spec.lease_duration_seconds or self.lease_seconds
        return time.monotonic() - self._seen[1] >= duration

    def _create(self) -> bool:
        now = _now()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=self.lease_seconds,
                                    acquire_time=now, renew_time=now, lease_transitions=0),  # fmt: skip
        )
        try:
            created: Any = self.api.create_namespaced_lease(self.namespace, body)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        self._seen = (str(created.metadata.resource_version), time.monotonic())
        self._renewed_at = time.monotonic()
        log.info("Became the leader (created Lease %s/%s).", self.namespace, self.name)
        return True

    # -- over time --------------------------------------------------------------------------

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this replica leads (True), or `stop` is set (False)."""
        waiting_logged = False
        while stop is None or not stop.is_set():
            try:
                if self.try_acquire():
                    return True
            except Exception as error:  # noqa: BLE001 - the API server may be briefly away; keep trying
                log.warning("Could not read or write Lease %s/%s: %s", self.namespace, self.name, error)
            if not waiting_logged:
                log.info("Standing by: another replica holds Lease %s/%s.", self.namespace, self.name)
                waiting_logged = True
            if stop is not None:
                stop.wait(self.retry_seconds)
            else:
                time.sleep(self.retry_seconds)
        return False

    def keep(self, on_lost: Callable[[str], None], stop: threading.Event) -> threading.Thread:
        """Renew every `renew_seconds` in a daemon thread; call `on_lost(why)` once the lead is gone."""

        def renew() -> None:
            while not stop.wait(self.renew_seconds):
                try:
                    if self.try_acquire():
                        continue
                    on_lost(f"another replica holds Lease {self.namespace}/{self.name}")
                    return
                except Exception as error:  # noqa: BLE001 - retried until the lease would run out
                    log.warning("Could not renew Lease %s/%s: %s", self.namespace, self.name, error)
                if self._renewed_at is not None and time.monotonic() - self._renewed_at >= self.lease_seconds:
                    on_lost(f"Lease {self.namespace}/{self.name} not renewed for {self.lease_seconds} s")
                    return

        thread = threading.Thread(target=renew, name="assay-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the Lease up if this replica holds it, so a standby takes over without waiting."""
        try:
            lease: Any = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = _now()
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("Released Lease %s/%s.", self.namespace, self.name)
        except Exception as error:  # noqa: BLE001 - best effort: the lease expires anyway
            log.warning("Could not release Lease %s/%s: %s", self.namespace, self.name, error)


def own_namespace() -> str:
    """The operator's namespace: POD_NAMESPACE (the chart sets it), else the pod's service account's."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if _SERVICE_ACCOUNT_NAMESPACE.is_file():
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def own_identity() -> str:
    """POD_NAME (the chart sets it): a restarted container of the same pod keeps its lead."""
    return os.environ.get("POD_NAME") or socket.gethostname()


@contextlib.contextmanager
def leading(lock: LeaseLock, *, health_port: int, on_change: Callable[[bool], None] = lambda _: None) -> Iterator[None]:
    """Stand by (answering /healthz, so the kubelet keeps the pod) until this replica leads,
    keep the lead while the body runs, and release it when the body ends.

    `on_change(True)` once it leads, `on_change(False)` once it let go (the assay_leader gauge);
    a lost lead ends the process."""
    standby = _standby_health(health_port) if health_port else None
    try:
        lock.acquire()
    finally:
        if standby is not None:
            standby.shutdown()
            standby.server_close()
    on_change(True)
    stop = threading.Event()
    lock.keep(_exit_on_lost_lead, stop)
    try:
        yield
    finally:
        stop.set()
        lock.release()
        on_change(False)


def _exit_on_lost_lead(why: str) -> None:
    # Crash-only: stopping kopf's handlers from this thread is not possible cleanly, and two
    # replicas must never reconcile at once. The pod restarts and stands by.
    log.error("Lost the lead (%s); exiting so that only one replica reconciles.", why)
    logging.shutdown()
    sys.stderr.flush()
    os._exit(1)


class _StandbyHealth(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        body = b"standby: waiting for the leader Lease\n"
        self.send_response(200 if self.path.startswith("/healthz") else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not worth a line each
        pass


def _standby_health(port: int) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), _StandbyHealth)
    threading.Thread(target=server.serve_forever, name="assay-standby-health", daemon=True).start()
    return server
