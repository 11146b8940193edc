"""Mirroring a run into its Evaluation's status: what the Job, pod and sweep handlers share.

`observe_run` takes the run's Job and pods from what the watches showed (`watched`), reads
Events only where no status can tell (a pull's history, a Job that cannot create pods),
lets `diagnosis` name the problem and `conditions` write the status, and posts an Event
when the run starts, finishes or meets a new problem. `PendingSweeper` looks at every
Pending run again on a clock: a pod the Job controller cannot create changes no object,
and a pull timeout needs a clock.
"""

from __future__ import annotations

import collections.abc
import datetime
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from assay.operator import objects
from assay.operator.build import builders
from assay.operator.decide import conditions, diagnosis, job_status, large_specs, outcome, peer_failures
from assay.operator.kube import kube
from assay.operator.runtime import namespace_identity
from assay.operator.runtime.periodic import PeriodicSweep
from assay.operator.runtime.state import OperatorState
from assay.operator.runtime.watched import WatchedObjects

logger = logging.getLogger(__name__)

PENDING_SWEEP_INTERVAL = 20.0
Emit = Callable[..., None]
"""(obj, type=, reason=, message=) → posts an Event."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def plain(value: Any) -> Any:
    """kopf's body view → the plain dicts it wraps, without `metadata.managedFields` (server-side
    apply's bookkeeping, never read here, often half of a body).

    Not copied: the top level and the metadata are new dicts, everything below is shared
    with the watch event kopf decoded for this one event and never changes. Every watch
    event of every runner pod, Job and Evaluation goes through here; a deep copy was a
    tenth of the operator's CPU under a burst. Bodies are read, never changed, by the
    operator (see `watched`)."""
    if not isinstance(value, collections.abc.Mapping):
        return value
    out = {key: value[key] for key in value}
    meta = out.get("metadata")
    if isinstance(meta, collections.abc.Mapping):
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def emitter(state: OperatorState) -> Emit:
    """Posts an Event: through the operator's poster (`events`) once it runs, else at once."""
    return state.events.post if state.events is not None else kube.create_event


def seen(state: OperatorState, kind: str, body: Mapping[str, Any], *, deleted: bool = False) -> None:
    watched = state.watched
    if watched is not None:
        kept: WatchedObjects[Any] = getattr(watched, kind)
        if deleted:
            kept.forget(body)
        else:  # an Evaluation's large spec fields are not kept (`large_specs`)
            kept.observe(large_specs.kept(plain(body)) if kind == "evaluations" else plain(body))


def latest(state: OperatorState, kind: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
    """`body` as a plain dict, copied once per event: the copy its index handler just kept when
    that is this version (read it, do not change it), else a new copy. The handlers cast it
    to its kind (`objects`): kopf's bodies are where the operator's typed objects begin."""
    watched = state.watched
    meta = body.get("metadata") or {}
    if watched is not None:
        bodies: WatchedObjects[Mapping[str, Any]] = getattr(watched, kind)
        kept = bodies.get(str(meta.get("namespace")), str(meta.get("name")))
        if kept is not None and (kept.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
            return kept
    copied: Mapping[str, Any] = plain(body)
    return copied


def evaluation_of(
    child: objects.Job | objects.Pod, *, state: OperatorState, fresh: bool = False
) -> objects.Evaluation | None:
    """The Evaluation a runner Job or pod belongs to (by its label), if it still exists.

    As the watch last showed it, when that is its run of this child; read from the API when
    `fresh` is asked for or the watch shows another run (a status write not seen yet)."""
    name = builders.evaluation_name(child)
    if not name:
        return None
    namespace = child["metadata"]["namespace"]
    meta = child["metadata"]
    job_name = meta["name"] if child.get("kind") == "Job" else (meta.get("labels") or {}).get(builders.LABEL_JOB)
    watched = state.watched
    if watched is not None and not fresh:
        cached = watched.evaluations.get(namespace, name)
        if cached is not None and (cached.get("status") or {}).get("jobName") == job_name:
            return cached
    found = kube.get_evaluation(namespace=namespace, name=name)
    if found is not None:
        seen(state, "evaluations", found)
    return found


def observe_run(
    evaluation: objects.Evaluation,
    *,
    state: OperatorState,
    emit: Emit,
    job: objects.Job | None = None,
    now: datetime.datetime | None = None,
) -> Mapping[str, Any]:
    """Mirror the current run (its Job, pods and their Events) into the Evaluation's status.

    Returns the status patch it wrote ({} when nothing changed). Reads the Job (unless given)
    and its pods from the watches (the API only where the operator keeps none: unit tests),
    and Events of at most the Job and one pod.
    """
    meta = evaluation["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    status = evaluation.get("status") or {}
    job_name = status.get("jobName")
    terminal = status.get("phase") in conditions.TERMINAL_PHASES
    # Failed by the operator itself: its Job must end (again, if ending it failed before).
    ending = terminal and status.get("reason") in diagnosis.FATAL_REASONS
    if not job_name or (terminal and job is None and not ending):
        return {}
    accepted = conditions.get_condition(status, conditions.ACCEPTED)
    if accepted and accepted.get("status") == "False":
        return {}  # the current spec was rejected; an earlier run's Job must not overwrite that
    if job is None:
        job = _watched_job(state, namespace=namespace, job_name=job_name)
        if job is None:
            return {}
    if job["metadata"]["name"] != job_name or _rerun_token(job) != status.get("rerunToken"):
        return {}  # a superseded run being deleted (another spec, or a token whose name hash collides)
    job_phase = job_status.job_state(job).phase
    if ending:
        if job_phase not in conditions.TERMINAL_PHASES:
            kube.end_job(namespace=namespace, name=job_name)
        return {}
    now = now or _now()
    job_ready = int((job.get("status") or {}).get("ready") or 0)
    all_ready = job_phase == conditions.RUNNING and job_ready >= int((job.get("spec") or {}).get("parallelism") or 1)
    problem = None
    if not terminal and job_phase != conditions.SUCCEEDED:
        problem = _problem(job, namespace=namespace, state=state, now=now, all_ready=all_ready)
    if (judged := _with_the_runners_last_write(evaluation, status, job_phase)) is None:
        return {}
    generation = int(judged.get("observedGeneration") or meta.get("generation", 1))
    patch = job_status.from_job(
        judged, job, generation=generation, now=now, problem=problem, spec=evaluation.get("spec")
    )
    if not patch:
        return {}
    seen(state, "evaluations", kube.patch_evaluation_status(namespace=namespace, name=name, status=patch))
    _after_patch(
        evaluation, judged, patch, state=state, emit=emit, job_name=job_name, job_phase=job_phase, problem=problem
    )
    return patch


def _watched_job(state: OperatorState, *, namespace: str, job_name: str) -> objects.Job | None:
    """The run's Job as the watch has it, else (no watches: unit tests) from the API."""
    watched = state.watched
    job = watched.jobs.get(namespace, job_name) if watched is not None else None
    return job or kube.get_job(namespace=namespace, name=job_name)


def _after_patch(
    evaluation: objects.Evaluation,
    judged: objects.EvaluationStatus,
    patch: Mapping[str, Any],
    *,
    state: OperatorState,
    emit: Emit,
    job_name: str,
    job_phase: str,
    problem: diagnosis.Problem | None,
) -> None:
    """What a written patch sets off: a run the operator failed has its Job ended, a finished run
    is counted, and the change worth telling (the end, a problem, pods running) becomes an Event."""
    namespace = evaluation["metadata"]["namespace"]
    finished = conditions.finished_now(judged, patch)
    if finished == conditions.FAILED and job_phase not in conditions.TERMINAL_PHASES:
        # The operator failed the run (a fatal problem): end its Job, or its pod would wait forever.
        kube.end_job(namespace=namespace, name=job_name)
    if finished:
        state.metrics.record_completion(namespace, finished.lower())
        message = patch.get("message") or judged.get("message") or f"Job {job_name} finished."
        emit(
            evaluation,
            type="Normal" if finished == conditions.SUCCEEDED else "Warning",
            reason=finished,
            message=message,
        )
    elif problem is not None and patch.get("reason") == problem.reason:
        emit(evaluation, type="Warning", reason=problem.reason, message=problem.message)
    elif patch.get("phase") == conditions.RUNNING:
        emit(evaluation, type="Normal", reason="Running", message=patch.get("message") or "Runner pods are running.")


def _with_the_runners_last_write(
    evaluation: objects.Evaluation, status: objects.EvaluationStatus, job_phase: str
) -> objects.EvaluationStatus | None:
    """The status to judge a Complete Job by. Without scores it is read again: a Complete Job
    without them is a failed run, and the watch may not have shown the runner's last write
    yet. None when the Evaluation is gone or runs another Job by now."""
    if (
        job_phase != conditions.SUCCEEDED
        or outcome.results_recorded(status)
        or status.get("phase") in conditions.TERMINAL_PHASES
    ):
        return status
    meta = evaluation["metadata"]
    fresh = kube.get_evaluation(namespace=meta["namespace"], name=meta["name"])
    fresh_status: objects.EvaluationStatus = (fresh or {}).get("status") or {}
    return fresh_status if fresh_status.get("jobName") == status.get("jobName") else None


def _problem(
    job: objects.Job, *, namespace: str, state: OperatorState, now: datetime.datetime, all_ready: bool
) -> diagnosis.Problem | None:
    """What keeps an unfinished run from going on: ranks stopping for a peer past the admin's
    bound, else (while a pod is not ready) its pods as watched, and Events where needed."""
    job_name = job["metadata"]["name"]
    watched = state.watched
    if watched is None and all_ready:
        return None  # without the watches, a healthy run's pods would cost a list on every look
    pods = (
        watched.pods.in_group(namespace, job_name)
        if watched is not None
        else kube.list_pods(namespace=namespace, label_selector=f"{builders.LABEL_JOB}={job_name}")
    )
    bound = peer_failures.exceeded(job, pods, max_retries=state.policy.placement.max_peer_failure_retries)
    if bound is not None or all_ready:
        return bound
    events: list[objects.Event] = []
    for kind, object_name in diagnosis.events_to_read(job, pods, now=now):
        events += kube.list_events(namespace=namespace, kind=kind, name=object_name)
    problem = diagnosis.diagnose(job, pods, events, now=now, image_pull_timeout=state.image_pull_timeout)
    if problem is not None and problem.reason == diagnosis.FAILED_CREATE:
        namespace_identity.restore_if_missing(namespace, problem.message)  # its account deleted by hand
    return problem


def _rerun_token(job: objects.Job) -> str | None:
    """The rerun token a Job was made for (None for a Job of no re-run)."""
    return ((job.get("metadata") or {}).get("annotations") or {}).get(builders.ANNOTATION_RERUN)


class PendingEvaluations:
    """(namespace, name) of the Evaluations last seen Pending, kept from their watch events."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def observe(self, body: objects.Evaluation, *, deleted: bool = False) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        status = body.get("status") or {}
        # A suspended run (or one Kueue holds) waits on purpose: nothing to look for.
        pending = not deleted and status.get("phase") == conditions.PENDING and status.get("reason") != "Suspended"
        with self._lock:
            (self._keys.add if pending else self._keys.discard)(key)

    def snapshot(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._keys)


class PendingSweeper(PeriodicSweep):
    """Observes every Pending Evaluation's run again every `interval` seconds, until the operator stops."""

    def __init__(self, state: OperatorState, *, interval: float = PENDING_SWEEP_INTERVAL) -> None:
        super().__init__(
            interval=interval,
            name="assay-pending-sweeper",
            label="pending",
            on_error=state.metrics.record_sweep_error,
            stop=state.stopping,
        )
        self.state = state

    def sweep(self) -> None:
        pending = self.state.pending.snapshot() if self.state.pending is not None else []
        for namespace, name in pending:
            if self.stopping:
                return
            with self.guarded(f"Evaluation {namespace}/{name}"):  # one Evaluation's trouble does not stop the pass
                watched = self.state.watched
                evaluation = watched.evaluations.get(namespace, name) if watched is not None else None
                evaluation = evaluation or kube.get_evaluation(namespace=namespace, name=name)
                if evaluation is not None:
                    observe_run(evaluation, state=self.state, emit=emitter(self.state))
