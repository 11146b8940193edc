"""kopf handlers: the operator's reactions, each a thin shell around a pure function.

- Any Evaluation event → its Prometheus gauges follow its status (deletion drops them), and
  when its run needs deciding (`trigger`: new, spec changed, `evaluations.assay.dev/rerun`
  bumped, or unfinished when first seen after a start) → `decide_run`: parse, check the
  admin's policy (`policy`), validate, `reconcile.plan`, write status, then carry the plan
  out. Idempotent: a retry or a restart re-plans from what exists and creates nothing twice.
- A runner Job or runner pod changed → `observe.observe_run` takes the Job and its pods
  from what the watches showed (`watched`), reads Events where no status can tell,
  `diagnosis.diagnose` names what keeps the run from going on, and `conditions.from_job`
  mirrors both into the Evaluation's phase, reason and conditions; a new problem posts a
  Warning Event, a finished run an Event and a count in the completion counter. A fatal
  problem (InvalidImageName, a pull failing past the timeout) fails the Evaluation and ends
  its Job.
- Every `observe.PENDING_SWEEP_INTERVAL` seconds, Pending Evaluations are observed again: a
  pod the Job controller cannot create (quota) changes no Job or pod, and a pull timeout
  needs a clock.

Handlers that call the API are sync on purpose: the kubernetes client is synchronous and
kopf runs sync handlers in its thread pool. Those that only keep memory (the index
handlers, the metrics) are async and run in kopf's event loop, saving a thread hop on
every watch event. No kopf create/update/resume handler is registered: those would make
kopf store its progress and a copy of each spec in annotations (see `trigger`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import logging
import os
from typing import Any, Callable, Iterator, Mapping

import kopf

from assay import spec as spec_module
from assay.errors import UserError
from assay.operator.admission import policy, secret_consent, validation
from assay.operator.build import builders
from assay.operator.decide import conditions, diagnosis, large_specs, reconcile, trigger
from assay.operator.kube import kube
from assay.operator.runtime import converge, decisions, events, observe
from assay.operator.runtime.watched import Watched

logger = logging.getLogger(__name__)

EVALUATIONS = (spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL)
RUNNER_JOBS = {"app.kubernetes.io/managed-by": builders.MANAGED_BY}
RUNNER_PODS = RUNNER_JOBS
WATCH_SERVER_TIMEOUT = 300
"""Seconds the API server keeps one watch open; kopf reconnects after it."""
HANDLER_WORKERS = 32
"""Threads deciding runs (kopf's pool). kopf's default, min(32, cpus + 4), is 6 on a 2-core
node: a burst of Evaluations then queues behind API round trips, not behind CPU."""
MIRROR_WORKERS = 4
"""Threads mirroring runner Jobs and pods into status: a pool apart from the deciding one
(as controller-runtime gives each controller its own workers), so a storm of Job events
(hundreds of runs ending at once, each a fresh read, a status write and an Event) never
holds back the creation of new runs, nor a burst of new runs the mirroring of old ones."""
IMAGE_PULL_TIMEOUT_ENV = "ASSAY_IMAGE_PULL_TIMEOUT"
"""Seconds a runner image may fail to pull before its Evaluation fails (default 300)."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def image_pull_timeout(env: Mapping[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    raw = env.get(IMAGE_PULL_TIMEOUT_ENV, "").strip()
    if not raw:
        return diagnosis.DEFAULT_IMAGE_PULL_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UserError(f"{IMAGE_PULL_TIMEOUT_ENV}={raw!r} is not a positive number of seconds; unset it for 300.")
    return value


def _policy(memo: Any) -> policy.AdminPolicy:
    """The admin's policy `main` read from ASSAY_POLICY; the safe defaults without one."""
    value = getattr(memo, "policy", None)
    return value if isinstance(value, policy.AdminPolicy) else policy.AdminPolicy()


class NoDiffBase(kopf.DiffBaseStorage):
    """No essence kept or compared: with no create/update handler, nothing reads kopf's diffs.

    kopf builds each watch event's essence (a deep copy of the whole body) whatever handlers
    there are; for the operator's Jobs, pods and Evaluations under a burst that was a sixth of
    its CPU (py-spy, 300 Evaluations)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT + 30
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = HANDLER_WORKERS
    # Namespaces are given explicitly (or all); no need to watch Namespaces or CRDs.
    settings.scanning.disabled = True
    observe.metrics_of(memo)
    memo.watched = Watched(job_label=builders.LABEL_JOB)
    memo.executor = settings.execution.executor
    memo.mirror_executor = concurrent.futures.ThreadPoolExecutor(MIRROR_WORKERS, thread_name_prefix="assay-mirror")
    memo.decisions = decisions.RunDecisions(
        decide=lambda evaluation: _timed_decision(evaluation, memo), on_error=_decision_failed(memo),
        latest=lambda key: memo.watched.evaluations.get(*key), executor=settings.execution.executor)  # fmt: skip
    observe.metrics_of(memo).controller.watch_queue(memo.decisions.depth)
    kube.load_config()
    memo.pending = observe.PendingEvaluations()
    memo.events = events.EventPoster().start()
    memo.sweeper = observe.PendingSweeper(memo)
    memo.sweeper.start()
    memo.unfinished = converge.UnfinishedRuns()
    memo.lost_job_sweeper = converge.LostJobSweeper(
        runs=memo.unfinished, admin=_policy(memo), default_image=getattr(memo, "default_image", None),
        emit=observe.emitter(memo), on_error=observe.metrics_of(memo).record_sweep_error, memo=memo)  # fmt: skip
    memo.lost_job_sweeper.start()


@kopf.on.cleanup()
def stop_sweeper(memo: kopf.Memo, **_: Any) -> None:
    for sweeper in (getattr(memo, "sweeper", None), getattr(memo, "lost_job_sweeper", None)):
        if sweeper is not None:
            sweeper.stop()
    mirror = getattr(memo, "mirror_executor", None)
    if mirror is not None:
        mirror.shutdown(wait=False, cancel_futures=True)
    poster = getattr(memo, "events", None)
    if poster is not None and not poster.close(timeout=5.0):
        logger.warning("Some Events were not posted before the operator stopped.")


@kopf.on.probe(id="evaluations")
def evaluations_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness/readiness: answers once handlers run; reports Evaluations with metrics."""
    return observe.metrics_of(memo).observed()


# Index handlers, for what they make kopf do: run them on every listed object before any
# handler starts, and on each later event before that event's handlers. They keep the
# newest bodies (`watched`); kopf's own index stays empty (None is never indexed).
@kopf.index(*EVALUATIONS)
async def evaluations_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(memo, "evaluations", body)


@kopf.index("batch", "v1", "jobs", labels=RUNNER_JOBS)
async def runner_jobs_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(memo, "jobs", body)


@kopf.index("", "v1", "pods", labels=RUNNER_PODS)
async def runner_pods_seen(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    observe.seen(memo, "pods", body)


def _status_written(memo: Any) -> Callable[[Mapping[str, Any]], None]:
    """Keeps the Evaluation a status write returned, so the next handler does not read the one from before."""
    return lambda evaluation: observe.seen(memo, "evaluations", evaluation)


def decide_run(evaluation: Mapping[str, Any], *, memo: Any) -> None:
    """Decide an Evaluation's run and carry the decision out (in a handler thread; see `decisions`).

    Parse, check the admin's policy, validate, plan from what exists, write status, create
    the children. Idempotent: a retry or a restart re-plans and creates nothing twice."""
    now = _now()
    admin = _policy(memo)
    meta = evaluation["metadata"]
    whole = large_specs.whole(evaluation, read=lambda: kube.get_evaluation(namespace=meta["namespace"], name=meta["name"]))
    if whole is None:
        return  # deleted meanwhile
    evaluation = whole
    log = _object_logger(meta)
    try:
        spec = spec_module.parse_spec(evaluation.get("spec") or {})
        policy.check(spec, admin)  # before the task index sees a path it would walk
        namespace = meta["namespace"]
        secret_consent.check(spec, label=admin.secret_consent_label, namespace=namespace,
                             get=kube.secret_metadata(namespace))  # fmt: skip
        sources = validation.validate_with_sources(spec, namespace=namespace, get=lambda config_map: kube.get(
            "ConfigMap", "v1", namespace=namespace, name=config_map), allow_task_code=admin.allow_task_code)  # fmt: skip
        spec = policy.enforce(spec, admin)
    except UserError as error:
        status = reconcile.rejection(evaluation, str(error), now=now)
        if status:
            _status_written(memo)(kube.patch_evaluation_status(namespace=meta["namespace"], name=meta["name"],
                                                               status=status))  # fmt: skip
            observe.emitter(memo)(evaluation, type="Warning", reason="InvalidSpec", message=str(error))
        log.info("Refused: %s", error)
        return
    steps = converge.carry_out(evaluation, spec, now=now, default_image=getattr(memo, "default_image", None),
                               emit=observe.emitter(memo), task_sources=sources, written=_status_written(memo))  # fmt: skip
    log.info("Run decided: %s", steps.summary())


def _timed_decision(evaluation: Mapping[str, Any], memo: Any) -> None:
    with observe.metrics_of(memo).controller.timing("reconcile"):  # assay_reconcile_duration_seconds
        decide_run(evaluation, memo=memo)


def _object_logger(meta: Mapping[str, Any]) -> logging.LoggerAdapter[logging.Logger]:
    """A logger whose lines name the Evaluation, as kopf's per-object ones do (see main.EvaluationPrefixFormatter)."""
    return logging.LoggerAdapter(logger, {"k8s_ref": {"namespace": meta.get("namespace"), "name": meta.get("name")}})


def _decision_failed(memo: Any) -> Callable[[tuple[str, str], BaseException], None]:
    def report(key: tuple[str, str], error: BaseException) -> None:
        observe.metrics_of(memo).record_error("reconcile")
        _object_logger({"namespace": key[0], "name": key[1]}).warning(
            "Deciding the run failed; trying again soon: %s", error, exc_info=not isinstance(error, kube.ApiError))
    return report


@kopf.on.event("batch", "v1", "jobs", labels=RUNNER_JOBS)
async def mirror_job(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    job = observe.latest(memo, "jobs", body)
    loop = asyncio.get_running_loop()
    if event.get("type") == "DELETED":
        observe.seen(memo, "jobs", job, deleted=True)
        # Creating the Job again is a run's work: the deciding threads, not the mirroring ones.
        await loop.run_in_executor(getattr(memo, "executor", None), _job_deleted, job, memo)
        return
    await loop.run_in_executor(getattr(memo, "mirror_executor", None), _mirror_job_run, job, memo)


def _mirror_job_run(job: Mapping[str, Any], memo: Any) -> None:
    with _counting_errors(memo, "mirror_job"):
        # A finished Job is read against the Evaluation as it is now: the runner's last
        # status write (its results and last word) must not be missing from the cache.
        evaluation = observe.evaluation_of(job, memo=memo, fresh=conditions.job_state(job).phase in conditions.TERMINAL_PHASES)
        if evaluation is not None:
            observe.observe_run(evaluation, job=job, memo=memo, emit=observe.emitter(memo))


def _job_deleted(job: Mapping[str, Any], memo: Any) -> None:
    """A runner Job is gone: if it was an unfinished run's current Job (deleted by hand), create it again."""
    with _counting_errors(memo, "recreate_job"):
        evaluation = observe.evaluation_of(job, memo=memo, fresh=True)
        if evaluation is not None and converge.awaits_job(evaluation, job["metadata"]["name"]):
            converge.recreate(evaluation, admin=_policy(memo), default_image=getattr(memo, "default_image", None),
                              emit=observe.emitter(memo), now=_now(), written=_status_written(memo))  # fmt: skip


@kopf.on.event("", "v1", "pods", labels=RUNNER_PODS)
async def mirror_pod(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A runner pod changed: what it says (pull errors, scheduling, OOMKilled) reaches the Evaluation.

    Decided in the event loop from what the watches showed; only a pod with something to
    say costs a handler thread (and API calls)."""
    pod = observe.latest(memo, "pods", body)
    if event.get("type") == "DELETED":
        observe.seen(memo, "pods", pod, deleted=True)
        return
    job_name = (pod["metadata"].get("labels") or {}).get(builders.LABEL_JOB)
    if not job_name:
        return
    watched = observe.watched_of(memo)
    evaluation_name = builders.evaluation_name(pod)
    cached = watched.evaluations.get(pod["metadata"]["namespace"], evaluation_name) \
        if watched is not None and evaluation_name else None  # fmt: skip
    # A pod of another run than the one the watch shows is looked up in the API, in the thread.
    if cached is not None and (cached.get("status") or {}).get("jobName") == job_name \
            and not _pod_has_news(pod, cached, memo=memo):  # fmt: skip
        return
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(getattr(memo, "mirror_executor", None), _mirror_pod_run, pod, memo)


def _pod_has_news(pod: Mapping[str, Any], evaluation: Mapping[str, Any], *, memo: Any) -> bool:
    """Whether a pod of the Evaluation's current run shows a problem, or one its status shows has ended."""
    status = evaluation.get("status") or {}
    if status.get("jobName") != (pod["metadata"].get("labels") or {}).get(builders.LABEL_JOB):
        return False
    # A healthy pod of a run without a problem: the Job's own events tell the rest.
    has_problem = diagnosis.waiting_problem(pod, now=_now(), image_pull_timeout=observe.pull_timeout(memo)) \
        or diagnosis.terminated_problem(pod)  # fmt: skip
    return bool(has_problem) or status.get("reason") in diagnosis.REASONS


def _mirror_pod_run(pod: Mapping[str, Any], memo: Any) -> None:
    with _counting_errors(memo, "mirror_pod"):
        evaluation = observe.evaluation_of(pod, memo=memo)
        if evaluation is not None and _pod_has_news(pod, evaluation, memo=memo):
            observe.observe_run(evaluation, memo=memo, emit=observe.emitter(memo))


@contextlib.contextmanager
def _counting_errors(memo: Any, handler: str) -> Iterator[None]:
    """Count a handler run that raised (assay_operator_reconcile_errors_total) and let kopf retry it; time it."""
    metrics = observe.metrics_of(memo)
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
    evaluation = observe.latest(memo, "evaluations", body)
    for tracker in (getattr(memo, "pending", None), getattr(memo, "unfinished", None)):
        if tracker is not None:
            tracker.observe(evaluation, deleted=deleted)
    if deleted:
        # Children go with the Evaluation through ownerReferences; only memory is ours.
        observe.seen(memo, "evaluations", body, deleted=True)
        observe.metrics_of(memo).forget(str(meta.get("namespace")), str(meta.get("name")))
    else:
        observe.metrics_of(memo).observe(evaluation)
    run_decisions = getattr(memo, "decisions", None)
    if isinstance(run_decisions, decisions.RunDecisions):
        # The newest body known (the operator's own status writes included), not only this event's.
        newest = _newest_evaluation(memo, evaluation)
        await run_decisions.observe(newest, deleted=deleted)


def _newest_evaluation(memo: Any, evaluation: Mapping[str, Any]) -> Mapping[str, Any]:
    watched = observe.watched_of(memo)
    if watched is None:
        return evaluation
    namespace, name = trigger.key_of(evaluation)
    return watched.evaluations.get(namespace, name) or evaluation


def watched_namespaces(env: Mapping[str, str] | None = None) -> list[str]:
    """ASSAY_NAMESPACES (comma-separated) when the command line names none; [] = all."""
    env = os.environ if env is None else env
    return [ns.strip() for ns in env.get("ASSAY_NAMESPACES", "").split(",") if ns.strip()]
