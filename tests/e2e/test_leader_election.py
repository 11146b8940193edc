"""Leader election of operator replicas on a real API server's Lease (no node needed):
one leader at a time, a standby takes over once the leader stops renewing, a released Lease
is taken at once, and two standbys racing for it cannot both win."""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any, Iterator

import pytest

from assay.operator.leader import LeaseLock, leading
from tests.e2e.cluster import control_plane as cp

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
FAST = dict(lease_seconds=3, renew_seconds=1.0, retry_seconds=0.2)


@pytest.fixture
def api(control_plane: cp.ControlPlane) -> Iterator[Any]:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(control_plane.admin_kubeconfig))
    yield client.CoordinationV1Api(api_client)
    api_client.close()


def _holder(api: Any, name: str) -> tuple[str | None, int]:
    lease = api.read_namespaced_lease(name, NAMESPACE)
    return lease.spec.holder_identity, lease.spec.lease_transitions


def test_one_leader_and_a_takeover_once_it_stops_renewing(api: Any) -> None:
    a, b = (LeaseLock(NAMESPACE, "handover", who, api=api, **FAST) for who in ("a", "b"))
    assert a.try_acquire() and not b.try_acquire()
    a_stop = threading.Event()
    lost: list[str] = []
    a.keep(lost.append, a_stop)

    b_won = threading.Event()
    threading.Thread(target=lambda: b.acquire() and b_won.set(), daemon=True).start()
    # Two lease durations of renewals: the standby never takes over a live leader.
    assert not b_won.wait(2 * FAST["lease_seconds"])
    assert _holder(api, "handover") == ("a", 0) and not lost

    # The leader dies without releasing (SIGKILL, node loss): the standby takes over after one
    # lease duration of silence, timed on its own clock.
    a_stop.set()
    stopped = time.monotonic()
    assert b_won.wait(FAST["lease_seconds"] + 3)
    assert time.monotonic() - stopped <= FAST["lease_seconds"] + 2
    assert _holder(api, "handover") == ("b", 1)

    # The old leader, were it only paused, finds another holder at its next renewal and gives up.
    again = threading.Event()
    a.keep(lambda why: (lost.append(why), again.set()), threading.Event())
    assert again.wait(FAST["renew_seconds"] + 2)
    assert "another replica holds" in lost[0]


def test_a_released_lease_is_taken_at_once_and_a_race_has_one_winner(api: Any) -> None:
    first = LeaseLock(NAMESPACE, "race", "first", api=api, **FAST)
    assert first.try_acquire()
    racers = [LeaseLock(NAMESPACE, "race", f"r{i}", api=api, **FAST) for i in range(2)]
    for racer in racers:
        assert not racer.try_acquire()  # each has now seen the live record
    first.release()
    assert _holder(api, "race")[0] is None
    for _ in range(3):
        barrier = threading.Barrier(len(racers))
        won: list[str] = []

        def race(lock: LeaseLock) -> None:
            barrier.wait()
            if lock.try_acquire():
                won.append(lock.identity)

        threads = [threading.Thread(target=race, args=(r,)) for r in racers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        # A holder that already leads renews; the other sees a live lease or loses the
        # resourceVersion race (409): never two leaders.
        holder = _holder(api, "race")[0]
        assert holder in won and len(set(won) - {holder}) == 0, (won, holder)
        next(r for r in racers if r.identity == holder).release()


def test_a_standby_answers_its_health_probe_until_it_leads(api: Any) -> None:
    leader = LeaseLock(NAMESPACE, "standby", "leader", api=api, **FAST)
    assert leader.try_acquire()
    standby = LeaseLock(NAMESPACE, "standby", "standby", api=api, **FAST)
    port = cp.free_port()
    leading_now = threading.Event()
    done = threading.Event()

    def run() -> None:
        with leading(standby, health_port=port):
            leading_now.set()
            done.wait(30)

    threading.Thread(target=run, daemon=True).start()
    body = None
    for _ in range(50):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                body = response.read().decode()
            break
        except OSError:
            time.sleep(0.1)
    assert body is not None and body.startswith("standby") and not leading_now.is_set()
    leader.release()
    assert leading_now.wait(5)
    # Leading: the standby's health server is gone (kopf's own probe takes the port).
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
    done.set()
