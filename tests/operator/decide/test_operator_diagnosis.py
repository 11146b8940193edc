"""Stuck and failed runs: pods, Jobs and Events (in tests/operator/recorded, in the shapes a
kubelet, the scheduler and the Job controller write) → a condition reason and message."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from assay.operator.decide import conditions, diagnosis, job_status
from assay.operator.decide.diagnosis import Problem

RECORDED = Path(__file__).parents[1] / "recorded"
T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
IMAGE = "ghcr.io/assay-dev/assay:0.0.0-missing"


def load(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


def events(name: str) -> list[dict[str, Any]]:
    return load(name)["items"]


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def _by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def _apply(status: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in {**status, **patch}.items() if v is not None}


def _accepted() -> dict[str, Any]:
    return _apply({}, conditions.accepted(None, job_name="tiny-g1", generation=1, now=T0, new_run=True))


# --- image pulls -----------------------------------------------------------------------


@pytest.mark.parametrize("pod", ["pod_image_pull_backoff", "pod_err_image_pull"])
def test_a_failing_pull_names_the_image_and_the_cause(pod: str) -> None:
    problem = diagnosis.waiting_problem(load(pod), now=at(2))
    assert problem == Problem(
        "ImagePullBackOff",
        f'Cannot pull the runner image "{IMAGE}" (rpc error: code = NotFound desc = failed to pull and unpack image '
        f'"{IMAGE}": failed to resolve reference "{IMAGE}": {IMAGE}: not found); the Evaluation fails if this lasts '
        "5 minutes.",
    )


def test_the_kubelets_back_off_flip_does_not_change_the_message() -> None:
    # The kubelet alternates ErrImagePull and ImagePullBackOff on every retry; status must not churn.
    backoff = diagnosis.waiting_problem(load("pod_image_pull_backoff"), now=at(2))
    err = diagnosis.waiting_problem(load("pod_err_image_pull"), now=at(2))
    assert backoff == err


def test_an_old_kubelets_back_off_takes_the_cause_from_its_events() -> None:
    pod = load("pod_image_pull_backoff_without_cause")
    assert "(ImagePullBackOff)" in diagnosis.waiting_problem(pod, now=at(2)).message
    with_events = diagnosis.waiting_problem(pod, events("events_pod_image_pull"), now=at(2))
    assert f"{IMAGE}: not found)" in with_events.message


def test_a_pull_failing_past_the_timeout_is_fatal() -> None:
    pod, pulls = load("pod_image_pull_backoff"), events("events_pod_image_pull")
    # Timed from the first pull-failure Event (12:00:04), else from when the pod was scheduled (12:00:02).
    assert not diagnosis.waiting_problem(pod, pulls, now=at(5)).fatal
    failed = diagnosis.waiting_problem(pod, pulls, now=at(5) + datetime.timedelta(seconds=4))
    assert failed.reason == "ImagePullFailed" and failed.fatal
    assert failed.message.startswith(f'The runner image "{IMAGE}" could not be pulled for 5 minutes (rpc error')
    assert diagnosis.waiting_problem(pod, now=at(5) + datetime.timedelta(seconds=2)).fatal
    short = diagnosis.waiting_problem(pod, pulls, now=at(2), image_pull_timeout=90)
    assert short.reason == "ImagePullFailed" and "for 90 s" in short.message


def test_an_invalid_image_reference_is_fatal_at_once() -> None:
    problem = diagnosis.waiting_problem(load("pod_invalid_image_name"), now=at(0.1))
    assert problem.reason == "InvalidImageName" and problem.fatal
    assert problem.message.startswith('The runner image "ghcr.io/Assay-Dev/assay:0.1.0" is not a valid image reference')
    assert "must be lowercase" in problem.message and problem.message.endswith("runner image.")


def test_an_init_container_pull_is_seen_too() -> None:
    problem = diagnosis.waiting_problem(load("pod_init_container_err_image_pull"), now=at(1))
    assert problem.reason == "ImagePullBackOff" and '"registry.local:5000/assay:dev"' in problem.message
    assert "connection refused" in problem.message


# --- scheduling, creation, crashes -----------------------------------------------------


def test_unschedulable_carries_the_schedulers_message() -> None:
    problem = diagnosis.waiting_problem(load("pod_unschedulable"), now=at(1))
    assert problem == Problem(
        "Unschedulable",
        "Runner pod tiny-g1-7xk2p cannot be scheduled: 0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }, 2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
        "available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.",
    )


def test_a_missing_secret_says_so() -> None:
    problem = diagnosis.waiting_problem(load("pod_create_container_config_error"), now=at(1))
    assert problem == Problem(
        "CreateContainerConfigError",
        'Container runner of runner pod tiny-g1-7xk2p cannot start: secret "hf-token" not found.',
    )


def test_crash_loop_back_off_points_at_the_previous_log() -> None:
    problem = diagnosis.waiting_problem(load("pod_crash_loop_backoff"), now=at(3))
    assert problem.reason == "CrashLoopBackOff" and "(last exit code 1)" in problem.message
    assert "kubectl logs tiny-g1-7xk2p -c runner --previous" in problem.message
    oom = diagnosis.waiting_problem(load("pod_crash_loop_after_oom"), now=at(3))
    assert oom.reason == "OOMKilled" and "16Gi" in oom.message


@pytest.mark.parametrize(
    "events_file,said",
    [
        ("events_job_failed_create_quota", "exceeded quota: gpu-quota, requested: requests.nvidia.com/gpu=1"),
        ("events_job_failed_create_limitrange", "maximum memory usage per Container is 8Gi, but limit is 16Gi"),
    ],
)
def test_pods_the_job_cannot_create(events_file: str, said: str) -> None:
    job = load("job_no_pods")
    problem = diagnosis.diagnose(job, [], events(events_file), now=at(7))
    assert problem.reason == "FailedCreate" and not problem.fatal
    assert problem.message.startswith('Job tiny-g1 cannot create runner pods: pods "tiny-g1-')
    assert said in problem.message
    # Once a pod exists (quota freed), the hour-old Event no longer counts.
    pod = load("pod_running")
    pod["metadata"]["creationTimestamp"] = "2025-05-01T12:07:00Z"
    assert diagnosis.diagnose(job, [pod], events(events_file), now=at(8)) is None
    assert (
        diagnosis.diagnose({**job, "spec": {**job["spec"], "suspend": True}}, [], events(events_file), now=at(8))
        is None
    )


def test_which_events_are_read() -> None:
    assert diagnosis.events_to_read(load("job_no_pods"), []) == [("Job", "tiny-g1")]
    assert diagnosis.events_to_read(load("job_pods_pending"), [load("pod_image_pull_backoff")]) == [
        ("Pod", "tiny-g1-7xk2p")
    ]
    assert diagnosis.events_to_read(load("job_pods_pending"), [load("pod_running")]) == []


# --- ends ------------------------------------------------------------------------------


def test_oom_killed_names_the_memory_limit() -> None:
    problem = diagnosis.terminated_problem(load("pod_oomkilled"))
    assert problem == Problem(
        "OOMKilled",
        "The runner (container runner of pod tiny-g1-7xk2p) was OOMKilled: it needed more than its memory limit of "
        "16Gi; raise spec.resources.memory.",
        explains_failure=True,
    )
    unlimited = load("pod_oomkilled")
    del unlimited["spec"]["containers"][0]["resources"]
    assert "no memory limit set" in diagnosis.terminated_problem(unlimited).message


def test_a_healthy_pod_has_no_problem() -> None:
    assert diagnosis.diagnose(load("job_pods_pending"), [load("pod_running")], now=at(1)) is None


# --- into the Evaluation's status ------------------------------------------------------


def test_a_stuck_pull_stays_pending_with_the_reason_then_fails() -> None:
    status = _accepted()
    job, pod, pulls = load("job_pods_pending"), load("pod_image_pull_backoff"), events("events_pod_image_pull")
    problem = diagnosis.diagnose(job, [pod], pulls, now=at(2))
    patch = job_status.from_job(status, job, generation=1, now=at(2), problem=problem)
    status = _apply(status, patch)
    assert status["phase"] == "Pending" and status["reason"] == "ImagePullBackOff"
    assert status["message"] == problem.message
    running = _by_type(status)["Running"]
    assert running["status"] == "False" and running["reason"] == "ImagePullBackOff" and IMAGE in running["message"]
    # The same, or the kubelet's flip to ErrImagePull, changes nothing.
    assert job_status.from_job(status, job, generation=1, now=at(3), problem=problem) == {}
    flipped = diagnosis.diagnose(job, [load("pod_err_image_pull")], pulls, now=at(3))
    assert job_status.from_job(status, job, generation=1, now=at(3), problem=flipped) == {}
    # Past the timeout: Failed, ImagePullFailed.
    fatal = diagnosis.diagnose(job, [pod], pulls, now=at(6))
    patch = job_status.from_job(status, job, generation=1, now=at(6), problem=fatal)
    assert conditions.finished_now(status, patch) == "Failed"
    status = _apply(status, patch)
    failed = _by_type(status)["Failed"]
    assert status["reason"] == failed["reason"] == "ImagePullFailed" and failed["status"] == "True"
    assert status["completionTime"] == "2025-05-01T12:06:00Z" and IMAGE in status["message"]
    # The Job then fails with DeadlineExceeded (the operator ends it); the reason stays.
    assert (
        job_status.from_job(status, load("job_failed_deadline_exceeded"), generation=1, now=at(7), problem=fatal) == {}
    )


def test_a_cleared_problem_clears_its_message() -> None:
    status = _accepted()
    job = load("job_pods_pending")
    unschedulable = diagnosis.diagnose(job, [load("pod_unschedulable")], now=at(1))
    status = _apply(status, job_status.from_job(status, job, generation=1, now=at(1), problem=unschedulable))
    assert status["reason"] == "Unschedulable" and "0/3 nodes are available" in status["message"]
    status = _apply(status, job_status.from_job(status, job, generation=1, now=at(2), problem=None))
    assert status["phase"] == "Pending" and status["reason"] == "PodsPending"
    assert status["message"] == f"Waiting for the runner pods of {job['metadata']['name']} to start."


def test_an_oom_killed_runner_fails_the_evaluation_with_oom_killed() -> None:
    status = _accepted()
    job = load("job_failed_backoff_limit")
    problem = diagnosis.diagnose(job, [load("pod_oomkilled")], now=at(4))
    assert problem.reason == "OOMKilled"
    status = _apply(status, job_status.from_job(status, job, generation=1, now=at(4), problem=problem))
    failed = _by_type(status)["Failed"]
    assert status["phase"] == "Failed" and status["reason"] == failed["reason"] == "OOMKilled"
    assert "was OOMKilled" in failed["message"] and "memory limit of 16Gi" in failed["message"]
    assert status["message"] == failed["message"]


def test_a_pod_the_kubelet_refused_fails_the_evaluation_with_the_kubelets_reason() -> None:
    """Recorded on the real node: a pod bound to it with a nodeSelector its labels lack (what
    the kubelet sees when a node's new label reached the scheduler first)."""
    status = _accepted()
    job = load("job_failed_backoff_limit")
    pod = load("pod_rejected_node_affinity")
    problem = diagnosis.diagnose(job, [pod], now=at(4))
    assert problem == Problem(
        "PodRejected",
        "Runner pod runner-g1-x7k2p was refused by the kubelet on node 127.0.0.1 before it started (NodeAffinity: "
        "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector); the Job counts that as a "
        "failed attempt, and spec.backoffLimit of 1 or more retries it.",
        explains_failure=True,
    )
    status = _apply(status, job_status.from_job(status, job, generation=1, now=at(4), problem=problem))
    assert status["phase"] == "Failed" and status["reason"] == _by_type(status)["Failed"]["reason"] == "PodRejected"
    # a pod whose runner ran and failed is not "refused", nor is an evicted one
    ran = load("pod_oomkilled")
    ran["status"].update(phase="Failed", reason="Error")
    evicted = {**pod, "status": {**pod["status"], "reason": "Evicted"}}
    assert diagnosis.terminated_problem(evicted) is None
    assert diagnosis.terminated_problem(ran).reason == "OOMKilled"
    ran["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="Error", exitCode=1)
    assert diagnosis.terminated_problem(ran) is None


def test_a_failed_job_without_a_pod_problem_keeps_its_reason() -> None:
    status = _accepted()
    job = load("job_failed_backoff_limit")
    pod = load("pod_oomkilled")
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="Error", exitCode=1)
    problem = diagnosis.diagnose(job, [pod], now=at(4))
    assert problem is None
    status = _apply(status, job_status.from_job(status, job, generation=1, now=at(4), problem=problem))
    assert status["reason"] == "BackoffLimitExceeded"


def test_deadline_exceeded_names_the_limit() -> None:
    state = job_status.job_state(load("job_failed_deadline_exceeded"))
    assert (state.phase, state.reason) == ("Failed", "DeadlineExceeded")
    assert state.message == "tiny-g1 failed: the run took longer than spec.activeDeadlineSeconds (600 s)."


def test_between_retries_the_last_end_shows_and_a_running_retry_hides_it() -> None:
    job = copy.deepcopy(load("job_pods_pending"))
    job["spec"]["backoffLimit"] = 2
    job["status"] = {"active": 0, "failed": 1, "startTime": "2025-05-01T12:00:01Z"}
    assert diagnosis.diagnose(job, [load("pod_oomkilled")], now=at(4)).reason == "OOMKilled"
    job["status"]["active"] = job["status"]["ready"] = 1
    assert diagnosis.diagnose(job, [load("pod_oomkilled"), load("pod_running")], now=at(5)) is None


def test_a_fatal_problem_on_a_running_multi_node_job_fails_it() -> None:
    status = _apply(_accepted(), {"phase": "Running"})
    job = load("job_pods_pending")
    job["spec"]["parallelism"] = 2
    job["status"].update(active=2, ready=1)
    problem = diagnosis.diagnose(job, [load("pod_running"), load("pod_invalid_image_name")], now=at(1))
    patch = job_status.from_job(status, job, generation=1, now=at(1), problem=problem)
    assert patch["phase"] == "Failed" and patch["reason"] == "InvalidImageName"
    waiting = diagnosis.diagnose(job, [load("pod_running"), load("pod_unschedulable")], now=at(1))
    patch = job_status.from_job(status, job, generation=1, now=at(1), problem=waiting)
    assert "phase" not in patch and patch["reason"] == "Unschedulable"
    assert patch["message"].startswith("1 runner pod(s) running. Runner pod tiny-g1-7xk2p cannot be scheduled")


def test_a_suspended_job_stays_suspended() -> None:
    job = load("job_no_pods")
    job["spec"]["suspend"] = True
    problem = Problem("FailedCreate", "Job tiny-g1 cannot create runner pods: quota.")
    assert job_status.with_problem(job_status.job_state(job), problem, now=at(1)).reason == "Suspended"
