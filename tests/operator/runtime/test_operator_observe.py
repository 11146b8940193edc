"""`observe.observe_run`: what the operator reads and writes for one run.

No API server runs in unit tests, so `kube`'s calls are replaced by a recording stand-in
that serves recorded objects (tests/operator/recorded); the e2e suite runs the same code
against a real API server and kubelet.
"""

from __future__ import annotations

from typing import Any

import pytest

from assay.errors import UserError
from assay.operator.decide import conditions
from assay.operator.kube import kube
from assay.operator.runtime import namespace_identity, observe
from assay.operator.runtime.state import OperatorState
from tests.operator.observed_cluster import FakeApi, accepted_evaluation, at, load


def test_a_pull_back_off_is_reported_once_then_fails_and_ends_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(load("job_pods_pending"), [load("pod_image_pull_backoff")], load("events_pod_image_pull")["items"])
    api.install(monkeypatch)
    evaluation = accepted_evaluation()
    patch = observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, now=at(2))
    assert patch["reason"] == "ImagePullBackOff" and "phase" not in patch  # still Pending
    assert ("events", "Pod", "tiny-g1-7xk2p") in api.reads and not api.ended
    assert [p[:2] for p in api.posted] == [("Warning", "ImagePullBackOff")]
    evaluation["status"] = {**evaluation["status"], **patch}
    assert observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, now=at(3)) == {}
    assert len(api.posted) == 1 and len(api.status_patches) == 1

    patch = observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, now=at(6))
    assert patch["phase"] == "Failed" and patch["reason"] == "ImagePullFailed"
    assert api.ended == ["tiny-g1"]
    assert api.posted[-1][:2] == ("Warning", "Failed") and "could not be pulled for 5 minutes" in api.posted[-1][2]
    # If ending the Job did not take, the next look ends it again; a failed Job is left alone.
    evaluation["status"] = {**evaluation["status"], **patch}
    assert observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, now=at(7)) == {}
    assert api.ended == ["tiny-g1", "tiny-g1"]
    api.job = load("job_failed_deadline_exceeded")
    assert observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, now=at(8)) == {}
    assert api.ended == ["tiny-g1", "tiny-g1"]


def test_an_oom_killed_runner_fails_with_oom_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(load("job_failed_backoff_limit"), [load("pod_oomkilled")])
    api.install(monkeypatch)
    patch = observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=api.emit, job=api.job, now=at(4))
    assert patch["phase"] == "Failed" and patch["reason"] == "OOMKilled" and "16Gi" in patch["message"]
    assert not api.ended  # the Job failed by itself
    assert api.posted == [("Warning", "Failed", patch["message"])]
    assert ("get", "Job", "tiny-g1") not in api.reads  # the Job came with the event


def test_quota_is_read_from_the_jobs_events(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(load("job_no_pods"), [], load("events_job_failed_create_quota")["items"])
    api.install(monkeypatch)
    patch = observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=api.emit, now=at(7))
    assert patch["reason"] == "FailedCreate" and "exceeded quota: gpu-quota" in patch["message"]
    assert ("events", "Job", "tiny-g1") in api.reads


def test_a_deleted_runner_account_is_made_again_when_its_pods_cannot_be_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Job controller cannot create a pod of a ServiceAccount that does not exist: the run
    stays Pending with the reason, and the namespace's runner identity is made again at once
    (not at its next check, minutes later); the Job controller then makes the pods."""
    events = load("events_job_failed_create_quota")["items"]
    events[0]["message"] = (
        'Error creating: pods "tiny-g1-kx9vd" is forbidden: error looking up service account '
        'evals/assay-runner: serviceaccount "assay-runner" not found'
    )
    api = FakeApi(load("job_no_pods"), [], events)
    api.install(monkeypatch)
    ensured: list[str] = []
    known = namespace_identity.RunnerIdentities()
    monkeypatch.setattr(known, "ensure", ensured.append)
    monkeypatch.setattr(namespace_identity, "identities", known)
    patch = observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=api.emit, now=at(7))
    assert patch["reason"] == "FailedCreate" and 'serviceaccount "assay-runner" not found' in patch["message"]
    assert ensured == ["evals"]
    # A pod refused for another reason (a quota) is not the identity's to mend.
    quota = FakeApi(load("job_no_pods"), [], load("events_job_failed_create_quota")["items"])
    quota.install(monkeypatch)
    observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=quota.emit, now=at(7))
    assert ensured == ["evals"]


def test_a_healthy_running_job_lists_no_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    job = load("job_pods_pending")
    job["status"]["ready"] = 1
    api = FakeApi(job, [load("pod_running")])
    api.install(monkeypatch)
    patch = observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=api.emit, job=job, now=at(1))
    assert patch["phase"] == "Running" and not api.reads
    assert api.posted == [("Normal", "Running", "1 runner pod(s) running.")]


def test_a_superseded_or_finished_run_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(load("job_pods_pending"), [load("pod_image_pull_backoff")])
    api.install(monkeypatch)
    other = load("job_pods_pending")
    other["metadata"]["name"] = "tiny-g0"
    assert observe.observe_run(accepted_evaluation(), state=OperatorState(), emit=api.emit, job=other, now=at(1)) == {}
    done = {**accepted_evaluation()["status"], "phase": "Succeeded", "reason": "JobComplete"}
    assert observe.observe_run(accepted_evaluation(done), state=OperatorState(), emit=api.emit, now=at(1)) == {}
    assert not api.reads and not api.status_patches


def test_the_job_of_an_earlier_rerun_token_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its end (a Complete Job being deleted) must not mark the run that replaced it finished."""
    api = FakeApi(load("job_pods_pending"), [load("pod_image_pull_backoff")])
    api.install(monkeypatch)
    old = load("job_pods_pending")
    old["metadata"].setdefault("annotations", {})["evaluations.assay.dev/rerun"] = "a"
    old["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    evaluation = accepted_evaluation()
    evaluation["status"]["rerunToken"] = "b"  # same Job name: the tokens' hashes collide
    assert observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, job=old, now=at(1)) == {}
    evaluation["status"]["rerunToken"] = "a"
    evaluation["status"]["results"] = {"arc_easy": {}}  # the runner's scores
    assert (
        observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, job=old, now=at(1))["phase"]
        == "Succeeded"
    )


def test_pending_evaluations_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    pending = observe.PendingEvaluations()
    evaluation = accepted_evaluation()
    pending.observe(evaluation)
    pending.observe({"metadata": {"namespace": "evals", "name": "running"}, "status": {"phase": "Running"}})
    pending.observe(
        {"metadata": {"namespace": "evals", "name": "held"}, "status": {"phase": "Pending", "reason": "Suspended"}}
    )
    assert pending.snapshot() == [("evals", "tiny")]
    seen: list[str] = []
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: evaluation)
    monkeypatch.setattr(observe, "observe_run", lambda ev, *, state, emit: seen.append(ev["metadata"]["name"]) or {})

    observe.PendingSweeper(OperatorState(pending=pending)).sweep()
    assert seen == ["tiny"]
    pending.observe(evaluation, deleted=True)
    assert pending.snapshot() == []


def test_the_pull_timeout_setting() -> None:
    from assay.operator.settings import from_env

    assert from_env({}).image_pull_timeout == 300.0
    assert from_env({"ASSAY_IMAGE_PULL_TIMEOUT": "120"}).image_pull_timeout == 120.0
    for bad in ("0", "-5", "soon"):
        with pytest.raises(UserError, match="ASSAY_IMAGE_PULL_TIMEOUT"):
            from_env({"ASSAY_IMAGE_PULL_TIMEOUT": bad})
    from assay.operator.main import parse_args

    assert parse_args(["--image-pull-timeout", "90"]).image_pull_timeout == 90.0
    assert parse_args([]).image_pull_timeout is None


def test_a_rejected_spec_is_not_overwritten_by_the_previous_runs_job(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(load("job_pods_pending"), [load("pod_running")])
    api.install(monkeypatch)
    accepted = accepted_evaluation()["status"]
    rejected = {**accepted, **conditions.rejected(accepted, message="Unknown task 'x'.", generation=2, now=at(1))}
    job = load("job_pods_pending")
    job["status"]["ready"] = 1
    assert (
        observe.observe_run(accepted_evaluation(rejected), state=OperatorState(), emit=api.emit, job=job, now=at(2))
        == {}
    )
    assert not api.status_patches


def _complete(job: dict[str, Any]) -> dict[str, Any]:
    job["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}],
        "succeeded": 1,
        "completionTime": "2025-05-01T12:09:00Z",
    }
    return job


def test_a_complete_job_is_judged_by_the_status_as_it_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch may not have shown the runner's last write yet: a Complete Job whose cached
    Evaluation shows no scores is looked up again before the run is called failed."""
    api = FakeApi(_complete(load("job_pods_pending")), [])
    api.install(monkeypatch)
    cached = accepted_evaluation()
    now = {**cached, "status": {**cached["status"], "results": {"arc_easy": {}}, "runnerMessage": "Evaluated 1 tasks."}}
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: now)
    patch = observe.observe_run(cached, state=OperatorState(), emit=api.emit, job=api.job, now=at(9))
    assert patch["phase"] == "Succeeded" and patch["message"] == "Evaluated 1 tasks."
    assert api.posted == [("Normal", "Succeeded", "Evaluated 1 tasks.")]


def test_a_complete_job_without_scores_fails_the_run_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(_complete(load("job_pods_pending")), [])
    api.install(monkeypatch)
    evaluation = accepted_evaluation()
    reads: list[str] = []
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: reads.append(name) or evaluation)
    patch = observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, job=api.job, now=at(9))
    assert patch["phase"] == "Failed" and patch["reason"] == "ResultsNotRecorded" and reads == ["tiny"]
    assert api.posted == [("Warning", "Failed", patch["message"])] and "emptyDir" in patch["message"]
    assert not api.ended  # the Job ended by itself
    # Another run by the time of the second look: nothing is written over it.
    newer = {**evaluation, "status": {**evaluation["status"], "jobName": "tiny-g2"}}
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: newer)
    assert observe.observe_run(evaluation, state=OperatorState(), emit=api.emit, job=api.job, now=at(9)) == {}
    assert len(api.status_patches) == 1
