"""Prometheus metrics of Evaluations, derived from their status.

Gauges are a function of the Evaluation objects the operator sees (`observe` on every
event, `forget` on deletion), so a restarted operator rebuilds them from the initial list
of Evaluations instead of from memory. Counters (completions, reconcile errors) count
what this operator process did. Everything lives in this module's own CollectorRegistry,
so the /metrics endpoint carries only Assay's series (plus the process collectors); the
operator's own health (reconcile timings, queue depth, leader) is `controller_metrics`.

Series per Evaluation: 4 of `assay_evaluation_phase`, 1 of `assay_evaluation_info` (model,
revision and suite, to join scores with), 1 of progress, 1 of ETA (while running), 1 of
duration (once finished), 1 of `assay_evaluation_failure` (while failed, by reason), and 2
(score and stderr) per metric/filter pair of each task and group it reports. A suite of hundreds of subtasks (MMLU: 57 subtasks + 4 groups + 1) is hundreds
of series per Evaluation, so `score_series` limits them: `all`, `headline` (group scores
when the run has groups, else task scores) or `none`; and `max_series_per_evaluation` caps
what is left (groups first), counting what it drops in `assay_metric_series_dropped_total`.

Model, task, metric, filter, revision and suite names are a tenant's strings: each label
value goes through `metric_labels.bounded` (no control characters, at most 128 characters).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from assay import scores
from assay.errors import UserError
from assay.operator.build.metric_labels import bounded
from assay.operator.decide import conditions
from assay.operator.runtime import metrics_server
from assay.operator.runtime.controller_metrics import ControllerMetrics
from assay.operator.runtime.metrics_auth import TokenAuthorizer
from assay.operator.runtime.metrics_server import TlsFiles
from assay.spec import parse_spec

_EVAL = ("namespace", "evaluation")
SCORE_SERIES = ("all", "headline", "none")
SCORE_SERIES_ENV = "ASSAY_SCORE_SERIES"
MAX_SERIES_ENV = "ASSAY_MAX_SERIES_PER_EVALUATION"
DEFAULT_MAX_SERIES = 500
"""Score and stderr series one Evaluation may have (the chart's metrics.maxSeriesPerEvaluation)."""
_SCORE = (*_EVAL, "model", "task", "metric", "filter")
_INFO = (*_EVAL, "model", "revision", "suite")
#: The label a suite's kustomization puts on each of its Evaluations (examples/suite).
SUITE_LABEL = "assay.dev/suite"
Values = tuple[float | None, float | None]
"""(score, stderr) of one series' labels."""


class EvaluationMetrics:
    """Assay's metrics in their own registry; thread-safe (kopf runs sync handlers in threads)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, score_series: str = "all",
                 max_series_per_evaluation: int = DEFAULT_MAX_SERIES) -> None:  # fmt: skip
        if score_series not in SCORE_SERIES:
            raise UserError(f"{SCORE_SERIES_ENV}={score_series!r} is not one of {', '.join(SCORE_SERIES)}.")
        if max_series_per_evaluation < 1:
            raise UserError(f"{MAX_SERIES_ENV}={max_series_per_evaluation} is not a positive number of series; "
                            f"unset it for {DEFAULT_MAX_SERIES}.")  # fmt: skip
        self.score_series = score_series
        self.max_series = max_series_per_evaluation
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
        self.sweep_errors = Counter("assay_sweep_errors", "Failures in a periodic sweep's pass, by sweep and kind "
                                    "(http_<status> or the error's class); the sweep goes on.", ("sweep", "kind"),
                                    registry=r)  # fmt: skip
        self.dropped = Counter("assay_metric_series_dropped", "Score series not exported: over the cap per Evaluation.",
                               ("namespace",), registry=r)  # fmt: skip
        self.controller = ControllerMetrics(r)
        self._series: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        # The series each Evaluation had dropped, so that each is counted once, not at every event.
        self._dropped: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        # The info and failure series of each Evaluation, by id of the gauge: their labels
        # change with the spec or the reason, and the old series must go when they do.
        self._one_series: dict[int, dict[tuple[str, str], tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def observe(self, body: Mapping[str, Any]) -> None:
        """Set every gauge of one Evaluation from its current spec and status."""
        meta = body.get("metadata") or {}
        key = _key(meta.get("namespace", ""), meta.get("name", ""))
        status = body.get("status") or {}
        model = bounded(status.get("model") or _model_label(body.get("spec") or {}))
        with self._lock:
            observed = self._capped(key, self._scores(key, model, status))
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
            suite = bounded((meta.get("labels") or {}).get(SUITE_LABEL, ""))
            self._set_one(self.info, key, (model, bounded(_revision(body.get("spec") or {})), suite))
            failed = current == conditions.FAILED
            self._set_one(self.failure, key, (bounded(status.get("reason") or "Unknown"),) if failed else None)

    def _scores(self, key: tuple[str, str], model: str, status: Mapping[str, Any]) -> dict[tuple[str, ...], Values]:
        """Score and stderr of each reported (task, metric, filter), by its bounded labels."""
        observed: dict[tuple[str, ...], Values] = {}
        for section in self._score_sections(status):
            for task, metrics in (status.get(section) or {}).items():
                for metric_filter, entry in (metrics or {}).items():
                    metric, filter_name = scores.split_key(metric_filter)
                    series = (*key, model, bounded(task), bounded(metric), bounded(filter_name or "none"))
                    observed[series] = ((entry or {}).get("value"), (entry or {}).get("stderr"))
        return observed

    def _capped(self, key: tuple[str, str], observed: dict[tuple[str, ...], Values]) -> dict[tuple[str, ...], Values]:
        """The first `max_series` series of `observed`; each series dropped for the first time is counted."""
        kept: dict[tuple[str, ...], Values] = {}
        dropped: set[tuple[str, ...]] = set()
        count = 0
        for labels, (value, stderr) in observed.items():
            wanted = (value is not None) + (stderr is not None)
            if count + wanted <= self.max_series:
                kept[labels] = (value, stderr)
                count += wanted
                continue
            dropped |= {(*labels, kind) for kind, v in (("score", value), ("stderr", stderr)) if v is not None}
        new = len(dropped - self._dropped.get(key, set()))
        if new:
            self.dropped.labels(key[0]).inc(new)
        self._dropped[key] = dropped
        return kept

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
        return ("groups", "results")  # groups first: the ones the cap keeps

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted Evaluation (counters stay: they are per namespace)."""
        key = _key(namespace, name)
        with self._lock:
            self._dropped.pop(key, None)
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
        self.controller.record_error(handler)

    def record_sweep_error(self, sweep: str, kind: str) -> None:
        self.sweep_errors.labels(sweep, kind).inc()

    def _remove_score(self, labels: tuple[str, ...]) -> None:
        _remove(self.score, labels)
        _remove(self.stderr, labels)

    def start_server(self, port: int, addr: str = "0.0.0.0", *, authorizer: TokenAuthorizer | None = None,
                     tls: TlsFiles | None = None) -> tuple[Any, threading.Thread]:  # fmt: skip
        """Serve /metrics of this registry (`metrics_server`); port 0 picks a free one (`server.server_port`)."""
        return metrics_server.serve(self.registry, port=port, addr=addr, authorizer=authorizer, tls=tls)


def max_series_from_env(env: Mapping[str, str] | None = None) -> int:
    """$ASSAY_MAX_SERIES_PER_EVALUATION (the chart's metrics.maxSeriesPerEvaluation), else DEFAULT_MAX_SERIES."""
    raw = (os.environ if env is None else env).get(MAX_SERIES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_SERIES
    try:
        return int(raw)
    except ValueError:
        raise UserError(f"{MAX_SERIES_ENV}={raw!r} is not a whole number of series; unset it for "
                        f"{DEFAULT_MAX_SERIES}.") from None  # fmt: skip


def _key(namespace: object, name: object) -> tuple[str, str]:
    """An Evaluation's labels: a name may be 253 characters, over the label bound."""
    return bounded(namespace), bounded(name)


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
