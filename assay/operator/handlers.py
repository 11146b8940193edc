"""kopf handlers: the operator's reactions, each a thin shell around a pure function.

- Evaluation created, resumed (operator start) or its spec changed → parse, validate,
  `reconcile.plan`, write status, then carry the plan out. Idempotent: a restart re-plans
  from what exists and creates nothing twice.
- A runner Job changed → `conditions.from_job` mirrors it into the Evaluation's phase and
  conditions; a finished run posts an Event and counts in the completion counter.
- Any Evaluation event → its Prometheus gauges follow its status; deletion drops them.

Sync handlers on purpose: the kubernetes client is synchronous and kopf runs sync
handlers in its thread pool. Handler progress and diff-base are stored in `assay.dev/`
annotations, since the status schema is ours (a `status.kopf` field would be pruned).
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any, Mapping

import kopf

from assay import spec as spec_module
from assay.errors import UserError
from assay.operator import builders, conditions, kube, reconcile, validation
from assay.operator.metrics import EvaluationMetrics

EVALUATIONS = (spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL)
RUNNER_JOBS = {"app.kubernetes.io/managed-by": builders.MANAGED_BY}
WATCH_SERVER_TIMEOUT = 300
"""Seconds the API server keeps one watch open; kopf reconnects after it."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def plain(value: Any) -> Any:
    """kopf's body views → plain dicts and lists (the pure functions expect JSON)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _normal_event(obj: Any, *, reason: str, message: str) -> None:
    """A Normal Event on `obj`. Not `kopf.info`: that one obeys `settings.posting.level`,
    which is WARNING here to keep kopf's own handler logs out of Events, and would drop it."""
    kopf.event(obj, type="Normal", reason=reason, message=message)


def _metrics(memo: Any) -> EvaluationMetrics:
    metrics = getattr(memo, "metrics", None)
    if metrics is None:
        metrics = memo.metrics = EvaluationMetrics()
    return metrics


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=spec_module.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=spec_module.GROUP)
    settings.persistence.finalizer = f"{spec_module.GROUP}/operator"
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT + 30
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING
    # Namespaces are given explicitly (or all); no need to watch Namespaces or CRDs.
    settings.scanning.disabled = True
    _metrics(memo)
    kube.load_config()


@kopf.on.probe(id="evaluations")
def evaluations_probe(memo: kopf.Memo, **_: Any) -> int:
    """Liveness/readiness: answers once handlers run; reports Evaluations with metrics."""
    return _metrics(memo).observed()


@kopf.on.resume(*EVALUATIONS)
@kopf.on.create(*EVALUATIONS)
@kopf.on.update(*EVALUATIONS, field="spec")
def reconcile_evaluation(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: logging.Logger,
                         **_: Any) -> None:  # fmt: skip
    evaluation = plain(body)
    meta = evaluation["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    now = _now()
    try:
        spec = spec_module.parse_spec(evaluation.get("spec") or {})
        validation.validate(spec)
    except UserError as error:
        status = reconcile.rejection(evaluation, str(error), now=now)
        if status:
            patch.status.update(status)
            kopf.warn(body, reason="InvalidSpec", message=str(error))
        return
    try:
        jobs = kube.list_children("Job", "batch/v1", namespace=namespace, evaluation=name, owner_uid=meta["uid"])
        services = kube.list_children("Service", "v1", namespace=namespace, evaluation=name, owner_uid=meta["uid"])
        steps = reconcile.plan(evaluation, spec, jobs=jobs, services=services, now=now,
                               default_image=getattr(memo, "default_image", None))  # fmt: skip
        if steps.status:
            # Written before the Job exists, not through kopf's patch after the handler:
            # `mirror_job` ignores Jobs that are not status.jobName, and a Job's first
            # events (a suspended Job's only ones) come within milliseconds of its creation.
            kube.patch_evaluation_status(namespace=namespace, name=name, status=steps.status)
        for manifest in steps.create:
            if kube.create(manifest) and manifest["kind"] == "Job":
                _normal_event(body, reason="JobCreated", message=f"Created Job {manifest['metadata']['name']}.")
        for job in steps.delete_jobs:
            kube.delete("Job", "batch/v1", namespace=namespace, name=job)
            _normal_event(body, reason="JobReplaced", message=f"Deleted Job {job} of an earlier spec.")
        for service in steps.delete_services:
            kube.delete("Service", "v1", namespace=namespace, name=service)
        if steps.suspend_job:
            job, suspend = steps.suspend_job
            kube.patch_job_suspend(namespace=namespace, name=job, suspend=suspend)
            _normal_event(body, reason="Suspended" if suspend else "Resumed", message=f"Job {job}.")
    except Exception:
        _metrics(memo).record_error("reconcile")
        raise


@kopf.on.event("batch", "v1", "jobs", labels=RUNNER_JOBS)
def mirror_job(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    if event.get("type") == "DELETED":
        return
    job = plain(body)
    meta = job["metadata"]
    name = builders.evaluation_name(job)
    if not name:
        return
    try:
        evaluation = kube.get_evaluation(namespace=meta["namespace"], name=name)
        if evaluation is None:
            return
        status = evaluation.get("status") or {}
        if status.get("jobName") != meta["name"]:
            return  # a superseded run, being deleted
        generation = int(status.get("observedGeneration") or evaluation["metadata"].get("generation", 1))
        patch = conditions.from_job(status, job, generation=generation, now=_now())
        if not patch:
            return
        kube.patch_evaluation_status(namespace=meta["namespace"], name=name, status=patch)
    except Exception:
        _metrics(memo).record_error("mirror_job")
        raise
    finished = conditions.finished_now(status, patch)
    if finished:
        _metrics(memo).record_completion(meta["namespace"], finished.lower())
        message = patch.get("message") or status.get("message") or f"Job {meta['name']} finished."
        kopf.event(evaluation, type="Normal" if finished == conditions.SUCCEEDED else "Warning",
                   reason=finished, message=message)  # fmt: skip
    elif patch.get("phase") == conditions.RUNNING:
        _normal_event(evaluation, reason="Running", message=patch.get("message") or "Runner pods are running.")


@kopf.on.event(*EVALUATIONS)
def observe_metrics(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    meta = body.get("metadata") or {}
    if event.get("type") == "DELETED":
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
