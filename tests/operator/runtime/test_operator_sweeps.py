"""A sweep that cannot die: API errors are counted and logged once per kind, the thread goes
on, and the resync of unfinished runs repairs what happened meanwhile.

The operator's own client talks HTTP to a local API server (tests/operator/local_apiserver.py)
that answers 500 for a while, as kube-apiserver does while its etcd is gone;
tests/e2e/test_refusals.py stops a real API server.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from assay import spec as spec_module
from assay.kube import api_errors
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions
from assay.operator.kube import kube
from assay.operator.runtime import converge, periodic
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
    status,
)

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
EVALUATION = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations/tiny"
JOB = "/apis/batch/v1/namespaces/evals/jobs/" + builders.job_name(
    builders.EvaluationRef(name="tiny", namespace="evals", uid="uid-tiny", generation=1)
)
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}
PERIODIC = "assay.operator.runtime.periodic"


def _accepted_run(api: LocalApiServer) -> dict[str, Any]:
    """An Evaluation whose run was decided over HTTP: its status written, its Job created."""
    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "tiny", "namespace": "evals", "uid": "uid-tiny", "generation": 1},
        "spec": SPEC,
    }
    api.put(evaluation, EVALUATION)
    converge.carry_out(
        evaluation,
        spec_module.parse_spec(SPEC),
        now=T0,
        runner=RunnerSettings(default_image="runner:1"),
        emit=kube.create_event,
    )
    stored = api.get(EVALUATION)
    assert stored is not None and api.get(JOB) is not None
    return stored


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == PERIODIC and r.levelno == level and text in r.getMessage()
    ]


def test_the_resync_outlives_an_outage_and_brings_back_a_job_deleted_meanwhile(
    api: LocalApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=PERIODIC)
    runs = converge.UnfinishedRuns()
    runs.observe(_accepted_run(api))
    counted: list[tuple[str, str]] = []
    sweeper = converge.LostJobSweeper(
        runs=runs,
        admin=AdminPolicy(),
        runner=RunnerSettings(default_image="runner:1"),
        on_error=lambda *e: counted.append(e),
        interval=0.05,
    )
    sweeper.start()
    try:
        api.failing = status(500, "InternalError", "Internal error occurred: etcdserver: leader changed")
        api.objects.pop(JOB)  # deleted while the operator can read nothing
        _until(lambda: api.failed_answers >= 5, "five passes answered 500")
        api.failing = None
        _until(lambda: api.get(JOB) is not None, "the Job created again")
        _until(lambda: bool(_lines(caplog, logging.INFO, "recovered")), "a clean pass")
        assert sweeper.alive
    finally:
        sweeper.stop()
        sweeper._thread.join(10)
    assert len(counted) >= 5 and set(counted) == {("resync", "http_500")}
    (failed,) = _lines(caplog, logging.WARNING, "resync")  # once for the whole outage, not once a pass
    assert "http_500" in failed and "etcdserver: leader changed" in failed
    (recovered,) = _lines(caplog, logging.INFO, "recovered")
    assert recovered.startswith("The resync sweep recovered after ") and recovered.endswith(" http_500.")
    lost = [o for p, o in api.objects.items() if "/events/" in p and o["reason"] == "JobLost"]
    assert len(lost) == 1


def test_a_running_runs_ended_job_reaches_its_status_without_a_watch_event(api: LocalApiServer) -> None:
    stored = _accepted_run(api)
    api.put({**stored, "status": {**stored["status"], "phase": "Running", "reason": "PodsRunning"}}, EVALUATION)
    job = api.get(JOB)
    assert job is not None
    api.put(
        {
            **job,
            "status": {
                "startTime": "2025-05-01T12:00:01Z",
                "completionTime": "2025-05-01T12:05:00Z",
                "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True"}],
            },
        },
        JOB,
    )
    now = [0.0]
    runs = converge.UnfinishedRuns(clock=lambda: now[0])
    runs.observe(api.get(EVALUATION) or {})
    sweeper = converge.LostJobSweeper(
        runs=runs,
        admin=AdminPolicy(),
        runner=RunnerSettings(default_image="runner:1"),
        on_error=lambda *e: pytest.fail(f"{e}"),
        interval=30,
    )
    now[0] = 30.0
    just = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.put({**job, "status": {**(api.get(JOB) or {})["status"], "completionTime": just}}, JOB)
    sweeper.run_once()
    assert (api.get(EVALUATION) or {})["status"]["phase"] == "Running"  # just ended: its watch event's to tell
    api.put({**job, "status": {**(api.get(JOB) or {})["status"], "completionTime": "2025-05-01T12:05:00Z"}}, JOB)
    sweeper.run_once()
    # Ended as the Job did (Succeeded, or Failed when no scores reached the status: `outcome`'s call).
    ended = (api.get(EVALUATION) or {})["status"]
    assert ended["phase"] in conditions.TERMINAL_PHASES and ended["completionTime"] == "2025-05-01T12:05:00Z"


def test_each_kind_of_failure_is_logged_once_until_a_clean_pass(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=PERIODIC)
    counted: list[str] = []
    errors = periodic.SweepErrors("pending", on_error=lambda sweep, kind: counted.append(kind))
    for _ in range(2):  # a minute's outage at a 30 s interval: two passes, two kinds of failure in each
        errors.failed(api_errors.ApiError(code=503, reason="ServiceUnavailable"), what="a pass")
        errors.failed(ConnectionRefusedError(111, "Connection refused"), what="Evaluation evals/a")
        errors.pass_over()
    assert errors.failing
    errors.pass_over()  # clean
    errors.pass_over()  # clean again: nothing more to say
    assert counted == ["http_503", "ConnectionRefusedError"] * 2 and not errors.failing
    assert len(_lines(caplog, logging.WARNING, "http_503")) == 1
    assert len(_lines(caplog, logging.WARNING, "ConnectionRefusedError")) == 1
    assert _lines(caplog, logging.INFO, "recovered") == [
        "The pending sweep recovered after 2 ConnectionRefusedError, 2 http_503."
    ]


def test_a_pass_that_raises_is_not_the_end_of_the_thread() -> None:
    passes: list[int] = []
    done = threading.Event()

    class Flaky(periodic.PeriodicSweep):
        def sweep(self) -> None:
            passes.append(1)
            if len(passes) <= 2:
                raise RuntimeError("a bug in one pass")
            done.set()

    counted: list[tuple[str, str]] = []
    sweep = Flaky(interval=0.01, name="test-flaky", on_error=lambda *e: counted.append(e))
    sweep.start()
    try:
        assert done.wait(10) and sweep.alive
    finally:
        sweep.stop()
    assert counted == [("test-flaky", "RuntimeError")] * 2
