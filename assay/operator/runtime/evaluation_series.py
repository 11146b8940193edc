"""The per-metric series of one Evaluation, read from its status, and the cap on them.

An Evaluation's status holds scores (per task or group, metric and filter: a value and its
stderr) and, when it names a baseline, a comparison with that run (per task, metric and
filter: the delta and its confidence interval), as `assay.spec.status` types and reads
them. Each entry becomes one `Row`: the labels
its series share and a value for each gauge that has one. Under the cap a row is kept or
left out whole, so a score is never exported without its stderr and interval, nor a delta
without its interval.

A score's interval is the normal approximation's 95% one, score ∓ 1.96·stderr, which is
what a reader of score and stderr would draw; a delta's interval is the comparison's own
(paired test or bootstrap, `status.comparison.rows[].ciLow/ciHigh`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from assay import scores
from assay.operator.build.metric_labels import bounded
from assay.operator.decide import regression
from assay.spec import status as schema

SCORE = "assay_evaluation_score"
STDERR = "assay_evaluation_score_stderr"
SCORE_CI_LOW = "assay_evaluation_score_ci_low"
SCORE_CI_HIGH = "assay_evaluation_score_ci_high"
DELTA = "assay_evaluation_delta"
DELTA_CI_LOW = "assay_evaluation_delta_ci_low"
DELTA_CI_HIGH = "assay_evaluation_delta_ci_high"
Z_95 = 1.96
"""Standard errors each side of a score in its 95% interval (normal approximation)."""

Labels = tuple[str, ...]
Series = tuple[str, Labels]
"""(gauge name, label values): one exported series."""


@dataclasses.dataclass(frozen=True)
class Row:
    """The series of one score or one compared metric: shared labels, a value per gauge name."""

    labels: Labels
    values: Mapping[str, float]
    """Only the gauges that have a value: a score without stderr has no stderr or interval."""


def score_rows(key: Labels, model: str, status: Mapping[str, Any], sections: Iterable[str]) -> list[Row]:
    """A row per reported (task or group, metric, filter) of `sections` ("groups", "results"), in order;
    each labelled with whether the run's scores are trusted (`trusted_label`).

    A task that is also a group (lm-eval lists a group's aggregate in both) is one row, at
    its first place.
    """
    found: dict[Labels, Row] = {}
    trust = trusted_label(status)
    for section in sections:
        for task, metrics in schema.metric_tables(status, section).items():
            for metric_filter, entry in metrics.items():
                metric, filter_name = scores.split_key(metric_filter)
                labels = (*key, model, bounded(task), bounded(metric), bounded(filter_name or "none"), trust)
                found[labels] = Row(labels, _score_values(entry))
    return [row for row in found.values() if row.values]


def trusted_label(status: Mapping[str, Any]) -> str:
    """The `trusted` label of a run's score series: "true" or "false" as its sentinels found,
    "unknown" where the run made no checks (turned off, or a runner older than them)."""
    trusted = schema.trusted(status)
    return "unknown" if trusted is None else "true" if trusted else "false"


def scores_trusted(status: Mapping[str, Any]) -> float | None:
    """1.0 when the run's sentinels all passed, 0.0 when one failed; None without findings."""
    label = trusted_label(status)
    return None if label == "unknown" else 1.0 if label == "true" else 0.0


def documents_saved(status: Mapping[str, Any]) -> float | None:
    """Documents a sequential run did not score (`status.savedWork.documents`); None for an ordinary run."""
    saved = status.get("savedWork")
    return schema.finite_number(saved.get("documents")) if isinstance(saved, Mapping) else None


def _score_values(entry: schema.MetricEntry) -> dict[str, float]:
    value, stderr = entry.get("value"), entry.get("stderr")
    values: dict[str, float] = {}
    if value is not None:
        values[SCORE] = value
    if stderr is not None:
        values[STDERR] = stderr
        if value is not None:
            values[SCORE_CI_LOW] = value - Z_95 * stderr
            values[SCORE_CI_HIGH] = value + Z_95 * stderr
    return values


def comparison_rows(key: Labels, comparison: Mapping[str, Any] | None) -> list[Row]:
    """A row per compared (task, metric, filter) of `status.comparison`, worst first as the runner wrote them.

    Nothing when the comparison could not be made (`error`).
    """
    if not comparison or comparison.get("error") is not None:
        return []
    baseline = bounded(comparison.get("baseline") or "")
    found: dict[Labels, Row] = {}
    for entry in comparison.get("rows") or []:
        if not isinstance(entry, Mapping):
            continue
        labels = (
            *key,
            baseline,
            bounded(entry.get("task") or ""),
            bounded(entry.get("metric") or ""),
            bounded(entry.get("filter") or "none"),
        )
        values = {
            name: number
            for name, field in ((DELTA, "delta"), (DELTA_CI_LOW, "ciLow"), (DELTA_CI_HIGH, "ciHigh"))
            if (number := schema.finite_number(entry.get(field))) is not None
        }
        if values and labels not in found:
            found[labels] = Row(labels, values)
    return list(found.values())


def regressed(comparison: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> tuple[str, float] | None:
    """(baseline label, 1.0 where the comparison fails the gate else 0.0); None without a comparison's verdict.

    Failing is `regression.fails_gate`, the rule of the condition Regressed: a regressed
    verdict, or an inconclusive one under a strict gate."""
    if not comparison or comparison.get("error") is not None or not comparison.get("verdict"):
        return None
    return bounded(comparison.get("baseline") or ""), 1.0 if regression.fails_gate(comparison, spec) else 0.0


def capped(rows: Iterable[Row], limit: int) -> tuple[list[Row], set[Series]]:
    """The rows whose series fit in `limit`, in order, and the series of the rows left out."""
    kept: list[Row] = []
    dropped: set[Series] = set()
    count = 0
    for row in rows:
        if count + len(row.values) <= limit:
            kept.append(row)
            count += len(row.values)
        else:
            dropped |= {(name, row.labels) for name in row.values}
    return kept, dropped
