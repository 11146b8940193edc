"""Runner containers that never ran (`pod_start`, through `diagnosis`): a start the runtime
refused (StartError), a Secret without the key the env names, volumes that cannot be
mounted or attached. Pods and Events in tests/operator/recorded, in the shapes the kubelet
and the attach/detach controller write."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

from assay.operator.decide import conditions, diagnosis, job_status
from assay.operator.decide.diagnosis import Problem

RECORDED = Path(__file__).parents[1] / "recorded"
T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def load(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_a_start_the_runtime_refused_explains_the_failed_job() -> None:
    pod, job = load("pod_start_error"), load("job_failed_backoff_limit")
    problem = diagnosis.diagnose(job, [pod], now=at(1))
    assert problem == Problem(
        "StartError",
        'Container runner of runner pod tiny-g1-7xk2p could not start (exit code 128): exec: "python": executable '
        "file not found in $PATH: unknown; spec.image must be an Assay runner image.",
        explains_failure=True,
    )
    accepted = conditions.accepted(None, job_name="tiny-g1", generation=1, now=T0, new_run=True)
    patch = job_status.from_job(accepted, job, generation=1, now=at(1), problem=problem)
    assert patch["phase"] == "Failed" and patch["reason"] == "StartError" and patch["message"] == problem.message
    # Another cause keeps the runtime's words and points at the pod.
    other = copy.deepcopy(pod)
    other["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
        "unable to start container process: error during container init: error setting cgroup config for procHooks "
        'process: failed to write "200000": write /sys/fs/cgroup/cpu.max: invalid argument: unknown'
    )
    said = diagnosis.terminated_problem(other)
    assert said is not None and said.message.startswith(
        "Container runner of runner pod tiny-g1-7xk2p could not start (exit code 128): error during container init"
    )
    assert said.message.endswith("; see kubectl describe pod tiny-g1-7xk2p.")


def test_a_missing_secret_key_is_named() -> None:
    problem = diagnosis.waiting_problem(load("pod_create_container_config_error_missing_key"), now=at(1))
    assert problem == Problem(
        "CreateContainerConfigError",
        "Container runner of runner pod tiny-g1-7xk2p cannot start: couldn't find key token in Secret evals/hf-token.",
    )


def test_a_volume_that_cannot_be_mounted_names_its_cause() -> None:
    pod, events = load("pod_container_creating"), load("events_pod_failed_mount")["items"]
    problem = diagnosis.diagnose(load("job_pods_pending"), [pod], events, now=at(5))
    # The kubelet's own cause, not its two-minute summary ("timed out waiting for the condition").
    assert problem == Problem(
        "FailedMount",
        "Runner pod tiny-g1-7xk2p cannot mount its volumes: MountVolume.SetUp "
        'failed for volume "tasks" : configmap "my-tasks" not found; create what '
        "it names, or fix the spec field that names it.",
    )
    patch = job_status.from_job(
        conditions.accepted(None, job_name="tiny-g1", generation=1, now=T0, new_run=True),
        load("job_pods_pending"),
        generation=1,
        now=at(5),
        problem=problem,
    )
    assert patch["reason"] == "FailedMount" and "phase" not in patch  # Pending: a ConfigMap may yet be made
    # Only the summary known: it is what is shown.
    summary_only = [events[0], events[2]]
    summary = diagnosis.waiting_problem(pod, summary_only, now=at(5))
    assert summary is not None and "timed out waiting for the condition" in summary.message


def test_a_mount_that_has_since_succeeded_is_not_reported() -> None:
    pod, events = load("pod_container_creating"), load("events_pod_failed_mount")["items"]
    pulling = copy.deepcopy(events[0])
    pulling.update(
        reason="Pulling",
        type="Normal",
        message='Pulling image "ghcr.io/assay-dev/assay:0.1.0"',
        eventTime=None,
        firstTimestamp="2025-05-01T12:04:30Z",
        lastTimestamp="2025-05-01T12:04:30Z",
    )
    assert diagnosis.waiting_problem(pod, [*events, pulling], now=at(5)) is None
    running = load("pod_running")
    assert diagnosis.waiting_problem(running, events, now=at(5)) is None  # started: old Events say nothing


def test_a_volume_attached_elsewhere_says_so() -> None:
    pod, events = load("pod_container_creating"), load("events_pod_failed_attach")["items"]
    problem = diagnosis.waiting_problem(pod, events, now=at(3))
    assert problem is not None and problem.reason == "FailedAttachVolume" and not problem.fatal
    assert problem.message == (
        'Runner pod tiny-g1-7xk2p cannot attach a volume: Multi-Attach error for volume "pvc-5b1c2d3e-0000-4000-8000-'
        '00000000cafe" Volume is already used by pod(s) tiny-g0-2m8fq; a ReadWriteOnce PVC (spec.cache.pvc, '
        "spec.output.pvc) is attached to one node at a time."
    )


def test_a_pod_waiting_to_be_created_has_its_events_read_after_a_grace() -> None:
    job, pod = load("job_pods_pending"), load("pod_container_creating")  # created 12:00:02
    assert diagnosis.events_to_read(job, [pod], now=at(0.25)) == []  # every pod creates its containers a while
    assert diagnosis.events_to_read(job, [pod], now=at(1)) == [("Pod", "tiny-g1-7xk2p")]
    assert diagnosis.events_to_read(job, [load("pod_running")], now=at(1)) == []
    unscheduled = load("pod_unschedulable")
    assert diagnosis.events_to_read(job, [unscheduled], now=at(1)) == []  # the scheduler's condition says it all
