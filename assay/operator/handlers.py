"""kopf handlers: the operator's reactions, each a thin shell around a pure function.

- Evaluation created, resumed (operator start), its spec changed or its `evaluations.assay.dev/rerun`
  annotation changed (a re-run of the same spec, which bumps no generation) → parse, check the
  admin's policy (`policy`), validate, `reconcile.plan`, write status, then carry the plan out. Idempotent: a restart re-plans
  from what exists and creates nothing twice.
- A runner Job or runner pod changed → `observe_run` reads the Job, its pods and (where
  the statuses cannot tell) their Events, `diagnosis.diagnose` names what keeps the run
  from going on, and `conditions.from_job` mirrors both into the Evaluation's phase,
  reason and conditions; a new problem posts a Warning Event, a finished run an Event and
  a count in the completion counter. A fatal problem (InvalidImageName, a pull failing
  past the timeout) fails the Evaluation and ends its Job.
- Every `PENDING_SWEEP_INTERVAL` seconds, Pending Evaluations are observed again: a pod
  the Job controller cannot create (quota) changes no Job or pod, and a pull timeout needs
  a clock.
- Any Evaluation event → its Prometheus gauges follow its status; deletion drops them.

Sync handlers on purpose: the kubernetes client is synchronous and kopf runs sync
handlers in its thread pool. Handler progress and diff-base are stored in `assay.dev/`
annotations, since the status schema is ours (a `status.kopf` field would be pruned).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
from typing import Any, Callable, Iterator, Mapping

import kopf

from assay import spec as spec_module
from assay.errors import UserError
from assay.operator import builders, conditions, converge, diagnosis, diffbase, kube, policy, reconcile, validation
from assay.operator.metrics import EvaluationMetrics

logger = logging.getLogger(__name__)

EVALUATIONS = (spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL)
RUNNER_JOBS = {"app.kubernetes.io/managed-by": builders.MANAGED_BY}
RUNNER_PODS = RUNNER_JOBS
WATCH_SERVER_TIMEOUT = 300
"""Seconds the API server keeps one watch open; kopf reconnects after it."""
PENDING_SWEEP_INTERVAL = 20.0
HANDLER_WORKERS = 32
"""Threads for sync handlers. kopf's default, min(32, cpus + 4), is 6 on a 2-core node: a
burst of Evaluations then queues behind API round trips, not behind CPU."""
CONSISTENCY_TIMEOUT = 30.0
"""Seconds kopf waits to see its own patch before handling an object again (default 5): under a
burst, a watch event of our status write came first and the creation was handled twice."""
IMAGE_PULL_TIMEOUT_ENV = "ASSAY_IMAGE_PULL_TIMEOUT"
"""Seconds a runner image may fail to pull before its Evaluation fails (default 300)."""

Emit = Callable[..., None]
"""(obj, type=, reason=, message=) → posts an Event."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def plain(value: Any) -> Any:
    """kopf's body views → plain dicts and lists (the pure functions expect JSON)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _metrics(memo: Any) -> EvaluationMetrics:
    metrics = getattr(memo, "metrics", None)
    if metrics is None:
        metrics = memo.metrics = EvaluationMetrics()
    return metrics


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


def _pull_timeout(memo: Any) -> float:
    value = getattr(memo, "image_pull_timeout", None)
    return float(value) if value else diagnosis.DEFAULT_IMAGE_PULL_TIMEOUT


def _policy(memo: Any) -> policy.AdminPolicy:
    """The admin's policy `main` read from ASSAY_POLICY; the safe defaults without one."""
    value = getattr(memo, "policy", None)
    return value if isinstance(value, policy.AdminPolicy) else policy.AdminPolicy()


def _kopf_event(obj: Any, *, type: str, reason: str, message: str) -> None:
    kopf.event(obj, type=type, reason=reason, message=message)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=spec_module.GROUP)
    settings.persistence.diffbase_storage = diffbase.RedactingDiffBaseStorage(prefix=spec_module.GROUP)
    settings.persistence.finalizer = f"{spec_module.GROUP}/operator"
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT + 30
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = HANDLER_WORKERS
    settings.persistence.consistency_timeout = CONSISTENCY_TIMEOUT
    # Namespaces are given explicitly (or all); no need to watch Namespaces or CRDs.
    settings.scanning.disabled = True
    _metrics(memo)
    kube.load_config()
    memo.pending = PendingEvaluations()
    memo.sweeper = PendingSweeper(memo)
    memo.sweeper.start()
    memo.unfinished = converge.UnfinishedRuns()
    memo.lost_job_sweeper = converge.LostJobSweeper(
        runs=memo.unfinished, admin=_policy(memo), default_image=getattr(memo, "default_image", None),
        on_error=_metrics(memo).record_error)  # fmt: skip
    memo.lost_job_sweeper.start()


@kopf.on.cleanup()
def stop_sweeper(memo: kopf.Memo, **_: Any) -> None:
    for sweeper in (getattr(memo, "sweeper", None), getattr(memo, "lost_job_sweeper", None)):
        if sweeper is not None:
            sweeper.stop()


@kopf.on.probe(id="evaluations")
def evaluations_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness/readiness: answers once handlers run; reports Evaluations with metrics."""
    return _metrics(memo).observed()


@kopf.on.resume(*EVALUATIONS)
@kopf.on.create(*EVALUATIONS)
@kopf.on.update(*EVALUATIONS, field="spec")
# Not under `assay.dev/`: kopf's progress storage (that prefix) strips every annotation of it
# from what it compares, even one a handler names (found on a real cluster).
@kopf.on.update(*EVALUATIONS, field=("metadata", "annotations", builders.ANNOTATION_RERUN))
def reconcile_evaluation(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger,
                         **_: Any) -> None:  # fmt: skip
    evaluation = plain(body)
    now = _now()
    admin = _policy(memo)
    try:
        spec = spec_module.parse_spec(evaluation.get("spec") or {})
        policy.check(spec, admin)  # before the task index sees a path it would walk
        namespace = evaluation["metadata"]["namespace"]
        sources = validation.validate_with_sources(spec, namespace=namespace, get=lambda config_map: kube.get(
            "ConfigMap", "v1", namespace=namespace, name=config_map))  # fmt: skip
        spec = policy.enforce(spec, admin)
    except UserError as error:
        status = reconcile.rejection(evaluation, str(error), now=now)
        if status:
            patch.status.update(status)
            kopf.warn(body, reason="InvalidSpec", message=str(error))
        return
    with _counting_errors(memo, "reconcile"):
        converge.carry_out(evaluation, spec, now=now, default_image=getattr(memo, "default_image", None),
                           emit=_kopf_event, task_sources=sources)  # fmt: skip


@kopf.on.event("batch", "v1", "jobs", labels=RUNNER_JOBS)
def mirror_job(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    job = plain(body)
    if event.get("type") == "DELETED":
        _job_deleted(job, memo=memo)
        return
    with _counting_errors(memo, "mirror_job"):
        evaluation = _evaluation_of(job)
        if evaluation is not None:
            observe_run(evaluation, job=job, memo=memo, emit=_kopf_event)


def _job_deleted(job: Mapping[str, Any], *, memo: Any) -> None:
    """A runner Job is gone: if it was an unfinished run's current Job (deleted by hand), create it again."""
    with _counting_errors(memo, "recreate_job"):
        evaluation = _evaluation_of(job)
        if evaluation is not None and converge.awaits_job(evaluation, job["metadata"]["name"]):
            converge.recreate(evaluation, admin=_policy(memo), default_image=getattr(memo, "default_image", None),
                              emit=_kopf_event, now=_now())  # fmt: skip


@kopf.on.event("", "v1", "pods", labels=RUNNER_PODS)
def mirror_pod(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A runner pod changed: what it says (pull errors, scheduling, OOMKilled) reaches the Evaluation."""
    if event.get("type") == "DELETED":
        return
    pod = plain(body)
    job_name = (pod["metadata"].get("labels") or {}).get(builders.LABEL_JOB)
    if not job_name:
        return
    with _counting_errors(memo, "mirror_pod"):
        evaluation = _evaluation_of(pod)
        if evaluation is None or (evaluation.get("status") or {}).get("jobName") != job_name:
            return
        # A healthy pod of a run without a problem: the Job's own events tell the rest.
        has_problem = diagnosis.waiting_problem(pod, now=_now(), image_pull_timeout=_pull_timeout(memo)) \
            or diagnosis.terminated_problem(pod)  # fmt: skip
        if not has_problem and (evaluation.get("status") or {}).get("reason") not in diagnosis.REASONS:
            return
        observe_run(evaluation, memo=memo, emit=_kopf_event)


@contextlib.contextmanager
def _counting_errors(memo: Any, handler: str) -> Iterator[None]:
    """Count a handler run that raised (assay_operator_reconcile_errors_total) and let kopf retry it."""
    try:
        yield
    except Exception:
        _metrics(memo).record_error(handler)
        raise


def _evaluation_of(child: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Evaluation a runner Job or pod belongs to (by its label), if it still exists."""
    name = builders.evaluation_name(child)
    if not name:
        return None
    return kube.get_evaluation(namespace=child["metadata"]["namespace"], name=name)


def observe_run(evaluation: Mapping[str, Any], *, memo: Any, emit: Emit, job: Mapping[str, Any] | None = None,
                now: datetime.datetime | None = None) -> Mapping[str, Any]:  # fmt: skip
    """Mirror the current run (its Job, pods and their Events) into the Evaluation's status.

    Returns the status patch it wrote ({} when nothing changed). Reads only: the Job (unless
    given), its pods by label, and Events of at most the Job and one pod.
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
        job = kube.get("Job", "batch/v1", namespace=namespace, name=job_name)
        if job is None:
            return {}
    if job["metadata"]["name"] != job_name or _rerun_token(job) != status.get("rerunToken"):
        return {}  # a superseded run being deleted (another spec, or a token whose name hash collides)
    job_phase = conditions.job_state(job).phase
    if ending:
        if job_phase not in conditions.TERMINAL_PHASES:
            kube.end_job(namespace=namespace, name=job_name)
        return {}
    now = now or _now()
    problem = None
    job_ready = int((job.get("status") or {}).get("ready") or 0)
    all_ready = job_phase == conditions.RUNNING and job_ready >= int((job.get("spec") or {}).get("parallelism") or 1)
    if not terminal and job_phase != conditions.SUCCEEDED and not all_ready:
        pods = kube.list_objects("Pod", "v1", namespace=namespace, label_selector=f"{builders.LABEL_JOB}={job_name}")
        events: list[Mapping[str, Any]] = []
        for kind, object_name in diagnosis.events_to_read(job, pods):
            events += kube.list_events(namespace=namespace, kind=kind, name=object_name)
        problem = diagnosis.diagnose(job, pods, events, now=now, image_pull_timeout=_pull_timeout(memo))
    generation = int(status.get("observedGeneration") or meta.get("generation", 1))
    patch = conditions.from_job(status, job, generation=generation, now=now, problem=problem)
    if not patch:
        return {}
    kube.patch_evaluation_status(namespace=namespace, name=name, status=patch)
    finished = conditions.finished_now(status, patch)
    if finished == conditions.FAILED and job_phase not in conditions.TERMINAL_PHASES:
        # The operator failed the run (a fatal problem): end its Job, or its pod would wait forever.
        kube.end_job(namespace=namespace, name=job_name)
    if finished:
        _metrics(memo).record_completion(namespace, finished.lower())
        message = patch.get("message") or status.get("message") or f"Job {job_name} finished."
        emit(evaluation, type="Normal" if finished == conditions.SUCCEEDED else "Warning", reason=finished,
             message=message)  # fmt: skip
    elif problem is not None and patch.get("reason") == problem.reason:
        emit(evaluation, type="Warning", reason=problem.reason, message=problem.message)
    elif patch.get("phase") == conditions.RUNNING:
        emit(evaluation, type="Normal", reason="Running", message=patch.get("message") or "Runner pods are running.")
    return patch


def _rerun_token(job: Mapping[str, Any]) -> str | None:
    """The rerun token a Job was made for (None for a Job of no re-run)."""
    return ((job.get("metadata") or {}).get("annotations") or {}).get(builders.ANNOTATION_RERUN)


class PendingEvaluations:
    """(namespace, name) of the Evaluations last seen Pending, kept from their watch events."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
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


class PendingSweeper:
    """Observes every Pending Evaluation's run again every `interval` seconds.

    A plain thread, not a kopf timer: kopf timers put a finalizer on every Evaluation,
    which would make deletions wait for a running operator. Events go straight to the API
    (kopf's poster lives only inside kopf's handlers).
    """

    def __init__(self, memo: Any, *, interval: float = PENDING_SWEEP_INTERVAL) -> None:
        self.memo = memo
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="assay-pending-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def sweep(self) -> None:
        for namespace, name in self.memo.pending.snapshot():
            if self._stop.is_set():
                return
            try:
                evaluation = kube.get_evaluation(namespace=namespace, name=name)
                if evaluation is not None:
                    observe_run(evaluation, memo=self.memo, emit=kube.create_event)
            except Exception as error:  # noqa: BLE001 - one Evaluation's trouble must not stop the sweep
                _metrics(self.memo).record_error("sweep")
                logger.warning("Could not observe Evaluation %s/%s: %s", namespace, name, error)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sweep()


@kopf.on.event(*EVALUATIONS)
def observe_metrics(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body.get("metadata") or {}
    deleted = event.get("type") == "DELETED"
    for tracker in (getattr(memo, "pending", None), getattr(memo, "unfinished", None)):
        if tracker is not None:
            tracker.observe(plain(body), deleted=deleted)
    if deleted:
        _metrics(memo).forget(str(meta.get("namespace")), str(meta.get("name")))
    else:
        _metrics(memo).observe(plain(body))


@kopf.on.delete(*EVALUATIONS, optional=True)
def forget_metrics(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    # Children go with the Evaluation through ownerReferences; only metrics are ours.
    meta = body.get("metadata") or {}
    _metrics(memo).forget(str(meta.get("namespace")), str(meta.get("name")))


def watched_namespaces(env: Mapping[str, str] | None = None) -> list[str]:
    """ASSAY_NAMESPACES (comma-separated) when the command line names none; [] = all."""
    env = os.environ if env is None else env
    return [ns.strip() for ns in env.get("ASSAY_NAMESPACES", "").split(",") if ns.strip()]
