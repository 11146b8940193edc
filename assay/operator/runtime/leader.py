"""Leader election on a coordination.k8s.io Lease: several operator replicas, one reconciling.

kopf's own peering pauses an operator only for a peer of *higher* priority, and replicas of
one Deployment share a priority, so it cannot elect one of them. This is the Lease protocol
client-go's leaderelection uses, with its margins (15 s lease, 10 s renew deadline, 2 s
retry period), reduced to what the operator needs:

- a replica holds the Lease while it renews it (`renewTime`) every retry period;
- a standby takes the Lease over only after it has seen the record unchanged for a whole
  lease duration, timed by its *own* monotonic clock (so clock skew between nodes does not
  matter), with an update conditional on the resourceVersion it read (two standbys cannot
  both win);
- a leader that finds another holder, or has not renewed within the renew deadline, has
  lost: the caller ends the process (crash-only: the pod restarts as a standby) rather than
  risk two replicas reconciling. The deadline is a third shorter than the lease, so the
  leader has stopped before any standby's lease duration can run out;
- every Lease request has a timeout, and the deadline is watched by its own thread: a call
  to a hung API server cannot keep a leader leading;
- a leader that stops cleanly releases the Lease, so a rolling update hands over at once.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import logging
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from assay.kube import api_errors
from assay.operator import objects
from assay.operator.kube import leases

log = logging.getLogger(__name__)

_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


LEASE_SECONDS = 15
"""How long a standby waits, on its own clock, after the Lease record last changed before it takes over."""
RENEW_DEADLINE_SECONDS = 10.0
"""How long a leader goes without a successful renewal before it stops leading."""
RETRY_SECONDS = 2.0
"""The leader renews this often; a standby tries this often, plus up to JITTER_FACTOR times more."""
JITTER_FACTOR = 1.2
"""client-go's: standbys that started together do not keep trying in step."""
_SHORTEST_TIMEOUT = 0.05
"""Seconds: a request about to outlast the renew deadline still gets this long."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def check_margins(*, lease_seconds: int, renew_deadline_seconds: float, retry_seconds: float) -> None:
    """client-go's rules: the leader gives up before a standby may take over, and retries at
    least once (jitter included) within its deadline."""
    if lease_seconds < 1 or retry_seconds <= 0:
        raise ValueError(
            f"lease_seconds ({lease_seconds}) must be at least 1 and retry_seconds ({retry_seconds}) above 0."
        )
    if not renew_deadline_seconds < lease_seconds:
        raise ValueError(
            f"renew_deadline_seconds ({renew_deadline_seconds}) must be shorter than lease_seconds ({lease_seconds})."
        )
    if not JITTER_FACTOR * retry_seconds < renew_deadline_seconds:
        raise ValueError(
            f"renew_deadline_seconds ({renew_deadline_seconds}) must be longer than {JITTER_FACTOR} "
            f"times retry_seconds ({retry_seconds})."
        )


class LeaseLock:
    """One replica's view of the Lease `namespace/name`, as `identity`."""

    def __init__(
        self,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: int = LEASE_SECONDS,
        renew_deadline_seconds: float = RENEW_DEADLINE_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        api: leases.Leases | None = None,
    ) -> None:
        check_margins(
            lease_seconds=lease_seconds, renew_deadline_seconds=renew_deadline_seconds, retry_seconds=retry_seconds
        )
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds, self.renew_deadline_seconds = lease_seconds, renew_deadline_seconds
        self.retry_seconds = retry_seconds
        self.request_timeout = renew_deadline_seconds / 2
        """Seconds one Lease request may take: a hung call fails in time for another try within the deadline."""
        self.api = api if api is not None else leases.Leases()
        self._seen: tuple[str, float] | None = None  # (resourceVersion, monotonic time first seen)
        self._renewed_at: float | None = None
        """Monotonic time this replica's last successful write was *sent*: the API server stored it
        later, so the renew deadline counted from here ends before a standby's lease duration can."""

    def _timeout(self) -> float:
        """The next request's timeout: `request_timeout`, and while the renew deadline is ahead,
        no later than the deadline (a late answer would not keep the lead anyway)."""
        if self._renewed_at is None:
            return self.request_timeout
        left = self._renewed_at + self.renew_deadline_seconds - time.monotonic()
        return max(min(self.request_timeout, left), _SHORTEST_TIMEOUT) if left > 0 else self.request_timeout

    # -- one attempt ------------------------------------------------------------------------

    def try_acquire(self) -> bool:
        """Take or renew the Lease once; True while this replica holds it."""
        try:
            lease = self.api.get(namespace=self.namespace, name=self.name, timeout=self._timeout())
        except api_errors.ApiError as error:
            if error.reason != api_errors.NOT_FOUND:
                raise
            return self._create()
        spec = lease.setdefault("spec", {})
        version = str(lease["metadata"].get("resourceVersion"))
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, time.monotonic())
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(spec):
            return False
        transitions = (spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = self.lease_seconds
        spec["renewTime"] = leases.micro_time(_now())
        spec["leaseTransitions"] = transitions
        if holder != self.identity:
            spec["acquireTime"] = spec["renewTime"]
        sent = time.monotonic()
        try:
            updated = self.api.update(lease, timeout=self._timeout())  # conditional on resourceVersion
        except api_errors.ApiError as error:
            if error.reason == api_errors.CONFLICT:  # another replica wrote first
                return False
            raise
        self._seen = (str(updated["metadata"].get("resourceVersion")), time.monotonic())
        self._renewed_at = sent
        if holder != self.identity:
            log.info("Became the leader (Lease %s/%s, previous holder %r).", self.namespace, self.name, holder or None)
        return True

    def _expired(self, spec: objects.LeaseSpec) -> bool:
        assert self._seen is not None
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        return time.monotonic() - self._seen[1] >= duration

    def _create(self) -> bool:
        now = _now()
        body = leases.new_lease(
            namespace=self.namespace, name=self.name, identity=self.identity, lease_seconds=self.lease_seconds, now=now
        )
        sent = time.monotonic()
        try:
            created = self.api.create(body, timeout=self._timeout())
        except api_errors.ApiError as error:
            if error.reason == api_errors.ALREADY_EXISTS:
                return False
            raise
        self._seen = (str(created["metadata"].get("resourceVersion")), time.monotonic())
        self._renewed_at = sent
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
            except Exception as error:
                log.warning("Could not read or write Lease %s/%s: %s", self.namespace, self.name, error)
            if not waiting_logged:
                log.info("Standing by: another replica holds Lease %s/%s.", self.namespace, self.name)
                waiting_logged = True
            pause = self.retry_seconds * (1 + random.random() * JITTER_FACTOR)
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
        return False

    def keep(self, on_lost: Callable[[str], None], stop: threading.Event) -> threading.Thread:
        """Renew every `retry_seconds` in a daemon thread; call `on_lost(why)` once, when another
        replica holds the Lease or no renewal has succeeded within the renew deadline.

        The deadline is watched by a second thread, so a renewal stuck in a call (past its
        timeout, in DNS, in a stalled thread) cannot keep this replica leading. Call it after
        this replica acquired the Lease; the returned thread is the renewing one."""
        if self._renewed_at is None:
            raise RuntimeError(f"keep() is for the holder of Lease {self.namespace}/{self.name}: acquire it first.")
        lost = threading.Event()
        once = threading.Lock()

        def lose(why: str) -> None:
            with once:
                if lost.is_set() or stop.is_set():
                    return
                lost.set()
            on_lost(why)

        def renew() -> None:
            while not stop.wait(self.retry_seconds) and not lost.is_set():
                try:
                    if not self.try_acquire():
                        lose(f"another replica holds Lease {self.namespace}/{self.name}")
                        return
                except Exception as error:
                    log.warning("Could not renew Lease %s/%s: %s", self.namespace, self.name, error)

        def fence() -> None:
            while not lost.is_set():
                assert self._renewed_at is not None
                left = self._renewed_at + self.renew_deadline_seconds - time.monotonic()
                if left <= 0:
                    lose(f"Lease {self.namespace}/{self.name} not renewed within {self.renew_deadline_seconds:g} s")
                    return
                if stop.wait(left):
                    return

        threading.Thread(target=fence, name="assay-lease-deadline", daemon=True).start()
        thread = threading.Thread(target=renew, name="assay-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the Lease up if this replica holds it, so a standby takes over without waiting."""
        try:
            lease = self.api.get(namespace=self.namespace, name=self.name, timeout=self.request_timeout)
            spec = lease.setdefault("spec", {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = None
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = leases.micro_time(_now())
            self.api.update(lease, timeout=self.request_timeout)
            log.info("Released Lease %s/%s.", self.namespace, self.name)
        except Exception as error:
            log.warning("Could not release Lease %s/%s: %s", self.namespace, self.name, error)


def own_namespace(pod_namespace: str | None) -> str:
    """The operator's namespace: POD_NAMESPACE (the chart sets it; `OperatorSettings.pod_namespace`),
    else the pod's service account's."""
    if pod_namespace:
        return pod_namespace
    if _SERVICE_ACCOUNT_NAMESPACE.is_file():
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


def own_identity(pod_name: str | None) -> str:
    """POD_NAME (the chart sets it; `OperatorSettings.pod_name`): a restarted container of the same pod keeps its lead."""
    return pod_name or socket.gethostname()


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
    def do_GET(self) -> None:
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
