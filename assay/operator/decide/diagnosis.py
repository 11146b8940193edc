"""Why a run is stuck or failed, read from its Job, its pods and their Events: pure functions.

A Job's own status says little while it waits ("1 active") and only "BackoffLimitExceeded"
when it fails. The reasons a user can act on are elsewhere, written by other components:

- the kubelet, in each pod's `status.containerStatuses[].state.waiting` (ImagePullBackOff,
  ErrImagePull, InvalidImageName, CrashLoopBackOff, CreateContainerConfigError) and
  `state`/`lastState.terminated` (reason OOMKilled, exit code 137; StartError), and with the
  attach/detach controller in Events on the pod (FailedMount, FailedAttachVolume: `pod_start`);
- the scheduler, in the pod condition `PodScheduled=False` (reason Unschedulable, with
  its own message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.");
- the Job controller, in Events on the Job (reason FailedCreate: a ResourceQuota or a
  LimitRange forbade the pod, which then never exists).

`diagnose` turns them into one `Problem` (a CamelCase reason and a one-sentence message)
for the Evaluation's conditions. An image that cannot be pulled is retried by the kubelet
forever; here a pull failure that lasts `image_pull_timeout` seconds (measured from the
pod's first pull-failure Event, or from when it was scheduled) becomes the fatal
`ImagePullFailed`, and an image reference that cannot even be parsed (InvalidImageName)
is fatal at once. Everything else leaves the Evaluation Pending with the reason visible,
since quota frees up, nodes get added and Secrets get created. Ranks that keep stopping
for a peer's failure past the admin's bound (`peer_failures`) are fatal too.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Sequence

from assay.operator import objects
from assay.operator.decide import object_reading as read
from assay.operator.decide import pod_start

DEFAULT_IMAGE_PULL_TIMEOUT = 300.0
"""Seconds a runner image may fail to pull before the Evaluation fails (the kubelet's
pull back-off reaches its 5-minute ceiling after about as long)."""

IMAGE_PULL_BACKOFF = "ImagePullBackOff"
IMAGE_PULL_FAILED = "ImagePullFailed"
INVALID_IMAGE_NAME = "InvalidImageName"
UNSCHEDULABLE = "Unschedulable"
FAILED_CREATE = "FailedCreate"
CRASH_LOOP_BACKOFF = "CrashLoopBackOff"
CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"
CONTAINER_CREATE_ERROR = "CreateContainerError"
OOM_KILLED = "OOMKilled"
DEADLINE_EXCEEDED = "DeadlineExceeded"
PEER_FAILURES_EXCEEDED = "PeerFailuresExceeded"

REASONS = (
    IMAGE_PULL_BACKOFF,
    IMAGE_PULL_FAILED,
    INVALID_IMAGE_NAME,
    UNSCHEDULABLE,
    FAILED_CREATE,
    CRASH_LOOP_BACKOFF,
    CONTAINER_CONFIG_ERROR,
    CONTAINER_CREATE_ERROR,
    OOM_KILLED,
    DEADLINE_EXCEEDED,
    PEER_FAILURES_EXCEEDED,
    *pod_start.REASONS,
)
"""Every reason `diagnose` (and `peer_failures`) can give."""
FATAL_REASONS = (IMAGE_PULL_FAILED, INVALID_IMAGE_NAME, PEER_FAILURES_EXCEEDED)
"""Reasons for which the operator fails the Evaluation itself and ends its Job."""

_PULL_WAITING = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "SignatureValidationFailed",
}
_CREATE_WAITING = {
    "CreateContainerConfigError": CONTAINER_CONFIG_ERROR,
    "CreateContainerError": CONTAINER_CREATE_ERROR,
    "RunContainerError": CONTAINER_CREATE_ERROR,
    "PreCreateHookError": CONTAINER_CREATE_ERROR,
    "PreStartHookError": CONTAINER_CREATE_ERROR,
}
# "Back-off pulling image \"x\": ErrImagePull: <cause>" (kubelet >= 1.31) → "<cause>".
_BACKOFF_PREFIX = re.compile(r'^Back-off pulling image "[^"]*"(: (ErrImagePull: )?)?')
_FAILED_PULL_PREFIX = re.compile(r'^Failed to pull image "[^"]*": ')


@dataclasses.dataclass(frozen=True)
class Problem:
    """Something that keeps a run from going on, as a condition reason and message."""

    reason: str
    message: str
    fatal: bool = False
    """The run cannot succeed as it is: the Evaluation fails now and its Job is ended."""
    explains_failure: bool = False
    """A runner that ended this way (OOMKilled) is why a failed Job failed."""


def _is_pull_failure_event(event: objects.Event) -> bool:
    message = str(event.get("message") or "")
    reason = event.get("reason")
    return (reason == "Failed" and "pull" in message.lower()) or (reason == "BackOff" and "pulling image" in message)


# --- one pod ---------------------------------------------------------------------------


def _pull_detail(waiting: objects.ContainerStateWaiting, pull_events: Sequence[objects.Event]) -> str:
    """The cause of a pull failure: from the pod's status, else from the kubelet's latest
    "Failed to pull image" Event (kubelets before 1.31 put no cause into ImagePullBackOff)."""
    detail = _BACKOFF_PREFIX.sub("", str(waiting.get("message") or "")).strip()
    if not detail:
        causes = [e for e in pull_events if _FAILED_PULL_PREFIX.match(str(e.get("message") or ""))]
        if causes:
            floor = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
            latest = max(causes, key=lambda e: read.event_time(e, first=False) or floor)
            detail = _FAILED_PULL_PREFIX.sub("", str(latest.get("message"))).strip()
    return read.sentence(detail or str(waiting.get("reason") or "no cause given by the kubelet"))


def _pull_since(pod: objects.Pod, pull_events: Sequence[objects.Event]) -> datetime.datetime | None:
    times = [t for t in (read.event_time(e, first=True) for e in pull_events) if t]
    if times:
        return min(times)
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return read.parse_time(condition.get("lastTransitionTime"))
    return read.parse_time((pod.get("metadata") or {}).get("creationTimestamp"))


def waiting_problem(
    pod: objects.Pod,
    events: Sequence[objects.Event] = (),
    *,
    now: datetime.datetime | None = None,
    image_pull_timeout: float = DEFAULT_IMAGE_PULL_TIMEOUT,
) -> Problem | None:
    """A live pod that cannot start or keeps failing: pull errors, scheduling, container creation."""
    if read.pod_finished(pod):
        return None
    unschedulable = _unschedulable(pod)
    if unschedulable:
        return unschedulable
    for status in read.statuses(pod):
        problem = _container_waiting(pod, status, events, now=now, image_pull_timeout=image_pull_timeout)
        if problem:
            return problem
    floor = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    in_order = sorted(read.about(events, "Pod", read.name(pod)), key=lambda e: read.event_time(e, first=False) or floor)
    mount = pod_start.mount_problem(pod, in_order)
    return Problem(*mount) if mount else None


def _unschedulable(pod: objects.Pod) -> Problem | None:
    """The scheduler's own word (PodScheduled=False, Unschedulable): which nodes lack what."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == UNSCHEDULABLE
        ):
            said = read.sentence(condition.get("message") or "no node fits it")
            return Problem(UNSCHEDULABLE, f"Runner pod {read.name(pod)} cannot be scheduled: {said}.")
    return None


def _container_waiting(
    pod: objects.Pod,
    status: objects.ContainerStatus,
    events: Sequence[objects.Event],
    *,
    now: datetime.datetime | None,
    image_pull_timeout: float,
) -> Problem | None:
    """What the kubelet says of one container that waits: a bad image, a pull, a crash loop, a create error."""
    name = read.name(pod)
    waiting = (status.get("state") or {}).get("waiting") or {}
    reason = waiting.get("reason")
    container = status.get("name", "?")
    if reason == INVALID_IMAGE_NAME:
        image = read.image(pod, status)
        said = read.sentence(waiting.get("message") or "invalid reference format")
        return Problem(
            INVALID_IMAGE_NAME,
            f'The runner image "{image}" is not a valid image reference ({said}); '
            "fix spec.image or the operator's runner image.",
            fatal=True,
        )
    if reason in _PULL_WAITING:
        return _pull_problem(pod, status, waiting, events, now=now, image_pull_timeout=image_pull_timeout)
    if reason == CRASH_LOOP_BACKOFF:
        last = (status.get("lastState") or {}).get("terminated") or {}
        if last.get("reason") == OOM_KILLED:
            return dataclasses.replace(_oom_problem(pod, container), explains_failure=False)
        code = f" (last exit code {last['exitCode']})" if last.get("exitCode") is not None else ""
        return Problem(
            CRASH_LOOP_BACKOFF,
            f"Container {container} of runner pod {name} keeps crashing{code}; "
            f"see kubectl logs {name} -c {container} --previous.",
        )
    if reason in _CREATE_WAITING:
        said = read.sentence(waiting.get("message") or reason)
        return Problem(_CREATE_WAITING[reason], f"Container {container} of runner pod {name} cannot start: {said}.")
    return None


def _pull_problem(
    pod: objects.Pod,
    status: objects.ContainerStatus,
    waiting: objects.ContainerStateWaiting,
    events: Sequence[objects.Event],
    *,
    now: datetime.datetime | None,
    image_pull_timeout: float,
) -> Problem:
    """A pull failing: ImagePullBackOff while it lasts, the fatal ImagePullFailed past `image_pull_timeout`."""
    image = read.image(pod, status)
    pull_events = [e for e in read.about(events, "Pod", read.name(pod)) if _is_pull_failure_event(e)]
    detail = _pull_detail(waiting, pull_events)
    since = _pull_since(pod, pull_events)
    if now is not None and since is not None and (now - since).total_seconds() >= image_pull_timeout:
        return Problem(
            IMAGE_PULL_FAILED,
            f'The runner image "{image}" could not be pulled for {_duration(image_pull_timeout)} ({detail}).',
            fatal=True,
        )
    return Problem(
        IMAGE_PULL_BACKOFF,
        f'Cannot pull the runner image "{image}" ({detail}); the Evaluation '
        f"fails if this lasts {_duration(image_pull_timeout)}.",
    )


def terminated_problem(pod: objects.Pod) -> Problem | None:
    """A pod that ended for a reason of its own: OOMKilled, a start that failed, or its own deadline."""
    name = read.name(pod)
    for status in read.statuses(pod):
        for state in (status.get("state"), status.get("lastState")):
            terminated = (state or {}).get("terminated") or {}
            if terminated.get("reason") != OOM_KILLED:
                continue
            return _oom_problem(pod, str(status.get("name", "?")))
    started = pod_start.start_error(pod)
    if started:
        return Problem(*started, explains_failure=True)
    pod_status = pod.get("status") or {}
    if pod_status.get("reason") == DEADLINE_EXCEEDED:
        return Problem(
            DEADLINE_EXCEEDED,
            f"Runner pod {name} ran past its deadline: {read.sentence(pod_status.get('message') or '')}.",
            explains_failure=True,
        )
    rejected = pod_start.rejected(pod)
    return Problem(*rejected, explains_failure=True) if rejected else None


def _oom_problem(pod: objects.Pod, container: str) -> Problem:
    name = read.name(pod)
    limit = read.memory_limit(pod, container)
    if limit:
        message = (
            f"The runner (container {container} of pod {name}) was OOMKilled: it needed more than its "
            f"memory limit of {limit}; raise spec.resources.memory."
        )
    else:
        message = (
            f"The runner (container {container} of pod {name}) was OOMKilled with no memory limit set "
            "(its node ran out of memory); set spec.resources.memory."
        )
    return Problem(OOM_KILLED, message, explains_failure=True)


# --- the Job ---------------------------------------------------------------------------


def failed_create(job: objects.Job, pods: Sequence[objects.Pod], events: Sequence[objects.Event]) -> Problem | None:
    """The Job controller could not create a pod (ResourceQuota, LimitRange, admission).

    Reported while the Job has fewer live pods than it wants and no pod was created since
    the latest FailedCreate (Events outlive the problem by an hour).
    """
    name = read.name(job)
    spec = job.get("spec") or {}
    if spec.get("suspend"):
        return None
    live = [p for p in pods if not read.pod_finished(p)]
    if len(live) >= int(spec.get("parallelism") or 1):
        return None
    failures = [e for e in read.about(events, "Job", name) if e.get("reason") == FAILED_CREATE]
    if not failures:
        return None
    floor = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    latest = max(failures, key=lambda e: read.event_time(e, first=False) or floor)
    created = [read.parse_time((p.get("metadata") or {}).get("creationTimestamp")) for p in pods]
    newest_pod = max((t for t in created if t), default=None)
    latest_time = read.event_time(latest, first=False)
    if newest_pod and latest_time and newest_pod > latest_time:
        return None
    said = read.sentence(str(latest.get("message") or "").removeprefix("Error creating: "))
    return Problem(FAILED_CREATE, f"Job {name} cannot create runner pods: {said}.")


JOB_EVENTS_GRACE = 15.0
"""Seconds a new Job may lack pods before its Events are read: the Job controller makes them
within a sync; reading sooner costs every new run a request that finds nothing (a pod the
controller cannot create still shows on the next look, the pending sweep's). Not less: under
a burst the controller falls seconds behind, and at 5 s over half of 300 new Jobs listed
Events (a filtered list of every Event in the namespace) while later Jobs waited on the
same API server."""


def events_to_read(
    job: objects.Job, pods: Sequence[objects.Pod], *, now: datetime.datetime | None = None
) -> list[tuple[str, str]]:
    """(kind, name) of the objects whose Events `diagnose` needs: only what the statuses cannot tell."""
    wanted: list[tuple[str, str]] = []
    spec = job.get("spec") or {}
    live = [p for p in pods if not read.pod_finished(p)]
    if (
        not spec.get("suspend")
        and len(live) < int(spec.get("parallelism") or 1)
        and not (now is not None and read.age(job, now) < JOB_EVENTS_GRACE)
    ):
        wanted.append(("Job", read.name(job)))
    for pod in live:
        pulling = any(
            ((s.get("state") or {}).get("waiting") or {}).get("reason") in _PULL_WAITING for s in read.statuses(pod)
        )
        young = now is not None and read.age(pod, now) < pod_start.CREATING_EVENTS_GRACE
        if pulling or (pod_start.stuck_creating(pod) and not young):
            wanted.append(("Pod", read.name(pod)))
            break  # one pod's history is enough to time the pull, or to tell why volumes do not mount
    return wanted


def _job_failed(job: objects.Job) -> bool:
    return any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def diagnose(
    job: objects.Job,
    pods: Sequence[objects.Pod],
    events: Sequence[objects.Event] = (),
    *,
    now: datetime.datetime,
    image_pull_timeout: float = DEFAULT_IMAGE_PULL_TIMEOUT,
) -> Problem | None:
    """The one problem to show for this run, or None when nothing is wrong that we can tell.

    A failed Job is explained first by how its runners ended (OOMKilled); a live one by what
    keeps its live pods from running, then by pods it cannot create, then, between retries,
    by how the last runner ended.
    """
    ordered = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""), reverse=True)
    ended = [p for p in (terminated_problem(p) for p in ordered) if p]
    waiting = [
        p for p in (waiting_problem(p, events, now=now, image_pull_timeout=image_pull_timeout) for p in ordered) if p
    ]
    waiting.sort(key=lambda p: not p.fatal)  # stable: a fatal problem first, else the newest pod's
    if _job_failed(job):
        return next(iter(ended or waiting), None)
    if waiting:
        return waiting[0]
    created = failed_create(job, pods, events)
    if created:
        return created
    if ended and not any(not read.pod_finished(p) for p in pods):
        return ended[0]
    return None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds % 60 == 0 and seconds >= 60:
        minutes = seconds // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds} s"
