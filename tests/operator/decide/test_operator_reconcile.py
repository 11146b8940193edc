"""Reconcile plans: idempotent, one run per spec, suspend without a new run, no duplicates on restart."""

from __future__ import annotations

from assay.operator.build import builders
from assay.operator.decide import conditions, reconcile
from assay.spec import parse_spec
from tests.operator.reconcile_cases import MARK, NOW, SPEC, evaluation_body, jobs_of


def test_first_reconcile_creates_everything_and_marks_pending() -> None:
    body = evaluation_body(SPEC, generation=1)
    plan = reconcile.plan(body, parse_spec(SPEC), jobs=[], now=NOW)
    # A run's own objects only: its runner runs as the namespace's identity, its spec is in its pod.
    assert [m["kind"] for m in plan.create] == ["NetworkPolicy", "Job"]
    assert plan.new_run and not plan.delete_jobs and plan.suspend_job is None
    assert plan.status["phase"] == conditions.PENDING and plan.status["jobName"] == f"ev-g1-{MARK}"
    assert plan.status["model"] == "m" and plan.status["outputDir"] == "/output/ev/g1"


def test_restart_with_the_job_present_creates_no_second_run() -> None:
    body = evaluation_body(SPEC, generation=1)
    first = reconcile.plan(body, parse_spec(SPEC), jobs=[], now=NOW)
    (job,) = jobs_of(first)
    status = {k: v for k, v in first.status.items() if v is not None}
    again = reconcile.plan(evaluation_body(SPEC, generation=1, status=status), parse_spec(SPEC), jobs=[job], now=NOW)
    assert jobs_of(again) == [] and not again.new_run and not again.delete_jobs
    # The run's fence is written again (a NetworkPolicy deleted or loosened by hand comes back), under the run's name.
    assert [(m["kind"], m["metadata"]["name"]) for m in again.create] == [("NetworkPolicy", f"ev-g1-{MARK}")]
    assert again.status == {}  # nothing to write either


def test_finished_generation_is_left_alone() -> None:
    status = {"observedGeneration": 1, "phase": conditions.SUCCEEDED, "jobName": f"ev-g1-{MARK}"}
    assert reconcile.plan(
        evaluation_body(SPEC, generation=1, status=status), parse_spec(SPEC), jobs=[], now=NOW
    ).is_noop


def test_spec_change_replaces_the_old_run() -> None:
    old = jobs_of(reconcile.plan(evaluation_body(SPEC, generation=1), parse_spec(SPEC), jobs=[], now=NOW))[0]
    old_service = {"metadata": {"name": f"ev-g1-{MARK}"}}
    changed = {**SPEC, "limit": 10}
    status = {"observedGeneration": 1, "phase": conditions.SUCCEEDED, "jobName": f"ev-g1-{MARK}", "results": {"x": {}}}
    plan = reconcile.plan(
        evaluation_body(changed, generation=2, status=status),
        parse_spec(changed),
        jobs=[old],
        services=[old_service],
        now=NOW,
    )
    assert [j["metadata"]["name"] for j in jobs_of(plan)] == [f"ev-g2-{MARK}"]
    assert plan.delete_jobs == (f"ev-g1-{MARK}",) and plan.delete_services == (f"ev-g1-{MARK}",)
    # The superseded run's fence goes with its Job; the new run's is made before its Job.
    assert plan.delete_network_policies == (f"ev-g1-{MARK}",) and not plan.is_noop
    kinds = [(m["kind"], m["metadata"]["name"]) for m in plan.create]
    assert kinds == [("NetworkPolicy", f"ev-g2-{MARK}"), ("Job", f"ev-g2-{MARK}")]
    assert plan.status["phase"] == conditions.PENDING and plan.status["results"] is None


def test_suspend_toggle_pauses_the_same_run() -> None:
    first = reconcile.plan(evaluation_body(SPEC, generation=1), parse_spec(SPEC), jobs=[], now=NOW)
    (job,) = jobs_of(first)
    status = {k: v for k, v in first.status.items() if v is not None}
    suspended = {**SPEC, "suspend": True}
    plan = reconcile.plan(
        evaluation_body(suspended, generation=2, status=status), parse_spec(suspended), jobs=[job], now=NOW
    )
    assert jobs_of(plan) == [] and plan.delete_jobs == () and not plan.new_run
    assert plan.suspend_job == (f"ev-g1-{MARK}", True)
    assert plan.status["observedGeneration"] == 2 and "phase" not in plan.status


def test_rejection_is_written_once() -> None:
    body = evaluation_body(SPEC, generation=3)
    patch = reconcile.rejection(body, "Unknown task 'x'.", now=NOW)
    assert patch["phase"] == conditions.FAILED and patch["observedGeneration"] == 3
    body["status"] = patch
    assert reconcile.rejection(body, "Unknown task 'x'.", now=NOW) == {}


def test_jobs_being_deleted_are_not_the_current_run() -> None:
    (job,) = jobs_of(reconcile.plan(evaluation_body(SPEC, generation=1), parse_spec(SPEC), jobs=[], now=NOW))
    job["metadata"]["deletionTimestamp"] = "2025-05-01T11:00:00Z"
    plan = reconcile.plan(evaluation_body(SPEC, generation=1), parse_spec(SPEC), jobs=[job], now=NOW)
    assert (
        plan.new_run
        and builders.job_name(builders.EvaluationRef.from_body(evaluation_body(SPEC, generation=1))) == f"ev-g1-{MARK}"
    )


def test_a_running_multi_node_run_asks_for_no_service_it_has() -> None:
    """A decision of a run that exists (an operator's restart) sends no create for a headless
    Service listed as the Evaluation's already: a request for nothing, and one more read
    (whose is it?) since the operator checks what it finds under its names."""
    multi = {**SPEC, "resources": {"nodes": 2, "gpusPerNode": 1}}
    first = reconcile.plan(evaluation_body(multi, generation=1), parse_spec(multi), jobs=[], now=NOW)
    (job,) = jobs_of(first)
    (service,) = [m for m in first.create if m["kind"] == "Service"]
    status = {k: v for k, v in first.status.items() if v is not None}
    body = evaluation_body(multi, generation=1, status=status)
    again = reconcile.plan(body, parse_spec(multi), jobs=[job], services=[service], now=NOW)
    assert [m["kind"] for m in again.create] == ["NetworkPolicy"]
    lost = reconcile.plan(body, parse_spec(multi), jobs=[job], services=[], now=NOW)
    assert "Service" in [m["kind"] for m in lost.create]  # deleted by hand: made again
