"""When a run is decided (`trigger`, `decisions`): a level read from the newest body, once at a time, retried.

Real asyncio and a real thread pool; the decision itself is a recording function (the
e2e suite runs the operator's own against a real API server).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

from assay.operator.build import builders
from assay.operator.decide import conditions, trigger
from assay.operator.runtime import decisions

Body = dict[str, Any]


def _body(
    name: str = "ev", *, generation: int = 1, status: dict[str, Any] | None = None, rv: int = 1, **meta: Any
) -> Body:
    return {
        "metadata": {"namespace": "ns", "name": name, "generation": generation, "resourceVersion": str(rv), **meta},
        "spec": {},
        "status": status or {},
    }


def _decided(generation: int = 1, phase: str = conditions.PENDING) -> dict[str, Any]:
    return {"observedGeneration": generation, "phase": phase, "jobName": f"ev-g{generation}"}


def test_the_trigger_is_the_status_against_the_spec() -> None:
    assert trigger.needs_decision(_body(), first_sight=False)  # new: no status yet
    assert not trigger.needs_decision(_body(status=_decided()), first_sight=False)
    assert trigger.needs_decision(_body(generation=2, status=_decided()), first_sight=False)
    # First seen after a start: an unfinished run is looked at again, a finished one is not.
    assert trigger.needs_decision(_body(status=_decided()), first_sight=True)
    assert not trigger.needs_decision(_body(status=_decided(phase=conditions.SUCCEEDED)), first_sight=True)
    # A refused spec is finished too (Failed at its generation): a restart does not refuse it again.
    assert not trigger.needs_decision(_body(status=_decided(phase=conditions.FAILED)), first_sight=True)
    assert not trigger.needs_decision(_body(generation=2, deletionTimestamp="2026-01-01T00:00:00Z"), first_sight=True)
    rerun = _body(status=_decided(phase=conditions.SUCCEEDED), annotations={builders.ANNOTATION_RERUN: "t1"})
    assert trigger.needs_decision(rerun, first_sight=False)


class Store:
    """The newest bodies, as the watches and the operator's own writes keep them."""

    def __init__(self) -> None:
        self.bodies: dict[trigger.Key, Body] = {}

    def put(self, body: Body) -> Body:
        self.bodies[trigger.key_of(body)] = body
        return body

    def get(self, key: trigger.Key) -> Body | None:
        return self.bodies.get(key)


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_an_event_after_the_decision_does_not_decide_again() -> None:
    store, calls = Store(), []

    def decide(body: Body) -> None:
        calls.append(body["metadata"]["resourceVersion"])
        # The status write's response is the newest body (rv 3) before its own watch event.
        store.put(_body(status=_decided(), rv=3))

    async def scenario() -> None:
        run = decisions.RunDecisions(decide=decide, latest=store.get, on_error=lambda *_: None)
        await run.observe(store.put(_body(rv=1)))
        # A late event of an older version (rv 2: a label change before the write) arrives next.
        await run.observe(_body(rv=2))
        await run.observe(store.get(("ns", "ev")) or {})

    _run(scenario())
    assert calls == ["1"]


def test_a_failed_decision_is_retried_until_it_succeeds_then_left_alone() -> None:
    store, calls, errors = Store(), [], []

    def decide(body: Body) -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            # The status was written, then creating the Job failed: the status says decided.
            store.put(_body(status=_decided(), rv=2))
            raise RuntimeError("503 from the API server")

    async def scenario() -> decisions.RunDecisions:
        run = decisions.RunDecisions(
            decide=decide,
            latest=store.get,
            delays=(0.05, 0.1),
            on_error=lambda key, error: errors.append((key, str(error))),
        )
        await run.observe(store.put(_body(rv=1)))
        assert run.pending_retries() == [("ns", "ev")]
        await asyncio.sleep(0.3)
        return run

    run = _run(scenario())
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.05
    assert errors == [(("ns", "ev"), "503 from the API server")] and run.pending_retries() == []


def test_no_retry_once_the_run_finished_or_the_evaluation_is_gone() -> None:
    store, calls = Store(), []

    def decide(body: Body) -> None:
        calls.append(body)
        raise RuntimeError("boom")

    async def scenario() -> None:
        run = decisions.RunDecisions(decide=decide, latest=store.get, delays=(0.05,), on_error=lambda *_: None)
        await run.observe(store.put(_body("finishing", rv=1)))
        store.put(_body("finishing", status=_decided(phase=conditions.SUCCEEDED), rv=5))
        await run.observe(store.put(_body("deleted", rv=1)))
        await run.observe(store.get(("ns", "deleted")) or {}, deleted=True)
        await asyncio.sleep(0.2)

    _run(scenario())
    assert [c["metadata"]["name"] for c in calls] == ["finishing", "deleted"]


def test_decisions_of_one_evaluation_never_overlap_those_of_two_do() -> None:
    store = Store()
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()
    both_ran = threading.Barrier(2, timeout=5)

    def decide(body: Body) -> None:
        name = body["metadata"]["name"]
        with lock:
            running[name] = running.get(name, 0) + 1
            most[name] = max(most.get(name, 0), running[name])
        if name.startswith("pair"):
            both_ran.wait()  # two Evaluations: both must be inside at once
        else:
            time.sleep(0.05)
        with lock:
            running[name] -= 1

    async def scenario() -> None:
        pool = concurrent.futures.ThreadPoolExecutor(4)
        run = decisions.RunDecisions(
            decide=decide, latest=store.get, executor=pool, delays=(0.01,), on_error=lambda *_: None
        )
        store.put(_body("solo"))
        # An event decision and a retry of the same Evaluation at once: one waits for the other.
        await asyncio.gather(
            run.observe(store.get(("ns", "solo")) or {}), run._run(("ns", "solo"), wanted=lambda _: True)
        )
        await asyncio.gather(run.observe(store.put(_body("pair-a"))), run.observe(store.put(_body("pair-b"))))
        pool.shutdown()

    _run(scenario())
    assert most == {"solo": 1, "pair-a": 1, "pair-b": 1}
