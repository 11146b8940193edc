"""Leader election over real HTTP (tests/operator/local_apiserver.py): client-go's margins are
checked, a leader whose Lease calls hang stops leading within its renew deadline, and a
candidate waits out a live holder's lease before it takes over."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from assay.operator.kube import leases
from assay.operator.runtime.leader import LeaseLock
from tests.operator.local_apiserver import LocalApiServer

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
FAST: dict[str, Any] = dict(lease_seconds=2, renew_deadline_seconds=1.0, retry_seconds=0.2)
"""client-go's 15/10/2 s, scaled down so that a test takes seconds."""


@pytest.fixture
def server() -> Iterator[LocalApiServer]:
    server = LocalApiServer()
    yield server
    server.close()


def _lock(server: LocalApiServer, identity: str) -> LeaseLock:
    return LeaseLock("ns", "assay-leader", identity, api=leases.Leases(lambda: server.client), **FAST)


def _holder(server: LocalApiServer) -> str | None:
    lease = server.get(f"{LEASES}/assay-leader")
    assert lease is not None
    holder: str | None = lease["spec"].get("holderIdentity")
    return holder


def test_the_margins_are_client_gos_and_are_checked() -> None:
    lock = LeaseLock("ns", "assay-leader", "a", api=leases.Leases())
    assert (lock.lease_seconds, lock.renew_deadline_seconds, lock.retry_seconds) == (15, 10.0, 2.0)
    assert lock.request_timeout == 5.0
    with pytest.raises(ValueError, match="must be shorter than lease_seconds"):
        LeaseLock("ns", "l", "a", api=leases.Leases(), lease_seconds=10, renew_deadline_seconds=10.0)
    with pytest.raises(ValueError, match="longer than 1.2 times retry_seconds"):
        LeaseLock("ns", "l", "a", api=leases.Leases(), renew_deadline_seconds=2.0, retry_seconds=2.0)
    with pytest.raises(ValueError, match="at least 1"):
        LeaseLock("ns", "l", "a", api=leases.Leases(), lease_seconds=0, renew_deadline_seconds=0.5, retry_seconds=0.1)


def test_a_leader_whose_lease_calls_hang_stops_leading_within_the_renew_deadline(server: LocalApiServer) -> None:
    lock = _lock(server, "a")
    assert lock.try_acquire()
    lost: list[str] = []
    gone, stop = threading.Event(), threading.Event()

    def on_lost(why: str) -> None:
        lost.append(why)
        gone.set()

    renewer = lock.keep(on_lost, stop)
    try:
        # While the API server answers, the leader renews every retry period and keeps the lead.
        time.sleep(FAST["renew_deadline_seconds"] + 0.5)
        assert not lost and sum(1 for method, _ in server.requests if method == "PUT") >= 3

        server.hang = lambda method, path: path.startswith(LEASES)
        hung_at = time.monotonic()
        assert gone.wait(FAST["lease_seconds"] + 5), "still leading while every Lease call hangs"
        stopped_after = time.monotonic() - hung_at
        # Its last renewal was sent before the hang began, so the deadline ran out within
        # renew_deadline_seconds of it: well before a standby could take the Lease over.
        assert stopped_after <= FAST["renew_deadline_seconds"] + 0.4 < FAST["lease_seconds"]
        assert lost == ["Lease ns/assay-leader not renewed within 1 s"]
        assert server.held >= 1  # the calls did reach the server, and hung there
        # Every Lease call has a timeout, no later than the deadline: the renewing thread is not
        # stuck in one, and ends at its next wake-up.
        renewer.join(FAST["retry_seconds"] + 0.5)
        assert not renewer.is_alive()
    finally:
        stop.set()


def test_a_candidate_does_not_take_a_live_lease_and_takes_a_silent_one_after_a_lease_duration(
    server: LocalApiServer,
) -> None:
    a, b = _lock(server, "a"), _lock(server, "b")
    assert a.try_acquire()
    lost: list[str] = []
    a_stop, b_stop, b_won = threading.Event(), threading.Event(), threading.Event()
    a.keep(lost.append, a_stop)

    def stand_by() -> None:
        if b.acquire(b_stop):
            b_won.set()

    threading.Thread(target=stand_by, daemon=True).start()
    try:
        # More than a lease duration of renewals: the candidate never takes a live Lease.
        assert not b_won.wait(FAST["lease_seconds"] + 0.5)
        assert _holder(server) == "a" and not lost

        # The leader goes silent without releasing (SIGKILL, node loss). The candidate takes
        # over once it has seen the record unchanged for a lease duration on its own clock,
        # counted from after the leader's last renewal (at most a retry period before this).
        a_stop.set()
        silent_at = time.monotonic()
        assert b_won.wait(FAST["lease_seconds"] + 2)
        waited = time.monotonic() - silent_at
        assert FAST["lease_seconds"] - FAST["retry_seconds"] - 0.1 <= waited <= FAST["lease_seconds"] + 1
        assert _holder(server) == "b" and not lost
    finally:
        a_stop.set()
        b_stop.set()
