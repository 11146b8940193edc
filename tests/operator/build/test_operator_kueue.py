"""Kueue's Job contract, as the operator keeps it: a queued Job is created suspended and
only Kueue flips `suspend` (admission sets it false, preemption true again)."""

from __future__ import annotations

import datetime
from typing import Any

from assay.operator.build import builders
from assay.operator.decide import conditions, job_status, reconcile
from assay.spec import parse_spec

NOW = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
QUEUED = {"model": "dummy", "tasks": ["arc_easy"], "podTemplate": {"labels": {builders.KUEUE_QUEUE_LABEL: "team"}}}


def _body(spec: dict[str, Any], *, generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "ev", "namespace": "ns", "uid": "u1", "generation": generation},
        "spec": spec,
        "status": status or {},
    }


def test_a_queued_job_is_created_suspended_with_the_queue_label() -> None:
    plan = reconcile.plan(_body(QUEUED), parse_spec(QUEUED), jobs=[], now=NOW)
    (job,) = [m for m in plan.create if m["kind"] == "Job"]
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][builders.KUEUE_QUEUE_LABEL] == "team"
    state = job_status.job_state(job)
    assert state.phase == conditions.PENDING and "waits for Kueue to admit it from queue team" in state.message
    unqueued = {k: v for k, v in QUEUED.items() if k != "podTemplate"}
    (plain,) = [
        m for m in reconcile.plan(_body(unqueued), parse_spec(unqueued), jobs=[], now=NOW).create if m["kind"] == "Job"
    ]
    assert plain["spec"]["suspend"] is False


def test_the_operator_never_flips_suspend_on_a_queued_job() -> None:
    first = reconcile.plan(_body(QUEUED), parse_spec(QUEUED), jobs=[], now=NOW)
    (job,) = [m for m in first.create if m["kind"] == "Job"]
    status = {k: v for k, v in first.status.items() if v is not None}
    # Restart while Kueue holds it (suspend true, spec false): no resume by the operator.
    assert reconcile.plan(_body(QUEUED, status=status), parse_spec(QUEUED), jobs=[job], now=NOW).suspend_job is None
    # Admitted (suspend false), then the user asks spec.suspend: Kueue's call, not ours.
    admitted = {**job, "spec": {**job["spec"], "suspend": False}}
    paused = {**QUEUED, "suspend": True}
    plan = reconcile.plan(_body(paused, generation=2, status=status), parse_spec(paused), jobs=[admitted], now=NOW)
    assert plan.suspend_job is None and not plan.new_run and not plan.delete_jobs
