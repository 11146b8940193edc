"""`evaluations.assay.dev/rerun`: a fresh run of an unchanged spec, named apart from the run it replaces.

A finished run of the current generation is left alone; GitOps users keep the spec in Git
and bump this annotation (a date, a commit sha) to run it again. The run is then
identified by (generation, token): its Job and output directory carry a hash of the token,
so the earlier run's results stay where they were.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from assay import spec as spec_module
from assay.operator.build import builders
from assay.operator.build.names import DNS1035_LABEL
from assay.operator.decide import conditions, reconcile, trigger
from assay.spec import parse_spec
from tests.operator.reconcile_cases import MARK, NOW, SPEC, evaluation_body, jobs_of

DIGEST = hashlib.sha256(b"2026-12-01").hexdigest()[:6]


def _with_token(body: dict[str, Any], token: str) -> dict[str, Any]:
    body["metadata"]["annotations"] = {builders.ANNOTATION_RERUN: token}
    return body


def _applied(status: dict[str, Any], plan: reconcile.Plan, **changes: Any) -> dict[str, Any]:
    """The status after a plan's merge patch (a None deletes), then `changes` as the Job's mirror makes them."""
    merged = {**status, **plan.status, **changes}
    return {k: v for k, v in merged.items() if v is not None}


def _finished(status: dict[str, Any], plan: reconcile.Plan, phase: str = conditions.SUCCEEDED) -> dict[str, Any]:
    """The status a plan's run ends with."""
    return _applied(status, plan, phase=phase, completionTime="2025-05-01T13:00:00Z", results={"arc_easy": {}})


def _first_run() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Job, the finished status) of a run with no token: what every Evaluation has today."""
    first = reconcile.plan(evaluation_body(SPEC, generation=1), parse_spec(SPEC), jobs=[], now=NOW)
    (job,) = jobs_of(first)
    return job, _finished({}, first)


def test_no_annotation_keeps_todays_names_and_status() -> None:
    job, status = _first_run()
    assert job["metadata"]["name"] == f"ev-g1-{MARK}" and status["outputDir"] == "/output/ev/g1"
    assert builders.ANNOTATION_RERUN not in job["metadata"]["annotations"] and "rerunToken" not in status
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[spec_module.ENV_JOB_NAME] == f"ev-g1-{MARK}" and env[spec_module.ENV_OUTPUT_DIR] == "/output/ev/g1"


def test_a_token_on_a_finished_run_starts_a_fresh_one_beside_it() -> None:
    old, status = _first_run()
    body = _with_token(evaluation_body(SPEC, generation=1, status=status), "2026-12-01")
    plan = reconcile.plan(body, parse_spec(SPEC), jobs=[old], now=NOW)
    (job,) = jobs_of(plan)
    assert plan.new_run and job["metadata"]["name"] == f"ev-g1-r{DIGEST}-{MARK}"
    assert job["metadata"]["annotations"][builders.ANNOTATION_RERUN] == "2026-12-01"
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[spec_module.ENV_JOB_NAME] == f"ev-g1-r{DIGEST}-{MARK}"  # the old runner sees itself superseded
    assert env[spec_module.ENV_OUTPUT_DIR] == f"/output/ev/g1-r{DIGEST}"  # not over the first run's results
    assert plan.delete_jobs == (f"ev-g1-{MARK}",)
    assert plan.status["jobName"] == f"ev-g1-r{DIGEST}-{MARK}" and plan.status["rerunToken"] == "2026-12-01"
    assert plan.status["outputDir"] == f"/output/ev/g1-r{DIGEST}"
    assert plan.status["phase"] == conditions.PENDING and plan.status["results"] is None
    assert plan.status["completionTime"] is None
    assert conditions.get_condition(plan.status, conditions.SUCCEEDED)["status"] == "False"  # type: ignore[index]


def test_the_same_token_again_or_its_removal_changes_nothing() -> None:
    old, status = _first_run()
    rerun = reconcile.plan(
        _with_token(evaluation_body(SPEC, generation=1, status=status), "2026-12-01"),
        parse_spec(SPEC),
        jobs=[old],
        now=NOW,
    )
    (job,) = jobs_of(rerun)
    for phase in conditions.TERMINAL_PHASES:
        done = _finished(status, rerun, phase)
        same = _with_token(evaluation_body(SPEC, generation=1, status=done), "2026-12-01")
        assert reconcile.plan(same, parse_spec(SPEC), jobs=[job], now=NOW).is_noop  # an operator restart
        # The annotation dropped from Git: neither a re-run nor a return to the first run's names.
        assert reconcile.plan(
            evaluation_body(SPEC, generation=1, status=done), parse_spec(SPEC), jobs=[job], now=NOW
        ).is_noop


def test_a_restart_during_a_rerun_adopts_its_job() -> None:
    old, status = _first_run()
    body = _with_token(evaluation_body(SPEC, generation=1, status=status), "2026-12-01")
    rerun = reconcile.plan(body, parse_spec(SPEC), jobs=[old], now=NOW)
    (job,) = jobs_of(rerun)
    running = _applied(status, rerun, phase=conditions.RUNNING)
    again = reconcile.plan(
        _with_token(evaluation_body(SPEC, generation=1, status=running), "2026-12-01"),
        parse_spec(SPEC),
        jobs=[job],
        now=NOW,
    )
    assert jobs_of(again) == [] and not again.new_run and not again.delete_jobs and again.status == {}


def test_a_changed_token_replaces_a_running_rerun() -> None:
    old, status = _first_run()
    first = reconcile.plan(
        _with_token(evaluation_body(SPEC, generation=1, status=status), "a"), parse_spec(SPEC), jobs=[old], now=NOW
    )
    (running_job,) = jobs_of(first)
    running = _applied(status, first, phase=conditions.RUNNING)
    # The old ev-g1 is still being deleted: it must be neither the current run nor deleted twice.
    old["metadata"]["deletionTimestamp"] = "2025-05-01T11:00:00Z"
    plan = reconcile.plan(
        _with_token(evaluation_body(SPEC, generation=1, status=running), "b"),
        parse_spec(SPEC),
        jobs=[old, running_job],
        now=NOW,
    )
    digest_b = hashlib.sha256(b"b").hexdigest()[:6]
    assert plan.new_run and [j["metadata"]["name"] for j in jobs_of(plan)] == [f"ev-g1-r{digest_b}-{MARK}"]
    assert plan.delete_jobs == (f"ev-g1-r{hashlib.sha256(b'a').hexdigest()[:6]}-{MARK}",)
    assert plan.status["rerunToken"] == "b" and plan.status["phase"] == conditions.PENDING


def test_a_suspend_toggle_during_a_rerun_pauses_the_same_run() -> None:
    old, status = _first_run()
    rerun = reconcile.plan(
        _with_token(evaluation_body(SPEC, generation=1, status=status), "t"), parse_spec(SPEC), jobs=[old], now=NOW
    )
    (job,) = jobs_of(rerun)
    suspended = {**SPEC, "suspend": True}
    running = _applied(status, rerun)
    plan = reconcile.plan(
        _with_token(evaluation_body(suspended, generation=2, status=running), "t"),
        parse_spec(suspended),
        jobs=[job],
        now=NOW,
    )
    assert jobs_of(plan) == [] and not plan.new_run and not plan.delete_jobs
    assert plan.suspend_job == (job["metadata"]["name"], True)


@pytest.mark.parametrize("name", ["ev", "llama-3.1-8b.mmlu", "x" * 253, "8b"])
def test_rerun_names_are_valid_and_apart(name: str) -> None:
    refs = [
        builders.EvaluationRef(name=name, namespace="ns", uid="u", generation=123456, rerun=token)
        for token in (None, "2026-12-01", "2026-12-02", "a" * 500)
    ]
    names = [builders.job_name(ref) for ref in refs]
    assert len(set(names)) == len(names)
    for job_name in names:
        assert len(job_name) <= 52 and DNS1035_LABEL.fullmatch(job_name), job_name
    assert [builders.job_name(ref) for ref in refs] == names  # deterministic: a restart finds its Job


def test_a_bumped_token_asks_for_a_decision_and_a_removed_one_does_not() -> None:
    """The trigger is a level (`trigger`): the token on the object against the one its status ran."""
    _, status = _first_run()
    finished = evaluation_body(SPEC, generation=1, status={**status, "observedGeneration": 1})
    assert not trigger.needs_decision(finished, first_sight=True)
    bumped = _with_token(evaluation_body(SPEC, generation=1, status={**status, "observedGeneration": 1}), "2026-12-01")
    assert trigger.needs_decision(bumped, first_sight=False)
    ran = _with_token(
        evaluation_body(SPEC, generation=1, status={**status, "observedGeneration": 1, "rerunToken": "2026-12-01"}),
        "2026-12-01",
    )
    assert not trigger.needs_decision(ran, first_sight=True)
    # The annotation removed after that run: its token stays the one asked for; nothing to do.
    removed = evaluation_body(
        SPEC, generation=1, status={**status, "observedGeneration": 1, "rerunToken": "2026-12-01"}
    )
    assert builders.rerun_token(removed) == "2026-12-01" and not trigger.needs_decision(removed, first_sight=True)
