"""Prometheus metrics of Evaluations, derived from their status.

Gauges are a function of the Evaluation objects the operator sees (`observe` on every
event, `forget` on deletion), so a restarted operator rebuilds them from the initial list
of Evaluations instead of from memory. Counters (completions, reconcile errors) count
what this operator process did. Everything lives in this module's own CollectorRegistry,
so the /metrics endpoint carries only Assay's series (plus the process collectors).

Series per Evaluation: 4 of `assay_evaluation_phase`, 1 of `assay_evaluation_info` (model,
revision and suite, to join scores with), 1 of progress, 1 of ETA (while running), 1 of
duration (once finished), 1 of `assay_evaluation_failure` (while failed, by reason), and 2
(score and stderr) per metric/filter pair of each task and group it reports. A suite of hundreds of subtasks (MMLU: 57 subtasks + 4 groups + 1) is hundreds
of series per Evaluation, so `score_series` limits them: `all`, `headline` (group scores
when the run has groups, else task scores) or `none`.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge

from assay import scores
from assay.errors import UserError
from assay.operator import conditions
from assay.spec import parse_spec

_EVAL = ("namespace", "evaluation")
SCORE_SERIES = ("all", "headline", "none")
SCORE_SERIES_ENV = "ASSAY_SCORE_SERIES"
_SCORE = (*_EVAL, "model", "task", "metric", "filter")
_INFO = (*_EVAL, "model", "revision", "suite")
#: The label a suite's kustomization puts on each of its Evaluations (examples/suite).
SUITE_LABEL = "assay.dev/suite"


class EvaluationMetrics:
    """Assay's metrics in their own registry; thread-safe (kopf runs sync handlers in threads)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, score_series: str = "all") -> None:
        if score_series not in SCORE_SERIES:
            raise UserError(f"{SCORE_SERIES_ENV}={score_series!r} is not one of {', '.join(SCORE_SERIES)}.")
        self.score_series = score_series
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.score = Gauge("assay_evaluation_score", "Aggregated metric of a task or group.", _SCORE, registry=r)
        self.stderr = Gauge("assay_evaluation_score_stderr", "Standard error of assay_evaluation_score.", _SCORE,
                            registry=r)  # fmt: skip
        self.progress = Gauge("assay_evaluation_progress_ratio", "Requests answered / requests in the run.", _EVAL,
                              registry=r)  # fmt: skip
        self.phase = Gauge("assay_evaluation_phase", "1 for the Evaluation's current phase, else 0.", (*_EVAL, "phase"),
                           registry=r)  # fmt: skip
        self.duration = Gauge("assay_evaluation_duration_seconds", "Run time of a finished Evaluation.", _EVAL,
                              registry=r)  # fmt: skip
        self.eta = Gauge("assay_evaluation_eta_seconds", "Estimated seconds left of a running Evaluation.", _EVAL,
                         registry=r)  # fmt: skip
        self.info = Gauge("assay_evaluation_info", "1 per Evaluation, labelled with its model, revision and suite.",
                          _INFO, registry=r)  # fmt: skip
        self.failure = Gauge("assay_evaluation_failure", "1 while an Evaluation has failed, labelled with the reason.",
                             (*_EVAL, "reason"), registry=r)  # fmt: skip
        self.completed = Counter("assay_evaluations_completed", "Evaluations that finished, by result.",
                                 ("namespace", "result"), registry=r)  # fmt: skip
        self.reconcile_errors = Counter("assay_operator_reconcile_errors", "Handler runs that raised.", ("handler",),
                                        registry=r)  # fmt: skip
        self._series: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        # The info and failure series of each Evaluation, by id of the gauge: their labels
        # change with the spec or the reason, and the old series must go when they do.
        self._one_series: dict[int, dict[tuple[str, str], tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def observe(self, body: Mapping[str, Any]) -> None:
        """Set every gauge of one Evaluation from its current spec and status."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        status = body.get("status") or {}
        model = status.get("model") or _model_label(body.get("spec") or {})
        observed: dict[tuple[str, ...], tuple[float | None, float | None]] = {}
        for section in self._score_sections(status):
            for task, metrics in (status.get(section) or {}).items():
                for metric_filter, entry in (metrics or {}).items():
                    metric, filter_name = scores.split_key(metric_filter)
                    series = (*key, model, task, metric, filter_name or "none")
                    observed[series] = ((entry or {}).get("value"), (entry or {}).get("stderr"))
        with self._lock:
            for stale in self._series.get(key, set()) - set(observed):
                self._remove_score(stale)
            for labels, (value, stderr) in observed.items():
                if value is not None:
                    self.score.labels(*labels).set(value)
                if stderr is not None:
                    self.stderr.labels(*labels).set(stderr)
            self._series[key] = set(observed)
            progress = status.get("progress") or {}
            total = progress.get("requestsTotal") or 0
            if total:
                self.progress.labels(*key).set(min(1.0, (progress.get("requestsDone") or 0) / total))
            elif status.get("phase") == conditions.SUCCEEDED:
                self.progress.labels(*key).set(1.0)
            else:
                _remove(self.progress, key)  # a new run (its status cleared): no last run's value
            current = status.get("phase")
            if current:
                for phase in (conditions.PENDING, conditions.RUNNING, conditions.SUCCEEDED, conditions.FAILED):
                    self.phase.labels(*key, phase).set(1.0 if phase == current else 0.0)
            seconds = conditions.duration_seconds(status)
            if seconds is not None:
                self.duration.labels(*key).set(seconds)
            else:
                _remove(self.duration, key)
            eta = progress.get("etaSeconds")
            if current == conditions.RUNNING and eta is not None:
                self.eta.labels(*key).set(eta)
            else:
                _remove(self.eta, key)
            suite = str((meta.get("labels") or {}).get(SUITE_LABEL, ""))
            self._set_one(self.info, key, (model, _revision(body.get("spec") or {}), suite))
            failed = current == conditions.FAILED
            self._set_one(self.failure, key, (str(status.get("reason") or "Unknown"),) if failed else None)

    def _set_one(self, gauge: Gauge, key: tuple[str, str], extra: tuple[str, ...] | None) -> None:
        """Keep exactly one series of `gauge` for this Evaluation (labels `key + extra`), or none."""
        seen = self._one_series.setdefault(id(gauge), {})
        wanted = None if extra is None else (*key, *extra)
        previous = seen.pop(key, None)
        if previous is not None and previous != wanted:
            _remove(gauge, previous)
        if wanted is not None:
            gauge.labels(*wanted).set(1.0)
            seen[key] = wanted

    def _score_sections(self, status: Mapping[str, Any]) -> tuple[str, ...]:
        if self.score_series == "none":
            return ()
        if self.score_series == "headline":
            return ("groups",) if status.get("groups") else ("results",)
        return ("results", "groups")

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted Evaluation (counters stay: they are per namespace)."""
        key = (namespace, name)
        with self._lock:
            for labels in self._series.pop(key, set()):
                self._remove_score(labels)
            for gauge in (self.progress, self.duration, self.eta):
                _remove(gauge, key)
            for gauge in (self.info, self.failure):
                self._set_one(gauge, key, None)
            for phase in (conditions.PENDING, conditions.RUNNING, conditions.SUCCEEDED, conditions.FAILED):
                _remove(self.phase, (*key, phase))

    def observed(self) -> int:
        """Evaluations with score series (the health probe reports it)."""
        with self._lock:
            return len(self._series)

    def record_completion(self, namespace: str, result: str) -> None:
        self.completed.labels(namespace, result).inc()

    def record_error(self, handler: str) -> None:
        self.reconcile_errors.labels(handler).inc()

    def _remove_score(self, labels: tuple[str, ...]) -> None:
        _remove(self.score, labels)
        _remove(self.stderr, labels)

    def start_server(self, port: int, addr: str = "0.0.0.0") -> tuple[Any, threading.Thread]:
        """Serve /metrics of this registry; port 0 picks a free one (`server.server_port`)."""
        return prometheus_client.start_http_server(port, addr=addr, registry=self.registry)


def _remove(metric: Gauge, labels: tuple[str, ...]) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass


def _revision(spec: Mapping[str, Any]) -> str:
    """The checkpoint revision the run asked for (model_args `revision`), "" for the default."""
    revision = (spec.get("modelArgs") or {}).get("revision")
    return str(revision) if revision else ""


def _model_label(spec: Mapping[str, Any]) -> str:
    try:
        return parse_spec(spec).model_label
    except Exception:  # noqa: BLE001 - an invalid spec still gets its phase gauges
        return str(spec.get("model", ""))
