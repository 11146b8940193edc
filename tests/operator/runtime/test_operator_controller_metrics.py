"""The operator's own series move with what it does: reconcile timings and errors by kind, the
decision queue's depth, the leader flag (`controller_metrics` and where it is wired in)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import threading
from typing import Any

import pytest

from assay.kube import api_errors
from assay.operator import handlers
from assay.operator.kube import rate_limit
from assay.operator.runtime import decisions
from assay.operator.runtime.leader import LeaseLock, leading
from assay.operator.runtime.metrics import EvaluationMetrics
from assay.operator.runtime.state import OperatorState


def _value(metrics: EvaluationMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_handler_runs_are_timed_and_their_errors_counted_by_kind() -> None:
    metrics = EvaluationMetrics()
    state = OperatorState(metrics=metrics)
    with handlers._counting_errors(state, "mirror_job"):
        pass
    with pytest.raises(RuntimeError), handlers._counting_errors(state, "mirror_pod"):
        raise RuntimeError("the API server went away")
    assert _value(metrics, "assay_reconcile_duration_seconds_count", kind="Job") == 1
    assert _value(metrics, "assay_reconcile_duration_seconds_count", kind="Pod") == 1
    assert _value(metrics, "assay_reconcile_errors_total", kind="Pod") == 1
    assert _value(metrics, "assay_reconcile_errors_total", kind="Job") == 0
    # The older series by handler stays (the dashboard's panel reads it).
    assert _value(metrics, "assay_operator_reconcile_errors_total", handler="mirror_pod") == 1
    metrics.record_error("reconcile")  # a failed run decision
    assert _value(metrics, "assay_reconcile_errors_total", kind="Evaluation") == 1


def _body(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "generation": 1}, "spec": {}, "status": {}}


def test_the_work_queue_depth_counts_decisions_asked_for_and_not_done() -> None:
    metrics = EvaluationMetrics()
    bodies = {("ns", n): _body(n) for n in ("a", "b")}
    entered, release = threading.Semaphore(0), threading.Event()
    depths: list[float] = []

    def decide(body: dict[str, Any]) -> None:
        entered.release()
        release.wait(10)
        if body["metadata"]["name"] == "b":
            raise RuntimeError("503")

    async def scenario() -> None:
        pool = concurrent.futures.ThreadPoolExecutor(1)  # one thread: `b` waits behind `a`
        run = decisions.RunDecisions(
            decide=decide, latest=bodies.get, on_error=lambda *_: None, executor=pool, delays=(3600.0,)
        )
        metrics.controller.watch_queue(run.depth)
        depths.append(_value(metrics, "assay_workqueue_depth"))
        both = asyncio.gather(run.observe(bodies[("ns", "a")]), run.observe(bodies[("ns", "b")]))
        await asyncio.get_running_loop().run_in_executor(None, entered.acquire)
        depths.append(_value(metrics, "assay_workqueue_depth"))  # a running, b waiting for the thread
        release.set()
        await both
        depths.append(_value(metrics, "assay_workqueue_depth"))  # b failed: its retry is due
        await run.observe(bodies[("ns", "b")], deleted=True)
        depths.append(_value(metrics, "assay_workqueue_depth"))
        pool.shutdown()

    asyncio.run(scenario())
    assert depths == [0, 2, 1, 0]


class MemoryLeases:
    """The three Lease calls LeaseLock makes (`leases.Leases`), kept in memory, with resourceVersion checks."""

    def __init__(self) -> None:
        self.lease: Any = None

    def get(self, *, namespace: str, name: str, timeout: float) -> Any:
        if self.lease is None:
            raise api_errors.ApiError(code=404, reason=api_errors.NOT_FOUND)
        return copy.deepcopy(self.lease)

    def create(self, lease: Any, *, timeout: float) -> Any:
        self.lease = {**copy.deepcopy(lease), "metadata": {**lease["metadata"], "resourceVersion": "1"}}
        return copy.deepcopy(self.lease)

    def update(self, lease: Any, *, timeout: float) -> Any:
        version = lease["metadata"]["resourceVersion"]
        if version != self.lease["metadata"]["resourceVersion"]:
            raise api_errors.ApiError(code=409, reason=api_errors.CONFLICT)
        self.lease = {
            **copy.deepcopy(lease),
            "metadata": {**lease["metadata"], "resourceVersion": str(int(version) + 1)},
        }
        return copy.deepcopy(self.lease)


def test_the_leader_gauge_is_1_while_this_replica_leads() -> None:
    metrics = EvaluationMetrics()
    metrics.controller.set_leader(False)  # main: a replica that elects starts as a standby
    lock = LeaseLock(
        "ns",
        "assay-leader",
        "pod-a",
        api=MemoryLeases(),  # type: ignore[arg-type]
        renew_deadline_seconds=60.0,
        lease_seconds=120,
    )
    seen = [_value(metrics, "assay_leader")]
    with leading(lock, health_port=0, on_change=metrics.controller.set_leader):
        seen.append(_value(metrics, "assay_leader"))
    seen.append(_value(metrics, "assay_leader"))
    assert seen == [0, 1, 0]
    assert lock.api.lease["spec"]["holderIdentity"] is None  # type: ignore[attr-defined]  # released on the way out


def test_the_time_waited_on_the_rate_limit_is_a_counter_read_from_the_bucket() -> None:
    metrics = EvaluationMetrics()
    name = "assay_operator_rate_limit_wait_seconds_total"
    assert _value(metrics, name) == 0.0  # exported before anything is watched
    slept: list[float] = []
    now = [0.0]
    bucket = rate_limit.TokenBucket(qps=4, burst=2, clock=lambda: now[0], sleep=slept.append)
    metrics.controller.watch_rate_limit(lambda: bucket.waited_seconds)
    for _ in range(4):
        bucket.wait()  # the clock stands still: the third and fourth wait 0.25 s and 0.5 s
    assert slept == [0.25, 0.5] and _value(metrics, name) == 0.75
    assert bucket.take(0.1) is False and _value(metrics, name) == 0.75  # turned away: no wait
