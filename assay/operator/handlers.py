"""kopf handlers: the operator's reactions, each a thin shell around a pure function.

- Any Evaluation event → its Prometheus gauges follow its status (deletion drops them), and
  when its run needs deciding (`trigger`: new, spec changed, `evaluations.assay.dev/rerun`
  bumped, or unfinished when first seen after a start) → `decide_run`: parse, check the
  admin's policy (`policy`), validate, `reconcile.plan`, write status, then carry the plan
  out. Idempotent: a retry or a restart re-plans from what exists and creates nothing twice.
- A runner Job or runner pod changed → `observe.observe_run` takes the Job and its pods
  from what the watches showed (`watched`), reads Events where no status can tell,
  `diagnosis.diagnose` names what keeps the run from going on, and `job_status.from_job`
  mirrors both into the Evaluation's phase, reason and conditions; a new problem posts a
  Warning Event, a finished run an Event and a count in the completion counter. A fatal
  problem (InvalidImageName, a pull failing past the timeout) fails the Evaluation and ends
  its Job.
- Every `observe.PENDING_SWEEP_INTERVAL` seconds, Pending Evaluations are observed again: a
  pod the Job controller cannot create (quota) changes no Job or pod, and a pull timeout
  needs a clock.

Handlers that call the API are sync on purpose: the operator's client (`kube`) is
synchronous and kopf runs sync handlers in its thread pool. Those that only keep memory (the index
handlers, the metrics) are async and run in kopf's event loop, saving a thread hop on
every watch event. No kopf create/update/resume handler is registered: those would make
kopf store its progress and a copy of each spec in annotations (see `trigger`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import kopf

from assay import spec as spec_module
from assay.errors import UserError
from assay.kube import api_errors
from assay.operator import kopf_settings, objects
from assay.operator.admission import admit
from assay.operator.build import builders
from assay.operator.decide import conditions, diagnosis, job_status, large_specs, progress_budget, reconcile, trigger
from assay.operator.kube import api_client, kube
from assay.operator.runtime import converge, decision_faults, decisions, events, observe
from assay.operator.runtime.metrics import EvaluationMetrics
from assay.operator.runtime.state import OperatorState
from assay.operator.runtime.watched import Watched

logger = logging.getLogger(__name__)

EVALUATIONS = (spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL)
RUNNER_JOBS = {"app.kubernetes.io/managed-by": builders.MANAGED_BY}
RUNNER_PODS = RUNNER_JOBS
MIRROR_WORKERS = 4
"""Threads mirroring runner Jobs and pods into status: a pool apart from the deciding one
(as controller-runtime gives each controller its own workers), so a storm of Job events
(hundreds of runs ending at once, each a fresh read, a status write and an Event) never
holds back the creation of new runs, nor a burst of new runs the mirroring of old ones."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def state_of(memo: kopf.Memo) -> OperatorState:
    """The operator's state `main` put in kopf's memo; a bare one, kept there, when kopf runs
    these handlers without `main`."""
    state = getattr(memo, "state", None)
    if not isinstance(state, OperatorState):
        state = memo.state = OperatorState()
    return state


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's watches as the operator's own requests: the same credentials, read again at each login."""
    return kopf_settings.connection_info(api_client.client().session.credentials)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    kopf_settings.tune(settings)
    given = state_of(memo)
    watched = Watched(job_label=builders.LABEL_JOB)
    state: OperatorState  # made below; the decisions read it when they run
    run_decisions = decisions.RunDecisions(
        decide=lambda evaluation: _timed_decision(evaluation, state),
        on_error=_decision_failed(given.metrics),
        on_fault=lambda evaluation, error: decision_faults.record(evaluation, error, state=state),
        transient=decision_faults.transient,
        latest=lambda key: watched.evaluations.get(*key),
        executor=settings.execution.executor,
    )
    given.metrics.controller.watch_queue(run_decisions.depth)
    api_client.load_config()
    mirror = concurrent.futures.ThreadPoolExecutor(MIRROR_WORKERS, thread_name_prefix="assay-mirror")
    unfinished = converge.UnfinishedRuns()
    state = memo.state = dataclasses.replace(
        given,
        watched=watched,
        executor=settings.execution.executor,
        mirror_executor=mirror,
        decisions=run_decisions,
        pending=observe.PendingEvaluations(),
        events=events.EventPoster().start(),
        unfinished=unfinished,
    )
    observe.PendingSweeper(state).start()
    converge.LostJobSweeper(
        runs=unfinished,
        admin=state.policy,
        runner=state.runner,
        emit=observe.emitter(state),
        on_error=state.metrics.record_sweep_error,
        state=state,
    ).start()


@kopf.on.cleanup()
def stop_sweeper(memo: kopf.Memo, **_: Any) -> None:
    state = state_of(memo)
    state.stopping.set()  # the sweeps end
    if state.mirror_executor is not None:
        state.mirror_executor.shutdown(wait=False, cancel_futures=True)
    if state.events is not None and not state.events.close(timeout=5.0):
        logger.warning("Some Events were not posted before the operator stopped.")


@kopf.on.probe(id="evaluations")
def evaluations_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness/readiness: answers once handlers run; reports Evaluations with metrics."""
    return state_of(memo).metrics.observed()


# Index handlers, for what they make kopf do: run them on every listed object before any
# handler starts, and on each later event before that event's handlers. They keep the
# newest bodies (`watched`); kopf's own index stays empty (None is never indexed).
@kopf.index(*EVALUATIONS)
async def evaluations_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(state_of(memo), "evaluations", body)


@kopf.index("batch", "v1", "jobs", labels=RUNNER_JOBS)
async def runner_jobs_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(state_of(memo), "jobs", body)


@kopf.index("", "v1", "pods", labels=RUNNER_PODS)
async def runner_pods_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(state_of(memo), "pods", body)


def _status_written(state: OperatorState) -> Callable[[Mapping[str, Any]], None]:
    """Keeps the Evaluation a status write returned, so the next handler does not read the one from before."""
    return lambda evaluation: observe.seen(state, "evaluations", evaluation)


def decide_run(evaluation: objects.Evaluation, *, state: OperatorState) -> None:
    """Decide an Evaluation's run and carry the decision out (in a handler thread; see `decisions`).

    Parse, check the admin's policy, validate, plan from what exists, write status, create
    the children. Idempotent: a retry or a restart re-plans and creates nothing twice."""
    now = _now()
    admin = state.policy
    meta = evaluation["metadata"]
    whole = large_specs.whole(
        evaluation, read=lambda: kube.get_evaluation(namespace=meta["namespace"], name=meta["name"])
    )
    if whole is None:
        return  # deleted meanwhile
    evaluation = whole
    log = _object_logger(meta)
    try:
        namespace = meta["namespace"]
        admitted = admit.admit(
            evaluation.get("spec") or {},
            namespace=namespace,
            admin=admin,
            secret_metadata=kube.secret_metadata(namespace),
            config_map=lambda config_map: kube.get("ConfigMap", "v1", namespace=namespace, name=config_map),
        )
        spec, sources = admitted.spec, admitted.task_sources
    except UserError as error:
        status = reconcile.rejection(evaluation, str(error), now=now)
        if status:
            _status_written(state)(
                kube.patch_evaluation_status(namespace=meta["namespace"], name=meta["name"], status=status)
            )
            observe.emitter(state)(evaluation, type="Warning", reason="InvalidSpec", message=str(error))
        log.info("Refused: %s", error)
        return
    steps = converge.carry_out(
        evaluation,
        spec,
        now=now,
        runner=state.runner,
        emit=observe.emitter(state),
        task_sources=sources,
        written=_status_written(state),
        progress_interval=progress_budget.interval_seconds(_runs_in_flight(state)),
    )
    log.info("Run decided: %s", steps.summary())


def _runs_in_flight(state: OperatorState) -> int:
    """The runs writing progress soon: those unfinished, and the decisions queued (a burst's rest)."""
    unfinished = len(state.unfinished) if state.unfinished is not None else 0
    return unfinished + (state.decisions.depth() if state.decisions is not None else 0)


def _timed_decision(evaluation: objects.Evaluation, state: OperatorState) -> None:
    with state.metrics.controller.timing("reconcile"):  # assay_reconcile_duration_seconds
        decide_run(evaluation, state=state)


def _object_logger(meta: Mapping[str, Any]) -> logging.LoggerAdapter[logging.Logger]:
    """A logger whose lines name the Evaluation, as kopf's per-object ones do (see main.EvaluationPrefixFormatter)."""
    return logging.LoggerAdapter(logger, {"k8s_ref": {"namespace": meta.get("namespace"), "name": meta.get("name")}})


def _decision_failed(metrics: EvaluationMetrics) -> Callable[[tuple[str, str], BaseException], None]:
    def report(key: tuple[str, str], error: BaseException) -> None:
        metrics.record_error("reconcile")
        if decision_faults.transient(error):  # the others are logged with their traceback as they are refused
            _object_logger({"namespace": key[0], "name": key[1]}).warning(
                "Deciding the run failed; trying again soon: %s",
                error,
                exc_info=not isinstance(error, api_errors.ApiError),
            )

    return report


@kopf.on.event("batch", "v1", "jobs", labels=RUNNER_JOBS)
async def mirror_job(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    state = state_of(memo)
    job = cast(objects.Job, observe.latest(state, "jobs", body))
    loop = asyncio.get_running_loop()
    if event.get("type") == "DELETED":
        observe.seen(state, "jobs", job, deleted=True)
        # Creating the Job again is a run's work: the deciding threads, not the mirroring ones.
        await loop.run_in_executor(state.executor, _job_deleted, job, state)
        return
    await loop.run_in_executor(state.mirror_executor, _mirror_job_run, job, state)


def _mirror_job_run(job: objects.Job, state: OperatorState) -> None:
    with _counting_errors(state, "mirror_job"):
        # A finished Job is read against the Evaluation as it is now: the runner's last
        # status write (its results and last word) must not be missing from the cache.
        evaluation = observe.evaluation_of(
            job, state=state, fresh=job_status.job_state(job).phase in conditions.TERMINAL_PHASES
        )
        if evaluation is not None:
            observe.observe_run(evaluation, job=job, state=state, emit=observe.emitter(state))


def _job_deleted(job: objects.Job, state: OperatorState) -> None:
    """A runner Job is gone: if it was an unfinished run's current Job (deleted by hand), create it again."""
    with _counting_errors(state, "recreate_job"):
        evaluation = observe.evaluation_of(job, state=state, fresh=True)
        if evaluation is not None and converge.awaits_job(evaluation, job["metadata"]["name"]):
            converge.recreate(
                evaluation,
                admin=state.policy,
                runner=state.runner,
                emit=observe.emitter(state),
                now=_now(),
                written=_status_written(state),
            )


@kopf.on.event("", "v1", "pods", labels=RUNNER_PODS)
async def mirror_pod(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A runner pod changed: what it says (pull errors, scheduling, OOMKilled) reaches the Evaluation.

    Decided in the event loop from what the watches showed; only a pod with something to
    say costs a handler thread (and API calls)."""
    state = state_of(memo)
    pod = cast(objects.Pod, observe.latest(state, "pods", body))
    if event.get("type") == "DELETED":
        observe.seen(state, "pods", pod, deleted=True)
        return
    job_name = (pod["metadata"].get("labels") or {}).get(builders.LABEL_JOB)
    if not job_name:
        return
    watched = state.watched
    evaluation_name = builders.evaluation_name(pod)
    cached = (
        watched.evaluations.get(pod["metadata"]["namespace"], evaluation_name)
        if watched is not None and evaluation_name
        else None
    )
    # A pod of another run than the one the watch shows is looked up in the API, in the thread.
    if (
        cached is not None
        and (cached.get("status") or {}).get("jobName") == job_name
        and not _pod_has_news(pod, cached, state=state)
    ):
        return
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(state.mirror_executor, _mirror_pod_run, pod, state)


def _pod_has_news(pod: objects.Pod, evaluation: objects.Evaluation, *, state: OperatorState) -> bool:
    """Whether a pod of the Evaluation's current run shows a problem, or one its status shows has ended."""
    status = evaluation.get("status") or {}
    if status.get("jobName") != (pod["metadata"].get("labels") or {}).get(builders.LABEL_JOB):
        return False
    # A healthy pod of a run without a problem: the Job's own events tell the rest.
    has_problem = diagnosis.waiting_problem(
        pod, now=_now(), image_pull_timeout=state.image_pull_timeout
    ) or diagnosis.terminated_problem(pod)
    return bool(has_problem) or status.get("reason") in diagnosis.REASONS


def _mirror_pod_run(pod: objects.Pod, state: OperatorState) -> None:
    with _counting_errors(state, "mirror_pod"):
        evaluation = observe.evaluation_of(pod, state=state)
        if evaluation is not None and _pod_has_news(pod, evaluation, state=state):
            observe.observe_run(evaluation, state=state, emit=observe.emitter(state))


@contextlib.contextmanager
def _counting_errors(state: OperatorState, handler: str) -> Iterator[None]:
    """Count a handler run that raised (assay_operator_reconcile_errors_total) and let kopf retry it; time it."""
    metrics = state.metrics
    with metrics.controller.timing(handler):
        try:
            yield
        except Exception:
            metrics.record_error(handler)
            raise


# In the event loop, not the handler threads: most events only update memory; a run to
# decide goes to a handler thread (`decisions`).
@kopf.on.event(*EVALUATIONS)
async def evaluation_changed(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body.get("metadata") or {}
    deleted = event.get("type") == "DELETED"
    state = state_of(memo)
    evaluation = cast(objects.Evaluation, observe.latest(state, "evaluations", body))
    for tracker in (state.pending, state.unfinished):
        if tracker is not None:
            tracker.observe(evaluation, deleted=deleted)
    if deleted:
        # Children go with the Evaluation through ownerReferences; only memory is ours.
        observe.seen(state, "evaluations", body, deleted=True)
        state.metrics.forget(str(meta.get("namespace")), str(meta.get("name")))
    else:
        state.metrics.observe(evaluation)
    if state.decisions is not None:
        # The newest body known (the operator's own status writes included), not only this event's.
        await state.decisions.observe(_newest_evaluation(state, evaluation), deleted=deleted)


def _newest_evaluation(state: OperatorState, evaluation: objects.Evaluation) -> objects.Evaluation:
    watched = state.watched
    if watched is None:
        return evaluation
    namespace, name = trigger.key_of(evaluation)
    return watched.evaluations.get(namespace, name) or evaluation
