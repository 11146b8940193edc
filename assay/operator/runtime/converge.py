"""Carrying a plan out, and bringing back a run whose Job went missing.

`carry_out` is the one place children are created and superseded ones deleted: the
create/resume/update handler calls it after validation, and so does `recreate` when the
current run's Job is gone while the Evaluation is unfinished (deleted by hand, or an
event the operator missed). A Job's deletion is seen twice over: its DELETED watch event,
and the periodic sweep of unfinished Evaluations, which finds what a lost event hid.
The plan is the same pure `reconcile.plan` either way, so a Job re-created by both paths
at once is created once (deterministic names; AlreadyExists of this Evaluation's own Job
means done). A child's name held by an object that is not this Evaluation's fails the run
as InvalidSpec and leaves that object as it is (`owned`).

A child the API server refuses for what it is (`refusals`: a pod label key that is no
label key, an admission policy's denial) fails the Evaluation as InvalidSpec with the API
server's words, once; a refusal that may pass (a quota, the operator's RBAC, an outage) is
noted in the status (`JobNotCreated`) and tried again, and the Job that never existed is
not reported lost when it finally is created.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from assay import spec as spec_module
from assay.errors import UserError
from assay.kube import api_errors
from assay.operator import objects
from assay.operator.admission import admit, policy
from assay.operator.build import baseline_view, builders, names
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions, job_status, progress_budget, reconcile
from assay.operator.kube import kube, refusals
from assay.operator.runtime import namespace_identity, observe, owned
from assay.operator.runtime.periodic import OnError, PeriodicSweep
from assay.operator.runtime.state import OperatorState

logger = logging.getLogger(__name__)
RUNNER_JOB_SELECTOR = f"app.kubernetes.io/managed-by={builders.MANAGED_BY}"

Emit = Callable[..., None]
"""(obj, type=, reason=, message=) → posts an Event."""
Written = Callable[[Mapping[str, Any]], None]
JOB_NOT_CREATED = "JobNotCreated"
"""status.reason while the current run's children could not be created yet (a quota, the
operator's RBAC, an API server error): its Job never existed, so it is not reported lost."""


def _children_selector(evaluation: str) -> str:
    """An Evaluation's children by label. A long name's label is shortened, so two Evaluations
    could share one: `kube.list_children` keeps those its ownerReference names."""
    return f"{builders.LABEL_EVALUATION}={names.label_value(evaluation)},{RUNNER_JOB_SELECTOR}"


def carry_out(
    evaluation: objects.Evaluation,
    spec: spec_module.Evaluation,
    *,
    now: datetime.datetime,
    runner: RunnerSettings,
    emit: Emit,
    task_sources: list[dict[str, Any]] | None = None,
    written: Written = lambda _: None,
    progress_interval: float | None = None,
) -> reconcile.Plan:
    """Plan from what exists and do it; `written` gets the Evaluation as its status write returned it.
    A new Job gets `progress_interval` (`progress_budget`; None: the runner's default) in its environment."""
    meta = evaluation["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    jobs, services = _existing_children(evaluation)
    steps = _planned(
        evaluation,
        spec,
        jobs=jobs,
        services=services,
        now=now,
        runner=runner,
        task_sources=task_sources,
        progress_interval=progress_interval,
    )
    if steps.status:
        # Written before the Job exists, not through kopf's patch after the handler:
        # `mirror_job` ignores Jobs that are not status.jobName, and a Job's first
        # events (a suspended Job's only ones) come within milliseconds of its creation.
        evaluation = kube.patch_evaluation_status(namespace=namespace, name=name, status=steps.status) or evaluation
        written(evaluation)
    for manifest in steps.create:
        try:
            if manifest["kind"] == "Job":
                # Its pods run as the namespace's runner identity: made once, then no request.
                namespace_identity.identities.ensure(namespace, pull_secrets=runner.pull_secrets)
            if owned.ensure(manifest, uid=meta["uid"], likely=not steps.new_run) and manifest["kind"] == "Job":
                job_created = f"Created Job {manifest['metadata']['name']}."
                emit(evaluation, type="Normal", reason="JobCreated", message=job_created)
        except owned.NotOwned as taken:
            reject(evaluation, str(taken), now=now, emit=emit, written=written)
            return dataclasses.replace(steps, refused=str(taken))
        except api_errors.ApiError as error:
            refused = _not_created(evaluation, manifest, error, now=now, emit=emit, written=written)
            if refused is None:
                raise  # tried again: by the decision's retries, and by the sweep of unfinished runs
            return dataclasses.replace(steps, refused=refused)
    _delete_superseded(steps, evaluation, emit=emit)
    if steps.suspend_job:
        job, suspend = steps.suspend_job
        kube.patch_job_suspend(namespace=namespace, name=job, suspend=suspend)
        emit(evaluation, type="Normal", reason="Suspended" if suspend else "Resumed", message=f"Job {job}.")
    return steps


def _existing_children(evaluation: objects.Evaluation) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Evaluation's Jobs and Services. One that never named a Job has none: status.jobName is
    written before its first child is created, so a new Evaluation costs no lists."""
    if not (evaluation.get("status") or {}).get("jobName"):
        return [], []
    meta = evaluation["metadata"]
    namespace, selector, owner = meta["namespace"], _children_selector(meta["name"]), meta["uid"]
    jobs = kube.list_children("Job", "batch/v1", namespace=namespace, label_selector=selector, owner_uid=owner)
    services = kube.list_children("Service", "v1", namespace=namespace, label_selector=selector, owner_uid=owner)
    return jobs, services


def _planned(
    evaluation: objects.Evaluation,
    spec: spec_module.Evaluation,
    *,
    jobs: list[dict[str, Any]],
    services: list[dict[str, Any]],
    now: datetime.datetime,
    runner: RunnerSettings,
    task_sources: list[dict[str, Any]] | None,
    progress_interval: float | None,
) -> reconcile.Plan:
    """The plan, with what a new run carries: the baseline as it is now, where its tasks came
    from, and the progress interval its Job is given."""
    steps = reconcile.plan(evaluation, spec, jobs=jobs, services=services, now=now, runner=runner)
    if not steps.new_run:
        return steps
    if spec.baseline is not None and spec.baseline.evaluation is not None:
        baseline = _baseline_view(evaluation["metadata"]["namespace"], spec.baseline.evaluation)
        steps = reconcile.plan(
            evaluation, spec, jobs=jobs, services=services, now=now, runner=runner, baseline=baseline
        )
    # Where its tasks came from, as checked for this run (None clears an earlier run's).
    steps = dataclasses.replace(steps, status={**steps.status, "taskSources": task_sources or None})
    if progress_interval is not None:
        steps = dataclasses.replace(steps, create=progress_budget.with_interval(steps.create, progress_interval))
    return steps


def _baseline_view(namespace: str, name: str) -> dict[str, Any] | None:
    """What the baseline Evaluation shows now, for a new run's Job (None: there is none). The
    runner may read no Evaluation: one GET here, for the new runs that name one only."""
    found = kube.get_evaluation(namespace=namespace, name=name)
    return baseline_view.view(found) if found is not None else None


def _delete_superseded(steps: reconcile.Plan, evaluation: objects.Evaluation, *, emit: Emit) -> None:
    """The children of superseded runs: each Job with its Service and NetworkPolicy. (A spec
    ConfigMap an older operator made for a run goes with its Evaluation: its ownerReference.)"""
    namespace = evaluation["metadata"]["namespace"]
    for job in steps.delete_jobs:
        kube.delete("Job", "batch/v1", namespace=namespace, name=job)
        emit(evaluation, type="Normal", reason="JobReplaced", message=f"Deleted Job {job} of a superseded run.")
    for service in steps.delete_services:
        kube.delete("Service", "v1", namespace=namespace, name=service)
    # After its Job: stopped in between, the next decision finds the Job and deletes the rest; a
    # running Job never loses its fence.
    for fence in steps.delete_network_policies:
        kube.delete("NetworkPolicy", "networking.k8s.io/v1", namespace=namespace, name=fence)


def reject(
    evaluation: objects.Evaluation,
    message: str,
    *,
    now: datetime.datetime,
    emit: Emit,
    written: Written = lambda _: None,
) -> bool:
    """Fail the Evaluation as InvalidSpec with `message`, and one Warning Event; False if its status says so already."""
    meta = evaluation["metadata"]
    status = reconcile.rejection(evaluation, message, now=now)
    if not status:
        return False
    written(kube.patch_evaluation_status(namespace=meta["namespace"], name=meta["name"], status=status))
    emit(evaluation, type="Warning", reason="InvalidSpec", message=message)
    return True


def _not_created(
    evaluation: objects.Evaluation,
    manifest: Mapping[str, Any],
    error: api_errors.ApiError,
    *,
    now: datetime.datetime,
    emit: Emit,
    written: Written,
) -> str | None:
    """A child the API server did not create. A final refusal fails the Evaluation: its message
    is returned. Anything else is noted in the status, to be tried again: None."""
    kind, child = manifest["kind"], manifest["metadata"]["name"]
    meta = evaluation["metadata"]
    if isinstance(error, api_errors.Refused):
        fix = (
            "change the spec field it comes from (the runner pods' labels, annotations, tolerations, affinity and "
            "nodeSelector are spec.podTemplate's)"
        )
        message = f"The API server refused the runner's {kind} {child}: {error.said.rstrip('.')}; {fix}."
        reject(evaluation, message, now=now, emit=emit, written=written)
        return message
    said = refusals.transient_note(error)
    note = {
        "reason": JOB_NOT_CREATED,
        "message": f"{kind} {child} could not be created yet ({said}); the operator tries again.",
    }
    try:
        written(kube.patch_evaluation_status(namespace=meta["namespace"], name=meta["name"], status=note))
    except Exception as failed:
        logger.debug("Could not note %s %s not created in the status: %s", kind, child, failed)
    return None


def awaits_job(evaluation: objects.Evaluation, job_name: str | None = None) -> bool:
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


def recreate(
    evaluation: objects.Evaluation,
    *,
    admin: policy.AdminPolicy,
    runner: RunnerSettings,
    emit: Emit,
    now: datetime.datetime,
    written: Written = lambda _: None,
) -> bool:
    """The current run's Job is gone while the run is unfinished: create it again. True if created.

    A spec the admin's policy (or a Secret's consent) no longer allows fails the Evaluation,
    as it would have failed a new run, instead of being tried again for ever."""
    meta = evaluation["metadata"]
    status = evaluation.get("status") or {}
    job_name = status.get("jobName")
    try:
        # Accepted before, but the admin's policy may have changed since: it still holds.
        spec = admit.admit(
            evaluation.get("spec") or {},
            namespace=meta["namespace"],
            admin=admin,
            secret_metadata=kube.secret_metadata(meta["namespace"]),
            config_map=None,
        ).spec
    except UserError as error:
        reject(evaluation, str(error), now=now, emit=emit, written=written)
        return False
    if kube.get("Job", "batch/v1", namespace=meta["namespace"], name=str(job_name)) is not None:
        return False
    if status.get("reason") != JOB_NOT_CREATED:  # a Job that never existed was not lost
        emit(
            evaluation,
            type="Warning",
            reason="JobLost",
            message=f"Job {job_name} was deleted before the run finished; creating it again.",
        )
    steps = carry_out(evaluation, spec, now=now, runner=runner, emit=emit, written=written)
    return steps.refused is None and any(m["kind"] == "Job" for m in steps.create)


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

    def observe(self, body: objects.Evaluation, *, deleted: bool = False) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        job_name = str((body.get("status") or {}).get("jobName"))
        with self._lock:
            if deleted or not awaits_job(body):
                self._runs.pop(key, None)
            elif self._runs.get(key, ("", 0.0))[0] != job_name:
                self._runs[key] = (job_name, self._clock())

    def __len__(self) -> int:
        """The runs in flight (their Jobs made or about to be, not ended)."""
        with self._lock:
            return len(self._runs)

    def snapshot(self, *, min_age: float = 0.0) -> dict[Key, str]:
        """The runs seen with their current Job name at least `min_age` seconds ago."""
        now = self._clock()
        with self._lock:
            return {key: job for key, (job, since) in self._runs.items() if now - since >= min_age}


def runner_jobs(namespace: str) -> dict[str, objects.Job]:
    """The live runner Jobs of a namespace by name: one list for every run there, not one read per run."""
    jobs = cast(
        list[objects.Job], kube.list_objects("Job", "batch/v1", namespace=namespace, label_selector=RUNNER_JOB_SELECTOR)
    )
    return {str(j["metadata"]["name"]): j for j in jobs if not j["metadata"].get("deletionTimestamp")}


class LostJobSweeper(PeriodicSweep):
    """Every `interval` seconds, one look at each unfinished run as the API server has it now.

    A run whose Job is gone gets it again (`recreate`); a Running run, and any run whose
    Job has ended, is mirrored from its Job as listed (`observe.observe_run`), so a Job's
    end that no watch event brought still reaches the Evaluation. Other Pending runs are the
    pending sweep's (`observe.PendingSweeper`, more often). The DELETED watch event
    re-creates a Job at once; this catches what an event missed (the operator down, a watch
    broken, the API server answering errors for a while). A pass that fails, or one run's
    look that does, is counted and logged by `periodic`; the next pass tries again.
    """

    def __init__(
        self,
        *,
        runs: UnfinishedRuns,
        admin: policy.AdminPolicy,
        runner: RunnerSettings,
        on_error: OnError,
        emit: Emit = kube.create_event,
        interval: float = LOST_JOB_SWEEP_INTERVAL,
        state: OperatorState | None = None,
    ) -> None:
        self.state = state if state is not None else OperatorState()
        """The operator's state (`observe`: the watches' objects, metrics); a bare one in tests."""
        super().__init__(
            interval=interval,
            name="assay-lost-job-sweeper",
            label="resync",
            on_error=on_error,
            stop=self.state.stopping,
        )
        self.runs, self.admin, self.runner, self.emit = runs, admin, runner, emit

    def sweep(self) -> None:
        runs = self.runs.snapshot(min_age=self.interval)
        for namespace in sorted({ns for ns, _ in runs}):
            if self.stopping:
                return
            with self.guarded(f"the runner Jobs of namespace {namespace}"):
                jobs = runner_jobs(namespace)
                for key in sorted(k for k in runs if k[0] == namespace):
                    with self.guarded(f"Evaluation {key[0]}/{key[1]}"):
                        self._look(key, runs[key], jobs.get(runs[key]))

    def _look(self, key: Key, job_name: str, job: objects.Job | None) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        if job is None:
            found = kube.get_evaluation(namespace=key[0], name=key[1])
            if found is not None and awaits_job(found, job_name):
                recreate(found, admin=self.admin, runner=self.runner, emit=self.emit, now=now)
            return
        state = job_status.job_state(job)
        ended = state.phase in conditions.TERMINAL_PHASES
        if ended and _seconds_since(state.completion_time, now) < self.interval:
            return  # just ended: its watch event is `mirror_job`'s, and both would post the end's Event
        # An ended Job is read against the Evaluation as it is now, as `mirror_job` does.
        evaluation = observe.evaluation_of(job, state=self.state, fresh=ended)
        if evaluation is not None and (ended or (evaluation.get("status") or {}).get("phase") == conditions.RUNNING):
            observe.observe_run(evaluation, state=self.state, emit=self.emit, job=job, now=now)


def _seconds_since(timestamp: str | None, now: datetime.datetime) -> float:
    """Seconds from a Kubernetes timestamp to `now`; infinite when there is none to read."""
    try:
        return (now - datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))).total_seconds()
    except (TypeError, ValueError):
        return float("inf")
