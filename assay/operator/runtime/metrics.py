"""Prometheus metrics of Evaluations, derived from their status.

Gauges are a function of the Evaluation objects the operator sees (`observe` on every
event, `forget` on deletion), so a restarted operator rebuilds them from the initial list
of Evaluations instead of from memory. Counters (completions, reconcile errors) count
what this operator process did. Everything lives in this module's own CollectorRegistry,
so the /metrics endpoint carries only Assay's series (plus the process collectors); the
operator's own health (reconcile timings, queue depth, leader) is `controller_metrics`.

Series per Evaluation: 4 of `assay_evaluation_phase`, 1 of `assay_evaluation_info` (model,
revision and suite, to join scores with), 1 of progress, 1 of ETA (while running), 1 of
duration (once finished), 1 of `assay_evaluation_failure` (while failed, by reason), 4
(score, stderr and the score's 95% interval; 1 without a stderr) per metric/filter pair of
each task and group it reports (labelled `trusted`: "true", "false" or "unknown", as the run's
sentinels found; 1 of `assay_evaluation_scores_trusted` beside them; 1 of `assay_evaluation_documents_saved`
after a sequential run), and with a baseline 1 of `assay_evaluation_regressed` plus
3 (delta and its interval) per compared metric (`evaluation_series`). A suite of hundreds of
subtasks (MMLU: 57 subtasks + 4 groups + 1) is hundreds of series per Evaluation, so
`score_series` limits the scores: `all`, `headline` (group scores when the run has groups,
else task scores) or `none`; and `max_series_per_evaluation` caps the per-metric series
left (compared metrics first, worst first, then groups, then tasks), counting what it
leaves out in `assay_metric_series_dropped_total`.

Model, task, metric, filter, revision, suite and baseline names are a tenant's strings: each label
value goes through `metric_labels.bounded` (no control characters, at most 128 characters).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from assay.errors import UserError
from assay.operator import objects
from assay.operator.build.metric_labels import bounded
from assay.operator.decide import conditions, progress_eta
from assay.operator.runtime import evaluation_series as series
from assay.operator.runtime import metrics_server
from assay.operator.runtime.controller_metrics import ControllerMetrics
from assay.operator.runtime.metrics_auth import TokenAuthorizer
from assay.operator.runtime.metrics_tls import TlsFiles
from assay.operator.runtime.run_phase_metrics import RunPhaseMetrics
from assay.operator.settings import DEFAULT_MAX_SERIES, MAX_SERIES_ENV, SCORE_SERIES_ENV
from assay.operator.settings import max_series as _max_series
from assay.spec import parse_spec

_EVAL = ("namespace", "evaluation")
SCORE_SERIES = ("all", "headline", "none")
_SCORE = (*_EVAL, "model", "task", "metric", "filter", "trusted")
_DELTA = (*_EVAL, "baseline", "task", "metric", "filter")
_INFO = (*_EVAL, "model", "revision", "suite")
#: The label a suite's kustomization puts on each of its Evaluations (examples/suite).
SUITE_LABEL = "assay.dev/suite"


class EvaluationMetrics:
    """Assay's metrics in their own registry; thread-safe (kopf runs sync handlers in threads)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        score_series: str = "all",
        max_series_per_evaluation: int = DEFAULT_MAX_SERIES,
    ) -> None:
        if score_series not in SCORE_SERIES:
            raise UserError(f"{SCORE_SERIES_ENV}={score_series!r} is not one of {', '.join(SCORE_SERIES)}.")
        if max_series_per_evaluation < 1:
            raise UserError(
                f"{MAX_SERIES_ENV}={max_series_per_evaluation} is not a positive number of series; "
                f"unset it for {DEFAULT_MAX_SERIES}."
            )
        self.score_series = score_series
        self.max_series = max_series_per_evaluation
        self.registry = registry if registry is not None else CollectorRegistry()
        self._add_per_metric_gauges(self.registry)
        self._add_per_evaluation_gauges(self.registry)
        self._add_counters(self.registry)
        self.controller = ControllerMetrics(self.registry)
        self.run_phases = RunPhaseMetrics(self.registry)
        # The per-metric series each Evaluation has, by gauge name, to remove those its next status lacks.
        self._series: dict[tuple[str, str], set[series.Series]] = {}
        # The series each Evaluation had dropped, so that each is counted once, not at every event.
        self._dropped: dict[tuple[str, str], set[series.Series]] = {}
        # The info, failure and regressed series of each Evaluation, by id of the gauge: their labels
        # change with the spec, the reason or the baseline, and the old series must go when they do.
        self._one_series: dict[int, dict[tuple[str, str], tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def _add_per_metric_gauges(self, r: CollectorRegistry) -> None:
        """The series per metric/filter pair of each task and group: scores, stderr, intervals, deltas."""
        self.score = Gauge(series.SCORE, "Aggregated metric of a task or group.", _SCORE, registry=r)
        self.stderr = Gauge(series.STDERR, "Standard error of assay_evaluation_score.", _SCORE, registry=r)
        self.score_ci_low = Gauge(
            series.SCORE_CI_LOW, "Lower end of the score's 95% interval, score - 1.96 stderr.", _SCORE, registry=r
        )
        self.score_ci_high = Gauge(
            series.SCORE_CI_HIGH, "Upper end of the score's 95% interval, score + 1.96 stderr.", _SCORE, registry=r
        )
        self.delta = Gauge(series.DELTA, "Candidate minus baseline score of a compared metric.", _DELTA, registry=r)
        self.delta_ci_low = Gauge(
            series.DELTA_CI_LOW, "Lower end of the delta's confidence interval (the comparison's).", _DELTA, registry=r
        )
        self.delta_ci_high = Gauge(
            series.DELTA_CI_HIGH, "Upper end of the delta's confidence interval (the comparison's).", _DELTA, registry=r
        )
        self._row_gauges = {
            series.SCORE: self.score,
            series.STDERR: self.stderr,
            series.SCORE_CI_LOW: self.score_ci_low,
            series.SCORE_CI_HIGH: self.score_ci_high,
            series.DELTA: self.delta,
            series.DELTA_CI_LOW: self.delta_ci_low,
            series.DELTA_CI_HIGH: self.delta_ci_high,
        }

    def _add_per_evaluation_gauges(self, r: CollectorRegistry) -> None:
        """The series per Evaluation: regressed, progress, phase, duration, ETA, info, failure."""
        self.regressed = Gauge(
            "assay_evaluation_regressed",
            "1 when the comparison with the baseline fails the gate (regressed, or inconclusive under a strict "
            "gate: the condition Regressed is True), else 0; absent without a comparison.",
            (*_EVAL, "baseline"),
            registry=r,
        )
        self.scores_trusted = Gauge(
            "assay_evaluation_scores_trusted",
            "1 when the run's sentinels all passed, 0 when one failed (condition ScoresTrusted); absent without checks.",
            _EVAL,
            registry=r,
        )
        self.documents_saved = Gauge(
            "assay_evaluation_documents_saved",
            "Documents a sequential run did not score: its gate knew each task's answer before the end "
            "(status.savedWork); absent for an ordinary run.",
            _EVAL,
            registry=r,
        )
        self.progress = Gauge(
            "assay_evaluation_progress_ratio", "Requests answered / requests in the run.", _EVAL, registry=r
        )
        self.phase = Gauge(
            "assay_evaluation_phase", "1 for the Evaluation's current phase, else 0.", (*_EVAL, "phase"), registry=r
        )
        self.duration = Gauge(
            "assay_evaluation_duration_seconds", "Run time of a finished Evaluation.", _EVAL, registry=r
        )
        self.eta = Gauge(
            "assay_evaluation_eta_seconds",
            "Estimated seconds left of a running Evaluation, at its last progress report (`progress_eta`).",
            _EVAL,
            registry=r,
        )
        self.info = Gauge(
            "assay_evaluation_info", "1 per Evaluation, labelled with its model, revision and suite.", _INFO, registry=r
        )
        self.failure = Gauge(
            "assay_evaluation_failure",
            "1 while an Evaluation has failed, labelled with the reason.",
            (*_EVAL, "reason"),
            registry=r,
        )

    def _add_counters(self, r: CollectorRegistry) -> None:
        """What this operator process did: completions, handler and sweep errors, dropped series."""
        self.completed = Counter(
            "assay_evaluations_completed", "Evaluations that finished, by result.", ("namespace", "result"), registry=r
        )
        self.reconcile_errors = Counter(
            "assay_operator_reconcile_errors", "Handler runs that raised.", ("handler",), registry=r
        )
        self.sweep_errors = Counter(
            "assay_sweep_errors",
            "Failures in a periodic sweep's pass, by sweep and kind "
            "(http_<status> or the error's class); the sweep goes on.",
            ("sweep", "kind"),
            registry=r,
        )
        self.dropped = Counter(
            "assay_metric_series_dropped",
            "Per-metric series not exported: over the cap per Evaluation.",
            ("namespace",),
            registry=r,
        )

    def observe(self, body: objects.Evaluation) -> None:
        """Set every gauge of one Evaluation from its current spec and status."""
        meta = body.get("metadata") or {}
        key = _key(meta.get("namespace", ""), meta.get("name", ""))
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        model = bounded(status.get("model") or _model_label(spec))
        comparison = status.get("comparison") if isinstance(status.get("comparison"), Mapping) else None
        rows = [
            *series.comparison_rows(key, comparison),
            *series.score_rows(key, model, status, self._score_sections(status)),
        ]
        with self._lock:
            self._set_rows(key, rows)
            self._observe_run(key, status)
            self.run_phases.observe(key, status, succeeded=status.get("phase") == conditions.SUCCEEDED)
            suite = bounded((meta.get("labels") or {}).get(SUITE_LABEL, ""))
            self._set_one(self.info, key, (model, bounded(_revision(spec)), suite))
            failed = status.get("phase") == conditions.FAILED
            self._set_one(self.failure, key, (bounded(status.get("reason") or "Unknown"),) if failed else None)
            trusted = series.scores_trusted(status)
            self._set_one(self.scores_trusted, key, None if trusted is None else (), value=trusted or 0.0)
            saved = series.documents_saved(status)
            self._set_one(self.documents_saved, key, None if saved is None else (), value=saved or 0.0)
            regressed = series.regressed(comparison, spec)
            if regressed is None:
                self._set_one(self.regressed, key, None)
            else:
                baseline, value = regressed
                self._set_one(self.regressed, key, (baseline,), value=value)

    def _observe_run(self, key: tuple[str, str], status: objects.EvaluationStatus) -> None:
        """Progress, phase, duration and ETA of the Evaluation's current run."""
        progress = status.get("progress") or {}
        total = progress.get("requestsTotal") or 0
        current = status.get("phase")
        if total:
            self.progress.labels(*key).set(min(1.0, (progress.get("requestsDone") or 0) / total))
        elif current == conditions.SUCCEEDED:
            self.progress.labels(*key).set(1.0)
        else:
            _remove(self.progress, key)  # a new run (its status cleared): no last run's value
        if current:
            for phase in (conditions.PENDING, conditions.RUNNING, conditions.SUCCEEDED, conditions.FAILED):
                self.phase.labels(*key, phase).set(1.0 if phase == current else 0.0)
        seconds = conditions.duration_seconds(status)
        if seconds is not None:
            self.duration.labels(*key).set(seconds)
        else:
            _remove(self.duration, key)
        eta = progress_eta.eta_seconds(status, now=datetime.datetime.now(datetime.timezone.utc))
        if eta is not None:
            self.eta.labels(*key).set(eta)
        else:
            _remove(self.eta, key)

    def _set_rows(self, key: tuple[str, str], rows: list[series.Row]) -> None:
        """Export the rows that fit under the cap, remove this Evaluation's other per-metric series,
        and count each series left out the first time it is."""
        kept, dropped = series.capped(rows, self.max_series)
        new = len(dropped - self._dropped.get(key, set()))
        if new:
            self.dropped.labels(key[0]).inc(new)
        self._dropped[key] = dropped
        wanted = {(name, row.labels): value for row in kept for name, value in row.values.items()}
        for name, labels in self._series.get(key, set()) - wanted.keys():
            _remove(self._row_gauges[name], labels)
        for (name, labels), value in wanted.items():
            self._row_gauges[name].labels(*labels).set(value)
        self._series[key] = set(wanted)

    def _set_one(
        self, gauge: Gauge, key: tuple[str, str], extra: tuple[str, ...] | None, *, value: float = 1.0
    ) -> None:
        """Keep exactly one series of `gauge` for this Evaluation (labels `key + extra`, at `value`), or none."""
        seen = self._one_series.setdefault(id(gauge), {})
        wanted = None if extra is None else (*key, *extra)
        previous = seen.pop(key, None)
        if previous is not None and previous != wanted:
            _remove(gauge, previous)
        if wanted is not None:
            gauge.labels(*wanted).set(value)
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
            for name, labels in self._series.pop(key, set()):
                _remove(self._row_gauges[name], labels)
            for gauge in (self.progress, self.duration, self.eta):
                _remove(gauge, key)
            for gauge in (self.info, self.failure, self.regressed, self.scores_trusted, self.documents_saved):
                self._set_one(gauge, key, None)
            for phase in (conditions.PENDING, conditions.RUNNING, conditions.SUCCEEDED, conditions.FAILED):
                _remove(self.phase, (*key, phase))
            self.run_phases.forget(key)

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

    def start_server(
        self,
        port: int,
        addr: str = "0.0.0.0",
        *,
        authorizer: TokenAuthorizer | None = None,
        tls: TlsFiles | None = None,
    ) -> tuple[Any, threading.Thread]:
        """Serve /metrics of this registry (`metrics_server`); port 0 picks a free one (`server.server_port`)."""
        return metrics_server.serve(self.registry, port=port, addr=addr, authorizer=authorizer, tls=tls)


def max_series_from_env(env: Mapping[str, str]) -> int:
    """$ASSAY_MAX_SERIES_PER_EVALUATION (the chart's metrics.maxSeriesPerEvaluation) in `env`, else DEFAULT_MAX_SERIES."""
    return _max_series(env.get(MAX_SERIES_ENV, ""))


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
    except Exception:
        return str(spec.get("model", ""))
