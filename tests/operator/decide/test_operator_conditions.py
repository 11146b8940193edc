"""Phase and condition transitions as pure functions of observed Jobs."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from assay.operator.decide import conditions as c
from assay.operator.decide import job_status

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
T1 = T0 + datetime.timedelta(minutes=5)
RESULTS = {"arc_easy": {"acc,none": {"value": 0.5, "stderr": 0.01}}}


def _job(
    *,
    active: int = 0,
    ready: int | None = None,
    conds: list[tuple[str, str, str]] = (),
    suspend: bool = False,
    start: str | None = "2025-05-01T12:00:10Z",
    completion: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {"active": active, "startTime": start}
    if ready is not None:
        status["ready"] = ready
    if completion:
        status["completionTime"] = completion
    status["conditions"] = [
        {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": "2025-05-01T12:30:00Z"}
        for t, r, m in conds
    ]
    return {"metadata": {"name": "ev-g1"}, "spec": {"suspend": suspend}, "status": status}


def _by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {cond["type"]: cond for cond in status["conditions"]}


def _apply(status: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = {**status, **patch}
    return {k: v for k, v in merged.items() if v is not None}


def test_accepted_new_run_sets_all_four_conditions() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    assert status["phase"] == c.PENDING and status["jobName"] == "ev-g1" and status["observedGeneration"] == 1
    conds = _by_type(status)
    assert list(conds) == ["Accepted", "Running", "Succeeded", "Failed", "Ready", "Reconciling", "Stalled"]
    assert conds["Accepted"]["status"] == "True" and conds["Accepted"]["reason"] == "SpecValid"
    assert all(conds[t]["status"] == "False" for t in ("Running", "Succeeded", "Failed"))
    assert all(
        cond["observedGeneration"] == 1 and cond["lastTransitionTime"] == "2025-05-01T12:00:00Z"
        for cond in conds.values()
    )
    # A new run clears the previous run's outcome (merge-patch null deletes).
    assert status["results"] is None and status["completionTime"] is None


def test_rejected_spec_fails_with_invalid_spec() -> None:
    status = c.rejected(None, message="Unknown task 'x'.", generation=2, now=T0)
    conds = _by_type(status)
    assert status["phase"] == c.FAILED
    assert conds["Accepted"]["status"] == "False" and conds["Accepted"]["reason"] == "InvalidSpec"
    assert conds["Failed"]["status"] == "True" and conds["Failed"]["message"] == "Unknown task 'x'."


@pytest.mark.parametrize(
    "job,phase,reason",
    [
        (_job(), c.PENDING, "PodsPending"),
        (_job(active=1, ready=0), c.PENDING, "PodsPending"),
        (_job(active=2, ready=2), c.RUNNING, "PodsRunning"),
        (_job(active=1), c.RUNNING, "PodsRunning"),  # no `ready` field (older servers): active counts
        (_job(suspend=True, conds=[("Suspended", "JobSuspended", "")]), c.PENDING, "Suspended"),
        (_job(conds=[("Complete", "", "")], completion="2025-05-01T12:31:00Z"), c.SUCCEEDED, "JobComplete"),
        (
            _job(conds=[("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]),
            c.FAILED,
            "BackoffLimitExceeded",
        ),
        (_job(conds=[("Failed", "DeadlineExceeded", "")]), c.FAILED, "DeadlineExceeded"),
        (_job(conds=[("Failed", "PodFailurePolicy", "Container runner exited with 78")]), c.FAILED, "PodFailurePolicy"),
        (_job(active=1, ready=1, conds=[("FailureTarget", "DeadlineExceeded", "")]), c.RUNNING, "Terminating"),
    ],
)
def test_job_state(job: dict[str, Any], phase: str, reason: str) -> None:
    state = job_status.job_state(job)
    assert (state.phase, state.reason) == (phase, reason)


def test_the_jobs_first_sync_costs_no_status_write_and_its_start_time_comes_with_the_next() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    # The Job controller's first sync: startTime set, a pod created but not running.
    assert job_status.from_job(status, _job(active=1, ready=0), generation=1, now=T0) == {}
    patch = job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T1)
    assert patch["phase"] == c.RUNNING and patch["startTime"] == "2025-05-01T12:00:10Z"
    # A suspended Job's admission is news, and brings its startTime.
    suspended = _apply(status, job_status.from_job(status, _job(suspend=True, start=None), generation=1, now=T0))
    assert suspended["reason"] == "Suspended"
    admitted = job_status.from_job(suspended, _job(active=1, ready=0), generation=1, now=T1)
    assert admitted["reason"] == "PodsPending" and admitted["startTime"] == "2025-05-01T12:00:10Z"


def test_a_run_from_creation_to_success() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status = _apply(status, job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T0))
    assert status["phase"] == c.RUNNING and status["startTime"] == "2025-05-01T12:00:10Z"
    running_since = _by_type(status)["Running"]["lastTransitionTime"]
    # The same observation again changes nothing.
    assert job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T1) == {}
    status["message"] = "Evaluated 2 tasks."  # the runner's final word
    status["results"] = RESULTS  # and its scores
    done = _job(conds=[("Complete", "", "")], completion="2025-05-01T12:31:00Z")
    patch = job_status.from_job(status, done, generation=1, now=T1)
    assert c.finished_now(status, patch) == c.SUCCEEDED
    status = _apply(status, patch)
    conds = _by_type(status)
    assert status["phase"] == c.SUCCEEDED and status["completionTime"] == "2025-05-01T12:31:00Z"
    assert conds["Succeeded"]["status"] == "True" and conds["Running"]["status"] == "False"
    assert conds["Running"]["lastTransitionTime"] != running_since
    assert status["message"] == "Evaluated 2 tasks."  # kept
    assert c.duration_seconds(status) == 30 * 60 + 50
    # Finished is final: later events of the same Job change nothing.
    assert job_status.from_job(status, done, generation=1, now=T1) == {}
    assert c.finished_now(status, {}) is None


def test_failure_keeps_the_runners_message() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status["message"] = "Unknown dataset file train.jsonl."
    patch = job_status.from_job(status, _job(conds=[("Failed", "PodFailurePolicy", "exit 78")]), generation=1, now=T1)
    assert patch["phase"] == c.FAILED
    assert "configuration error" in patch["message"] and "Runner: Unknown dataset file" in patch["message"]
    assert _by_type(_apply(status, patch))["Failed"]["reason"] == "PodFailurePolicy"


def test_a_runner_that_fails_before_its_pod_is_reported_ready_keeps_its_message() -> None:
    # Seen on a real kubelet: the runner exits 78 within 2 s and writes status.message before
    # the Job controller reports the pod ready; the late Running must not overwrite it.
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status["message"] = "The model path '/cache/m' does not exist."
    running = job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T0)
    assert running["phase"] == c.RUNNING and "message" not in running
    status = _apply(status, running)
    failed = job_status.from_job(status, _job(conds=[("Failed", "PodFailurePolicy", "exit 78")]), generation=1, now=T1)
    assert "Runner: The model path '/cache/m' does not exist." in failed["message"]


def test_the_runners_message_survives_a_lost_update_of_message() -> None:
    # The operator's Running patch was computed from a read taken before the runner wrote
    # and replaced `message`; `runnerMessage` is the runner's alone.
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status = _apply(status, job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T0))
    status["runnerMessage"] = "The model path '/cache/m' does not exist."
    failed = job_status.from_job(status, _job(conds=[("Failed", "PodFailurePolicy", "exit 78")]), generation=1, now=T1)
    assert failed["message"].endswith("Runner: The model path '/cache/m' does not exist.")


def test_operator_messages_are_not_mistaken_for_the_runners() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    patch = job_status.from_job(status, _job(conds=[("Failed", "DeadlineExceeded", "")]), generation=1, now=T1)
    assert "Runner:" not in patch["message"] and "activeDeadlineSeconds" in patch["message"]


def test_set_condition_keeps_transition_time_when_status_holds() -> None:
    first = c.set_condition(None, type="Running", status=True, reason="A", message="a", now=T0, generation=1)
    again = c.set_condition(first, type="Running", status=True, reason="B", message="b", now=T1, generation=2)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"]
    assert again[0]["reason"] == "B" and again[0]["observedGeneration"] == 2
    flipped = c.set_condition(again, type="Running", status=False, reason="C", message="c", now=T1, generation=2)
    assert flipped[0]["lastTransitionTime"] == "2025-05-01T12:05:00Z"


# --- kstatus: Ready, Reconciling, Stalled ---------------------------------------------------


def _kstatus(status: dict[str, Any]) -> dict[str, str]:
    conds = _by_type(status)
    return {t: conds[t]["status"] for t in ("Ready", "Reconciling", "Stalled")}


@pytest.mark.parametrize(
    "job,expected",
    [
        (_job(), ("False", "True", "False")),
        (_job(active=1, ready=1), ("False", "True", "False")),
        (_job(suspend=True, conds=[("Suspended", "JobSuspended", "")]), ("False", "True", "False")),
        (_job(conds=[("Complete", "", "")], completion="2025-05-01T12:31:00Z"), ("True", "False", "False")),
        (_job(conds=[("Failed", "BackoffLimitExceeded", "")]), ("False", "False", "True")),
    ],
    ids=["created", "running", "suspended", "complete", "failed"],
)
def test_ready_reconciling_and_stalled_follow_the_job_by_kstatus_conventions(
    job: dict[str, Any], expected: tuple[str, str, str]
) -> None:
    status = c.accepted(None, job_name="ev-g1", generation=3, now=T0, new_run=True)
    assert _kstatus(status) == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    status["results"] = RESULTS  # what the runner writes before its Job can complete
    status = _apply(status, job_status.from_job(status, job, generation=3, now=T1))
    assert tuple(_kstatus(status).values()) == expected
    conds = _by_type(status)
    # kstatus reads a condition only for the generation it was set for.
    assert {conds[t]["observedGeneration"] for t in ("Ready", "Reconciling", "Stalled")} == {3}
    assert conds["Ready"]["reason"] == status["reason"]
    if expected[2] == "True":
        assert conds["Stalled"]["message"] == status["message"] == conds["Ready"]["message"]


def test_a_rejected_spec_is_stalled_not_reconciling() -> None:
    status = c.rejected(None, message="Unknown task 'x'.", generation=1, now=T0)
    assert _kstatus(status) == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}
    assert _by_type(status)["Stalled"]["reason"] == "InvalidSpec"
    assert _by_type(status)["Stalled"]["message"] == "Unknown task 'x'."


def test_a_new_run_after_success_is_no_longer_ready() -> None:
    status = {**c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True), "results": RESULTS}
    status = _apply(status, job_status.from_job(status, _job(conds=[("Complete", "", "")]), generation=1, now=T0))
    assert _kstatus(status)["Ready"] == "True"
    status = _apply(status, c.accepted(status, job_name="ev-g2", generation=2, now=T1, new_run=True))
    assert _kstatus(status) == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert _by_type(status)["Ready"]["lastTransitionTime"] == "2025-05-01T12:05:00Z"


# --- no Succeeded without scores ---------------------------------------------------------


def _finished(status: dict[str, Any], job: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return _apply(status, job_status.from_job(status, job, generation=1, now=T1, spec=spec))


def test_a_complete_job_without_scores_in_status_is_failed_not_succeeded() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    status = {
        **_apply(status, job_status.from_job(status, _job(active=1, ready=1), generation=1, now=T0)),
        "outputDir": "/output/ev/g1",
    }
    done = _job(conds=[("Complete", "", "")], completion="2025-05-01T12:31:00Z")
    failed = _finished(status, done)
    conds = _by_type(failed)
    assert failed["phase"] == c.FAILED and failed["reason"] == "ResultsNotRecorded"
    assert conds["Succeeded"]["status"] == "False" and conds["Failed"]["status"] == "True"
    assert _kstatus(failed) == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}
    assert failed["message"] == (
        "ev-g1 completed, but its scores never reached status.results. Its results files are "
        "nowhere: the output was the pod's emptyDir."
    )
    assert conds["Failed"]["message"] == conds["Stalled"]["message"] == failed["message"]
    on_pvc = _finished(status, done, spec={"output": {"pvc": "results"}})
    assert on_pvc["message"].endswith(
        "Its results files are on PVC results in ev/g1, if the runner could write them (its log says)."
    )
    # The same Job seen again changes nothing: Failed is final.
    assert job_status.from_job(failed, done, generation=1, now=T1) == {}


def test_a_runner_that_could_not_record_its_scores_fails_its_job_with_reason_results_not_recorded() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    fail_job = (
        "Failed",
        "PodFailurePolicy",
        "Container runner for pod team/ev-g1-x7k2p failed with exit code 74 matching FailJob rule at index 3",
    )
    assert job_status.job_state(_job(conds=[fail_job])).reason == "ResultsNotRecorded"
    failed = _finished(status, _job(conds=[fail_job]), spec={"output": {"pvc": "results", "path": "runs/a"}})
    assert failed["reason"] == "ResultsNotRecorded" and _by_type(failed)["Failed"]["reason"] == "ResultsNotRecorded"
    assert "could not write its scores to status.results" in failed["message"]
    assert "on PVC results in its root" in failed["message"]  # no outputDir recorded in this status
    config_error = (
        "Failed",
        "PodFailurePolicy",
        "Container runner for pod team/ev-g1-x7k2p failed with exit code 78 matching FailJob rule at index 0",
    )
    assert job_status.job_state(_job(conds=[config_error])).reason == "PodFailurePolicy"


@pytest.mark.parametrize(
    "files,expected",
    [
        (
            {"written": True, "message": "Results written to /output/ev/g1/m/results_x.json."},
            ("True", "OutputWritten", "Results written to /output/ev/g1/m/results_x.json."),
        ),
        (
            {
                "written": False,
                "message": "The results files could not be written under /output/ev/g1 (No space left on device).",
            },
            (
                "False",
                "OutputNotWritten",
                "The results files could not be written under /output/ev/g1 (No space left on device).",
            ),
        ),
        (None, None),
    ],
    ids=["written", "disk-full", "not-reported"],
)
def test_output_written_reports_the_files_of_a_run_whose_scores_are_in(files: Any, expected: Any) -> None:
    status = {
        **c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True),
        "results": RESULTS,
        "runnerMessage": "Evaluated 1 tasks.",
    }
    if files is not None:
        status["outputFiles"] = files
    done = _finished(status, _job(conds=[("Complete", "", "")]))
    assert done["phase"] == c.SUCCEEDED  # a full volume is a warning: the scores are in status
    condition = _by_type(done).get("OutputWritten")
    assert (condition and (condition["status"], condition["reason"], condition["message"])) == expected
    # The next run starts without the previous run's files, word or condition.
    again = _apply(done, c.accepted(done, job_name="ev-g2", generation=2, now=T1, new_run=True))
    assert "OutputWritten" not in _by_type(again) and "outputFiles" not in again and "runnerMessage" not in again


# --- Regressed: the run against its baseline ----------------------------------------------

BASELINE_SPEC = {"baseline": {"evaluation": "model-v1"}}
REGRESSION = {
    "baseline": "model-v1",
    "verdict": "regressed",
    "message": "Regressed against model-v1: arc_easy acc -0.0600 [-0.0900, -0.0300], Holm p = 0.001.",
    "rows": [],
}


@pytest.mark.parametrize(
    "comparison,spec,expected",
    [
        (REGRESSION, BASELINE_SPEC, ("True", "Regressed", REGRESSION["message"])),
        (
            {
                **REGRESSION,
                "verdict": "unchanged",
                "message": "No regression against model-v1 over 2 metrics (unchanged).",
            },
            BASELINE_SPEC,
            ("False", "NoRegression", "No regression against model-v1 over 2 metrics (unchanged)."),
        ),
        ({**REGRESSION, "verdict": "improved", "message": "m."}, BASELINE_SPEC, ("False", "NoRegression", "m.")),
        (
            {**REGRESSION, "verdict": "inconclusive", "message": "Inconclusive."},
            BASELINE_SPEC,
            ("Unknown", "Inconclusive", "Inconclusive."),
        ),
        (
            {**REGRESSION, "verdict": "inconclusive", "message": "Inconclusive."},
            {**BASELINE_SPEC, "gate": {"strict": True}},
            ("True", "Inconclusive", "Inconclusive."),
        ),
        (
            {"baseline": "model-v1", "error": "The baseline Evaluation model-v1 has not succeeded (it is Running)."},
            BASELINE_SPEC,
            ("Unknown", "BaselineUnavailable", "The baseline Evaluation model-v1 has not succeeded (it is Running)."),
        ),
        (
            None,
            BASELINE_SPEC,
            ("Unknown", "BaselineUnavailable", "The runner reported no comparison with the baseline."),
        ),
        (None, {}, None),
    ],
    ids=[
        "regressed",
        "unchanged",
        "improved",
        "inconclusive",
        "inconclusive-strict",
        "baseline-unavailable",
        "not-reported",
        "no-baseline",
    ],
)
def test_regressed_says_what_the_comparison_with_the_baseline_found(comparison: Any, spec: Any, expected: Any) -> None:
    status = {**c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True), "results": RESULTS}
    if comparison is not None:
        status["comparison"] = comparison
    done = _finished(status, _job(conds=[("Complete", "", "")]), spec=spec)
    assert done["phase"] == c.SUCCEEDED  # a regression is a verdict on the model, not a failed run
    condition = _by_type(done).get("Regressed")
    assert (condition and (condition["status"], condition["reason"], condition["message"])) == expected
    # The next run starts without the previous run's comparison or condition.
    again = _apply(done, c.accepted(done, job_name="ev-g2", generation=2, now=T1, new_run=True))
    assert "Regressed" not in _by_type(again) and "comparison" not in again


def test_a_failed_run_with_a_baseline_compared_nothing() -> None:
    status = c.accepted(None, job_name="ev-g1", generation=1, now=T0, new_run=True)
    failed = _finished(
        status,
        _job(conds=[("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]),
        spec=BASELINE_SPEC,
    )
    assert failed["phase"] == c.FAILED
    regressed = _by_type(failed)["Regressed"]
    assert (regressed["status"], regressed["reason"]) == ("Unknown", "RunFailed")
