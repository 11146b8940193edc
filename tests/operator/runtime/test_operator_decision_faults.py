"""A decision that raises something no retry changes (a RecursionError on a deeply nested spec)
ends the run once with a fixed sentence; one the API server caused is still tried again.

Real asyncio, a real thread pool and a real RecursionError (a deeply nested spec); the status write is the store's
(the e2e suite runs `decision_faults.record` against a real API server)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
from typing import Any

from assay.kube import api_errors
from assay.operator.build import builders
from assay.operator.decide import conditions, reconcile, trigger
from assay.operator.runtime import decision_faults, decisions
from assay.spec import parse_spec

Body = dict[str, Any]


def _body(status: dict[str, Any] | None = None, rv: int = 1) -> Body:
    return {
        "metadata": {"namespace": "ns", "name": "ev", "generation": 1, "resourceVersion": str(rv)},
        "spec": {},
        "status": status or {},
    }


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def _scenario(
    decide: Any, *, on_fault: Any, wait: float = 0.4, watch_again: bool = True
) -> tuple[decisions.RunDecisions, list[str]]:
    store: dict[trigger.Key, Body] = {}
    errors: list[str] = []

    def put(body: Body) -> Body:
        store[trigger.key_of(body)] = body
        return body

    def fault(body: Body, error: BaseException) -> None:
        on_fault(body, error)
        # What decision_faults.record writes: the run refused at its generation.
        put(_body(status=dict(reconcile.rejection(body, decision_faults.message(error), now=_now())), rv=9))

    async def run() -> decisions.RunDecisions:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            deciding = decisions.RunDecisions(
                decide=decide,
                latest=store.get,
                on_error=lambda _, error: errors.append(type(error).__name__),
                on_fault=fault,
                transient=decision_faults.transient,
                executor=pool,
                delays=(0.05,),
            )
            await deciding.observe(put(_body()))
            await asyncio.sleep(wait)
            if watch_again:  # the watch event of the fault's status write asks for nothing
                await deciding.observe(store[("ns", "ev")])
                await asyncio.sleep(0.1)
            return deciding

    deciding = asyncio.run(run())
    return deciding, errors


def _now() -> Any:
    import datetime

    return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def test_a_recursion_error_ends_the_run_once_and_is_not_retried() -> None:
    calls: list[int] = []
    faults: list[BaseException] = []

    def decide(body: Body) -> None:
        calls.append(1)
        # What every decision does with the spec: a run's identity is its hash. The CRD keeps
        # spec.metadata open, and 3,000 levels of it raised RecursionError on every retry.
        spec = parse_spec({"model": "dummy", "tasks": ["arc_easy"], "metadata": _nested(3_000)})
        builders.spec_hash(spec)

    deciding, errors = _scenario(decide, on_fault=lambda _, error: faults.append(error))
    assert len(calls) == 1 and errors == ["RecursionError"]
    assert [type(error) for error in faults] == [RecursionError]
    assert deciding.pending_retries() == []


def test_an_api_servers_error_is_still_tried_again() -> None:
    calls: list[int] = []

    def decide(body: Body) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise api_errors.ApiError(code=503, reason=api_errors.SERVICE_UNAVAILABLE)
        if len(calls) == 2:
            raise ConnectionResetError("reset by peer")

    deciding, errors = _scenario(decide, on_fault=lambda *_: None, watch_again=False)
    assert len(calls) == 3 and errors == ["ApiError", "ConnectionResetError"]
    assert deciding.pending_retries() == []


def test_a_fault_whose_status_write_fails_is_decided_again() -> None:
    calls: list[int] = []
    writes: list[int] = []

    def decide(body: Body) -> None:
        calls.append(1)
        raise KeyError("spec")

    def on_fault(body: Body, error: BaseException) -> None:
        writes.append(1)
        if len(writes) == 1:
            raise http.client.RemoteDisconnected("the API server went away")

    deciding, errors = _scenario(decide, on_fault=on_fault)
    assert len(calls) == 2 and len(writes) == 2
    assert errors == ["KeyError", "RemoteDisconnected", "KeyError"]
    assert deciding.pending_retries() == []


def test_the_faults_sentence_is_fixed_and_never_quotes_the_error() -> None:
    secret = "OPENAI_API_KEY=sk-tenant-text"
    text = decision_faults.message(ValueError(secret))
    assert secret not in text and "(ValueError)" in text
    status = reconcile.rejection(_body(), text, now=_now())
    assert status["phase"] == conditions.FAILED and status["reason"] == "InvalidSpec" and status["message"] == text
    assert trigger.finished(_body(status=dict(status)))  # a restart does not decide it again


def test_what_is_transient() -> None:
    assert decision_faults.transient(api_errors.ApiError(code=500, reason="InternalError"))
    assert decision_faults.transient(TimeoutError())
    assert decision_faults.transient(http.client.IncompleteRead(b""))
    for error in (RecursionError(), KeyError("x"), TypeError(), MemoryError(), ValueError()):
        assert not decision_faults.transient(error)
