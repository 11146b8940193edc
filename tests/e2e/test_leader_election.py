"""Leader election of operator replicas. On a real API server's Lease (no node needed): one
leader at a time, a standby takes over once the leader stops renewing, a released Lease is
taken at once, two standbys racing for it cannot both win. On the real node: two replicas
of the chart's Deployment, the leader pod killed without grace, a handover within 30 s and
no run lost or doubled."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import leases
from assay.operator.runtime.leader import LeaseLock, leading
from tests.e2e.cluster import control_plane as cp
from tests.e2e.conftest import CHART, OPERATOR_NAMESPACE, RELEASE, Cluster, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

NAMESPACE = "default"
FAST = dict(lease_seconds=3, renew_deadline_seconds=1.0, retry_seconds=0.2)


@pytest.fixture
def api(control_plane: cp.ControlPlane) -> Iterator[leases.Leases]:
    """The operator's own Lease client, on the admin's credentials (no rate limit)."""
    client = kube_client.ApiClient(api_session.Session(credentials.load(str(control_plane.admin_kubeconfig))))
    yield leases.Leases(lambda: client)


def _holder(api: leases.Leases, name: str) -> tuple[str | None, int]:
    spec = api.get(namespace=NAMESPACE, name=name, timeout=5)["spec"]
    return spec.get("holderIdentity"), spec.get("leaseTransitions") or 0


def test_one_leader_and_a_takeover_once_it_stops_renewing(api: leases.Leases) -> None:
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

    # The old leader, were it only paused, gives up as it wakes: its renew deadline has passed
    # (before its next renewal could find another holder).
    again = threading.Event()
    a.keep(lambda why: (lost.append(why), again.set()), threading.Event())
    assert again.wait(FAST["retry_seconds"] + 2)
    assert "not renewed within" in lost[0]


def test_a_released_lease_is_taken_at_once_and_a_race_has_one_winner(api: leases.Leases) -> None:
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
            barrier.wait()  # noqa: B023 - called within this iteration
            if lock.try_acquire():
                won.append(lock.identity)  # noqa: B023 - called within this iteration

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


def test_a_standby_answers_its_health_probe_until_it_leads(api: leases.Leases) -> None:
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


# --- two operator replicas on the real node -----------------------------------------------


def _lease_holder(cluster: Cluster, lease: str) -> str | None:
    got = cluster.plane.kubectl("get", "lease", lease, "-n", OPERATOR_NAMESPACE, "-o", "json", check=False)
    return json.loads(got.stdout)["spec"].get("holderIdentity") if got.returncode == 0 else None


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def test_a_frozen_leader_is_replaced_within_30_s_with_no_duplicate_job_and_no_lost_status(
    cluster: Cluster,
    images: dict[str, str],
) -> None:
    """The leader's container is frozen (cgroup freezer through containerd): like a hung
    process or a partitioned node, it neither renews nor releases the Lease, and the kubelet
    still reports it running. (Deleting the pod, even with --force, lets it release.)"""
    operator = cluster.operator
    helm(
        cluster.plane,
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        OPERATOR_NAMESPACE,
        *chart_values(images, "operator.replicas=2"),
        "--wait",
        "--timeout=300s",
    )
    frozen: str | None = None
    try:
        pods = cluster.wait_for(
            "two Ready operator replicas",
            lambda: len(p := [p for p in operator.pods() if _ready(p)]) == 2 and p,
            timeout=240,
        )
        container = pods[0]["spec"]["containers"][0]
        (lease,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--leader-election=")]
        names = {p["metadata"]["name"] for p in pods}
        leader = cluster.wait_for("a leader", lambda: (h := _lease_holder(cluster, lease)) in names and h, timeout=60)
        (leader_pod,) = [p for p in pods if p["metadata"]["name"] == leader]

        # A run in flight while the leader hangs: the new leader must record how it ends.
        cluster.apply(evaluation_manifest("in-flight", **dummy_spec()))
        cluster.wait_for("the in-flight Job", lambda: cluster.items("jobs"), timeout=60)
        frozen = leader_pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        cluster.node.ctr("tasks", "pause", frozen)
        paused = time.monotonic()
        successor = cluster.wait_for(
            "another replica to lead",
            lambda: (h := _lease_holder(cluster, lease)) not in (None, leader) and h,
            timeout=60,
        )
        handover = time.monotonic() - paused
        print(f"handover from the frozen {leader} to {successor} in {handover:.1f} s")
        assert handover <= 30

        cluster.apply(evaluation_manifest("after-handover", **dummy_spec()))
        for name in ("in-flight", "after-handover"):
            status = cluster.wait(name, "Succeeded", timeout=180)["status"]
            assert status["results"]["arc_easy"], name
        assert sorted(j["metadata"]["name"] for j in cluster.items("jobs")) == sorted(
            cluster.job_name(name) for name in ("after-handover", "in-flight")
        )
        created = [
            e
            for e in json.loads(cluster.kubectl("get", "events", "-o", "json").stdout)["items"]
            if e["reason"] == "JobCreated"
        ]
        assert sorted(e["involvedObject"]["name"] for e in created) == ["after-handover", "in-flight"]

        # Thawed, the old leader finds another holder at its next renewal and exits (crash-only).
        cluster.node.ctr("tasks", "resume", frozen)
        frozen = None

        def restarted() -> bool:
            pod = json.loads(operator.kubectl("get", "pod", leader, "-o", "json").stdout)
            return int(pod["status"]["containerStatuses"][0].get("restartCount", 0)) > 0

        cluster.wait_for("the old leader to exit and restart as a standby", restarted, timeout=90)
        # The kubelet may answer for the exited container's log a moment after its restart.
        cluster.wait_for(
            "the old leader's last log to say why it exited",
            lambda: "Lost the lead" in operator.kubectl("logs", leader, "--previous", check=False).stdout,
            timeout=30,
            interval=2,
        )
        assert _lease_holder(cluster, lease) == successor
    finally:
        if frozen is not None:
            cluster.node.ctr("tasks", "resume", frozen, check=False)
        helm(
            cluster.plane,
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            *chart_values(images),
            "--wait",
            "--timeout=300s",
        )
        operator.wait_watching()
