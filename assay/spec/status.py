"""An Evaluation's `status`, typed: what the runner writes and the operator, its metrics and the CLI read.

The runner's rank 0 writes the scores (`assay.runner.results.condensed`), the progress
(`status_sink`) and the comparison with a baseline (`versus_baseline`); the operator writes
the phase, conditions and identity; the operator's metrics (`operator.runtime.evaluation_series`)
and `assay results`/`assay get` (`assay.cli_cluster`) read them back. All of them name the
fields through these types, and read scores through `metric_tables`, so a field renamed on
one side is a type error or a failing test (tests/spec/test_status_schema.py holds this
module, the runner's writer, both readers and the CRD's status schema to one another).

Status travels as JSON (a patch, a watch event): these are TypedDicts of that JSON, not
records. Every field may be missing (`total=False`) except where the CRD requires it (a
condition's five fields): a status being filled in, or written by an older runner, lacks some.
Below both `assay.runner` and `assay.operator`, so it imports neither.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, TypedDict, cast

RESULTS = "results"
GROUPS = "groups"
SECTIONS = (RESULTS, GROUPS)
"""The two tables of scores in status: per task, and per group (the group's aggregate)."""


class MetricEntry(TypedDict, total=False):
    """One `"metric,filter"` of a task: the value, and its standard error (None where not computed)."""

    value: float | None
    stderr: float | None


MetricTable = dict[str, dict[str, MetricEntry]]
"""Per task (or group), per `"metric,filter"`: `status.results` and `status.groups`."""


class SampleCounts(TypedDict, total=False):
    original: int
    """Documents in the task."""
    effective: int
    """Documents evaluated after limit or samples."""


class SentinelFailure(TypedDict, total=False):
    task: str
    reason: str


class Sentinels(TypedDict, total=False):
    """The run's own plausibility checks (`assay.runner.results.sentinel_check`)."""

    trusted: bool
    message: str
    failures: list[SentinelFailure]


class Progress(TypedDict, total=False):
    requestsDone: int
    requestsTotal: int
    etaSeconds: int  # written by runners of earlier versions; readers compute the ETA now
    updated: str
    summary: str


class OutputFiles(TypedDict, total=False):
    written: bool
    message: str


class RunTiming(TypedDict, total=False):
    """Rank 0's marks of the run's cold path (`assay.runner.results.run_timing`), RFC 3339."""

    runnerStarted: str
    requestsStarted: str
    finished: str


class ComparisonRow(TypedDict, total=False):
    """One compared (task or group, metric, filter); a number that is not finite is None."""

    task: str
    metric: str
    filter: str
    n: int
    baseline: float | None
    candidate: float | None
    delta: float | None
    ciLow: float | None
    ciHigh: float | None
    pValue: float | None
    mde: float | None
    test: str
    verdict: str


class SequentialStop(TypedDict, total=False):
    """One task of a sequential run: documents scored of the total, why it stopped, the interval then."""

    task: str
    documents: int
    total: int
    stopped: str
    metric: str
    lower: float | None
    upper: float | None
    subtasks: int
    """A pooled group's row (`task` the group's name): how many tasks it gated as one."""


class SequentialStops(TypedDict, total=False):
    """`status.comparison.sequential` (`assay.runner.results.stopped_early.status_block`)."""

    seed: int
    tasksOmitted: int
    tasks: list[SequentialStop]


class SavedWork(TypedDict, total=False):
    """`status.savedWork`: what a sequential run's early stops saved (`stopped_early.saved_work`)."""

    documents: int
    ofDocuments: int
    modelSeconds: float


class Comparison(TypedDict, total=False):
    """This run against `spec.baseline` (`assay.runner.results.versus_baseline.as_status`)."""

    baseline: str
    baselineRun: str
    verdict: str
    message: str
    error: str
    rowsOmitted: int
    notes: list[str]
    rows: list[ComparisonRow]
    sequential: SequentialStops


class TaskSource(TypedDict, total=False):
    configMap: str
    resourceVersion: str
    tasks: list[str]


class _ConditionFields(TypedDict):
    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class Condition(_ConditionFields, total=False):
    """A condition of the Evaluation (metav1.Condition): the CRD requires all but observedGeneration."""

    observedGeneration: int


class RunnerResults(TypedDict, total=False):
    """What rank 0 writes with the scores (`condensed.condense_results`)."""

    results: MetricTable
    groups: MetricTable
    nSamples: dict[str, SampleCounts]
    versions: dict[str, str]
    sentinels: Sentinels
    savedWork: SavedWork
    message: str


class EvaluationStatus(RunnerResults, total=False):
    """The whole status: the runner's fields above and below, and the operator's."""

    # the runner's, besides the scores
    runnerMessage: str
    progress: Progress
    timing: RunTiming
    outputFiles: OutputFiles
    comparison: Comparison
    # the operator's
    phase: str
    reason: str
    observedGeneration: int
    model: str
    jobName: str
    outputDir: str
    rerunToken: str
    startTime: str
    completionTime: str
    conditions: list[Condition]
    taskSources: list[TaskSource]


def of(evaluation: Mapping[str, Any]) -> EvaluationStatus:
    """An Evaluation's status as read back (from the API server, a watch event or a file), typed;
    empty when it has none. Its readers then name fields the type knows, or mypy says so."""
    return cast(EvaluationStatus, evaluation.get("status") or {})


def finite_number(value: Any) -> float | None:
    """A finite number as float; None for null, lm-eval's "N/A", a bool, NaN, ±inf or anything else.

    JSON has no NaN or infinity, so the runner writes None for them, and the API server
    returns `1.0` as `1`: every reader turns what it finds back into a float through this.
    A numpy scalar (the comparison's statistics) counts as the number it is."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        return None
    return float(value)


def metric_tables(status: Mapping[str, Any], section: str) -> MetricTable:
    """`status.results` or `status.groups` as read back: in order, every number a finite float or None.

    An entry that is not a mapping reads as one without value or stderr; the readers decide
    what a missing value means (the metrics export nothing for it, the table prints N/A)."""
    tables: MetricTable = {}
    for name, metrics in (status.get(section) or {}).items():
        entries: dict[str, MetricEntry] = {}
        for key, entry in (metrics if isinstance(metrics, Mapping) else {}).items():
            found = entry if isinstance(entry, Mapping) else {}
            entries[str(key)] = {
                "value": finite_number(found.get("value")),
                "stderr": finite_number(found.get("stderr")),
            }
        tables[str(name)] = entries
    return tables


def sample_counts(status: Mapping[str, Any]) -> dict[str, SampleCounts]:
    """`status.nSamples` as read back: per task, the counts that are whole numbers."""
    counts: dict[str, SampleCounts] = {}
    for name, found in (status.get("nSamples") or {}).items():
        if isinstance(found, Mapping):
            kept: SampleCounts = {}
            if (original := finite_number(found.get("original"))) is not None:
                kept["original"] = int(original)
            if (effective := finite_number(found.get("effective"))) is not None:
                kept["effective"] = int(effective)
            counts[str(name)] = kept
    return counts


def trusted(status: Mapping[str, Any]) -> bool | None:
    """Whether the run's sentinels all passed; None where the run made no checks (turned off,
    or a runner older than them)."""
    found = status.get("sentinels")
    verdict = found.get("trusted") if isinstance(found, Mapping) else None
    return verdict if isinstance(verdict, bool) else None


def sentinel_failures(status: Mapping[str, Any]) -> list[SentinelFailure]:
    """`status.sentinels.failures` as read back: each with its task and reason as text."""
    found = status.get("sentinels")
    failures = found.get("failures") if isinstance(found, Mapping) else None
    return [
        {"task": str(failure.get("task") or ""), "reason": str(failure.get("reason") or "")}
        for failure in failures or ()
        if isinstance(failure, Mapping)
    ]
