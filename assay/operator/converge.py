"""Carrying a plan out, and bringing back a run whose Job went missing.

`carry_out` is the one place children are created and superseded ones deleted: the
create/resume/update handler calls it after validation, and so does `recreate` when the
current run's Job is gone while the Evaluation is unfinished (deleted by hand, or an
event the operator missed). A Job's deletion is seen twice over: its DELETED watch event,
and the periodic sweep of unfinished Evaluations, which finds what a lost event hid.
The plan is the same pure `reconcile.plan` either way, so a Job re-created by both paths
at once is created once (deterministic names; 409 means done).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from typing import Any, Callable, Mapping

from assay import spec as spec_module
from assay.operator import builders, conditions, kube, policy, reconcile
from assay.operator.periodic import PeriodicSweep

logger = logging.getLogger(__name__)
RUNNER_JOB_SELECTOR = f"app.kubernetes.io/managed-by={builders.MANAGED_BY}"

Emit = Callable[..., None]
"""(obj, type=, reason=, message=) → posts an Event."""
Written = Callable[[Mapping[str, Any]], None]


def carry_out(evaluation: Mapping[str, Any], spec: spec_module.Evaluation, *, now: datetime.datetime,
              default_image: str | None, emit: Emit, task_sources: list[dict[str, Any]] | None = None,
              written: Written = lambda _: None) -> reconcile.Plan:  # fmt: skip
    """Plan from what exists and do it; `written` gets the Evaluation as its status write returned it."""
    meta = evaluation["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    jobs: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    # An Evaluation that never named a Job has none: status.jobName is written before its
    # first child is created. A new Evaluation so costs no lists.
    if (evaluation.get("status") or {}).get("jobName"):
        jobs = kube.list_children("Job", "batch/v1", namespace=namespace, evaluation=name, owner_uid=meta["uid"])
        services = kube.list_children("Service", "v1", namespace=namespace, evaluation=name, owner_uid=meta["uid"])
    steps = reconcile.plan(evaluation, spec, jobs=jobs, services=services, now=now, default_image=default_image)
    if steps.new_run:
        # Where its tasks came from, as checked for this run (None clears an earlier run's).
        steps = dataclasses.replace(steps, status={**steps.status, "taskSources": task_sources or None})
    if steps.status:
        # Written before the Job exists, not through kopf's patch after the handler:
        # `mirror_job` ignores Jobs that are not status.jobName, and a Job's first
        # events (a suspended Job's only ones) come within milliseconds of its creation.
        written(kube.patch_evaluation_status(namespace=namespace, name=name, status=steps.status))
    for manifest in steps.create:
        if kube.create(manifest) and manifest["kind"] == "Job":
            emit(evaluation, type="Normal", reason="JobCreated", message=f"Created Job {manifest['metadata']['name']}.")
    for job in steps.delete_jobs:
        kube.delete("Job", "batch/v1", namespace=namespace, name=job)
        emit(evaluation, type="Normal", reason="JobReplaced", message=f"Deleted Job {job} of a superseded run.")
    for service in steps.delete_services:
        kube.delete("Service", "v1", namespace=namespace, name=service)
    if steps.suspend_job:
        job, suspend = steps.suspend_job
        kube.patch_job_suspend(namespace=namespace, name=job, suspend=suspend)
        emit(evaluation, type="Normal", reason="Suspended" if suspend else "Resumed", message=f"Job {job}.")
    return steps


def awaits_job(evaluation: Mapping[str, Any], job_name: str | None = None) -> bool:
    """Whether the Evaluation's current run (its `status.jobName`, or `job_name`) still needs its Job."""
    meta = evaluation.get("metadata") or {}
    status = evaluation.get("status") or {}
    current = status.get("jobName")
    if not current or (job_name is not None and current != job_name) or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") in conditions.TERMINAL_PHASES:
        return False
    accepted = conditions.get_condition(status, conditions.ACCEPTED)
    return not (accepted and accepted.get("status") == "False")


def recreate(evaluation: Mapping[str, Any], *, admin: policy.AdminPolicy, default_image: str | None, emit: Emit,
             now: datetime.datetime, written: Written = lambda _: None) -> bool:  # fmt: skip
    """The current run's Job is gone while the run is unfinished: create it again. True if created."""
    meta = evaluation["metadata"]
    job_name = (evaluation.get("status") or {}).get("jobName")
    spec = spec_module.parse_spec(evaluation.get("spec") or {})
    # Accepted before, but the admin's policy may have changed since: it still holds.
    policy.check(spec, admin)
    spec = policy.enforce(spec, admin)
    if kube.get("Job", "batch/v1", namespace=meta["namespace"], name=str(job_name)) is not None:
        return False
    emit(evaluation, type="Warning", reason="JobLost",
         message=f"Job {job_name} was deleted before the run finished; creating it again.")  # fmt: skip
    steps = carry_out(evaluation, spec, now=now, default_image=default_image, emit=emit, written=written)
    return any(m["kind"] == "Job" for m in steps.create)


LOST_JOB_SWEEP_INTERVAL = 30.0
"""Seconds between looks for the Jobs of unfinished runs; nothing is read while none is unfinished."""
Key = tuple[str, str]


class UnfinishedRuns:
    """(namespace, name) → status.jobName of each Evaluation whose run is unfinished, kept from watch events.

    Each run remembers when it was first seen with its Job name: status.jobName is written
    just before the Job is created, and a sweep in between must not take the Job for lost.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._runs: dict[Key, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        job_name = str((body.get("status") or {}).get("jobName"))
        with self._lock:
            if deleted or not awaits_job(body):
                self._runs.pop(key, None)
            elif self._runs.get(key, ("", 0.0))[0] != job_name:
                self._runs[key] = (job_name, self._clock())

    def snapshot(self, *, min_age: float = 0.0) -> dict[Key, str]:
        """The runs seen with their current Job name at least `min_age` seconds ago."""
        now = self._clock()
        with self._lock:
            return {key: job for key, (job, since) in self._runs.items() if now - since >= min_age}


def lost_runs(runs: Mapping[Key, str], *, job_names: Callable[[str], set[str]]) -> list[Key]:
    """The runs whose Job is missing: one list of runner Jobs per namespace, not one read per run."""
    lost: list[Key] = []
    for namespace in sorted({ns for ns, _ in runs}):
        present = job_names(namespace)
        lost += [key for key, job in sorted(runs.items()) if key[0] == namespace and job not in present]
    return lost


def runner_job_names(namespace: str) -> set[str]:
    jobs = kube.list_objects("Job", "batch/v1", namespace=namespace, label_selector=RUNNER_JOB_SELECTOR)
    return {str(j["metadata"]["name"]) for j in jobs if not j["metadata"].get("deletionTimestamp")}


class LostJobSweeper(PeriodicSweep):
    """Every `interval` seconds, re-creates the Job of each unfinished run that lost it.

    The DELETED watch event does this at once; the sweep catches what an event missed (the
    operator down, a watch broken).
    """

    def __init__(self, *, runs: UnfinishedRuns, admin: policy.AdminPolicy, default_image: str | None,
                 on_error: Callable[[str], None], emit: Emit = kube.create_event,
                 interval: float = LOST_JOB_SWEEP_INTERVAL) -> None:  # fmt: skip
        super().__init__(interval=interval, name="assay-lost-job-sweeper")
        self.runs, self.admin, self.default_image, self.on_error = runs, admin, default_image, on_error
        self.emit = emit

    def sweep(self) -> None:
        runs = self.runs.snapshot(min_age=self.interval)
        if not runs:
            return
        for namespace, name in lost_runs(runs, job_names=runner_job_names):
            try:
                evaluation = kube.get_evaluation(namespace=namespace, name=name)
                if evaluation is not None and awaits_job(evaluation, runs[(namespace, name)]):
                    recreate(evaluation, admin=self.admin, default_image=self.default_image, emit=self.emit,
                             now=datetime.datetime.now(datetime.timezone.utc))  # fmt: skip
            except Exception as error:  # noqa: BLE001 - one Evaluation's trouble must not stop the sweep
                self.on_error("lost_job_sweep")
                logger.warning("Could not re-create the Job of Evaluation %s/%s: %s", namespace, name, error)
