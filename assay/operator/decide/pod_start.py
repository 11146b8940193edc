"""Why a runner pod's containers never ran: a volume that cannot be attached or mounted, or a
container the runtime could not start. Pure functions, used by `diagnosis`.

These leave little in the pod's own status:

- a volume: the containers only wait in `ContainerCreating` (`PodInitializing` when the
  pod has init containers) while the kubelet retries the mount. The cause is in Events
  on the pod: the kubelet's `FailedMount` ("MountVolume.SetUp failed for volume "tasks" :
  configmap "my-tasks" not found", and every two minutes "Unable to attach or mount
  volumes: unmounted volumes=[...]: timed out waiting for the condition") and the
  attach/detach controller's `FailedAttachVolume` ("Multi-Attach error for volume ...").
  The kubelet pulls the image only once every volume is mounted, so a pull (or any later
  step) after the last failure means the volumes are fine now.
- a start: the container runtime could not start the process (no such executable in the
  image, a seccomp or cgroup setting it cannot apply). The kubelet reports the container
  terminated with reason `StartError` and exit code 128; with the runner's
  `restartPolicy: Never` the pod fails with it, and so does the Job.
- an admission: the kubelet refused the pod before creating any container (status reason
  NodeAffinity, OutOfcpu, UnexpectedAdmissionError; phase Failed). The Job counts it as a
  failed attempt, so with backoffLimit 0 the run fails without the runner having run, and
  "the runner failed" would send the user to a log that does not exist. The common cause is
  a node whose labels changed between the scheduler's decision and the kubelet's check (the
  kubelet's view of its own node lags), which a retry survives.

Each function returns (reason, message), or None; `diagnosis` makes the `Problem`.
"""

from __future__ import annotations

from collections.abc import Sequence

from assay import echoed_text
from assay.operator import objects

START_ERROR = "StartError"
FAILED_MOUNT = "FailedMount"
FAILED_ATTACH_VOLUME = "FailedAttachVolume"
POD_REJECTED = "PodRejected"
REASONS = (START_ERROR, FAILED_MOUNT, FAILED_ATTACH_VOLUME, POD_REJECTED)

CREATING_EVENTS_GRACE = 30.0
"""Seconds a pod may wait in ContainerCreating before its Events are read: every pod does
for a moment (a pull of a large image for minutes), and a mount that fails is retried, and
reported, for as long as it fails."""
_NOT_STARTED = ("ContainerCreating", "PodInitializing")
_PROGRESS = ("Pulling", "Pulled", "Created", "Started")
"""Kubelet Event reasons that come only after every volume is mounted."""
_MOUNT_SUMMARY = "Unable to attach or mount volumes"
_RUNTIME_PREFIX = "unable to start container process: "
_DETAIL_CHARS = 400


def _statuses(pod: objects.Pod) -> list[objects.ContainerStatus]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def _name(pod: objects.Pod) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def stuck_creating(pod: objects.Pod) -> bool:
    """A live pod on a node none of whose containers has started yet (volumes, then the image)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending" or not (pod.get("spec") or {}).get("nodeName"):
        return False
    return all(((s.get("state") or {}).get("waiting") or {}).get("reason") in _NOT_STARTED for s in _statuses(pod))


def mount_problem(pod: objects.Pod, pod_events: Sequence[objects.Event]) -> tuple[str, str] | None:
    """A volume the pod cannot attach or mount, from its Events (oldest first), while it has not started."""
    if not stuck_creating(pod):
        return None
    last_failure = -1
    for i, event in enumerate(pod_events):
        if event.get("reason") in (FAILED_MOUNT, FAILED_ATTACH_VOLUME):
            last_failure = i
        elif event.get("reason") in _PROGRESS:
            last_failure = -1  # mounted since: whatever failed before has passed
    if last_failure < 0:
        return None
    failures = [e for e in pod_events[: last_failure + 1] if e.get("reason") in (FAILED_MOUNT, FAILED_ATTACH_VOLUME)]
    # An attach failure is the cause of the mount timing out; a mount's own cause beats the summary.
    chosen = next((e for e in reversed(failures) if e.get("reason") == FAILED_ATTACH_VOLUME), None) or next(
        (e for e in reversed(failures) if not str(e.get("message") or "").startswith(_MOUNT_SUMMARY)), failures[-1]
    )
    said = echoed_text.bounded(str(chosen.get("message") or chosen.get("reason")), _DETAIL_CHARS).rstrip(".")
    name = _name(pod)
    if chosen.get("reason") == FAILED_ATTACH_VOLUME:
        hint = (
            "a ReadWriteOnce PVC (spec.cache.pvc, spec.output.pvc) is attached to one node at a time"
            if "Multi-Attach" in said
            else "see kubectl describe pod " + name
        )
        return FAILED_ATTACH_VOLUME, f"Runner pod {name} cannot attach a volume: {said}; {hint}."
    return FAILED_MOUNT, (
        f"Runner pod {name} cannot mount its volumes: {said}; create what it names, or fix the "
        "spec field that names it."
    )


def start_error(pod: objects.Pod) -> tuple[str, str] | None:
    """A container the runtime could not start (reason StartError), as it ended or last ended."""
    for status in _statuses(pod):
        for state in (status.get("state"), status.get("lastState")):
            terminated = (state or {}).get("terminated") or {}
            if terminated.get("reason") != START_ERROR:
                continue
            message = str(terminated.get("message") or "no cause given by the container runtime")
            # containerd's "failed to create containerd task: failed to create shim task: OCI runtime
            # create failed: runc create failed: unable to start container process: <cause>".
            cause = message.split(_RUNTIME_PREFIX, 1)[-1]
            said = echoed_text.bounded(cause, _DETAIL_CHARS).rstrip(".")
            name, container = _name(pod), status.get("name", "?")
            code = terminated.get("exitCode", 128)
            hint = (
                "spec.image must be an Assay runner image"
                if "executable file not found" in cause
                else f"see kubectl describe pod {name}"
            )
            return START_ERROR, (
                f"Container {container} of runner pod {name} could not start (exit code {code}): {said}; {hint}."
            )
    return None


def rejected(pod: objects.Pod) -> tuple[str, str] | None:
    """A pod the kubelet refused to admit: Failed with the kubelet's reason, no container run."""
    status = pod.get("status") or {}
    reason = status.get("reason")
    if status.get("phase") != "Failed" or not reason or reason == "Evicted":
        return None
    if any((s.get("state") or {}).get("running") or (s.get("state") or {}).get("terminated") for s in _statuses(pod)):
        return None
    said = echoed_text.bounded(str(status.get("message") or reason).removeprefix("Pod was rejected: "), _DETAIL_CHARS)
    node = (pod.get("spec") or {}).get("nodeName")
    return POD_REJECTED, (
        f"Runner pod {_name(pod)} was refused by the kubelet{f' on node {node}' if node else ''} before it started "
        f"({reason}: {said.rstrip('.')}); the Job counts that as a failed attempt, and spec.backoffLimit of 1 or "
        "more retries it."
    )
