"""The condensed results and progress an Evaluation's `status` holds.

Status lives in etcd beside every other object, so what goes there is condensed and
bounded: per task the metric values and their stderr, groups, sample counts and task
versions, never samples; full results go to the output volume. `status_sink` writes it; the fields are typed in
`assay.spec.status`, which the operator's and the CLI's readers share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from assay import echoed_text, scores
from assay.run_results import ABSENT, RunResults
from assay.runner.results import stopped_early
from assay.spec import status as schema

MAX_STATUS_BYTES = 256 * 1024
"""Bound on the condensed results in status; etcd's object limit is 1.5 MiB."""
MAX_SENTINEL_FAILURES = 20
SENTINEL_CHARS = 512


def condense_results(run: RunResults, *, max_bytes: int = MAX_STATUS_BYTES) -> schema.RunnerResults:
    """The run's results → the `status` fields results, groups, nSamples, versions, message.

    Each task becomes `{"metric,filter": {"value": v, "stderr": s}}` (stderr None where
    lm-eval says "N/A"). When the whole is over `max_bytes`, only each task's headline
    (its first metric,filter) is kept, then only groups, and `message` says so.
    """
    tasks = {task.name: _condense_task(result) for task, result in run.rows()}
    groups = {task.name: _condense_task(result) for task, result in run.rows("groups")}
    n_samples = {task.name: _sample_counts(task.n_samples) for task in run.tasks.values() if task.n_samples is not None}
    # lm-eval lists versions sorted by name
    versions = {
        task.name: str(task.version)
        for task in sorted(run.tasks.values(), key=lambda task: task.name)
        if task.version is not ABSENT and task.version is not None
    }
    status: schema.RunnerResults = {"results": tasks, "groups": groups, "nSamples": n_samples, "versions": versions}
    if run.sentinels() is not None:
        status["sentinels"] = condense_sentinels(run)
    saved = stopped_early.saved_work(run)
    if saved is not None:  # a sequential run: the documents and model-seconds its stops saved
        status["savedWork"] = saved
    total = sum(len(metrics) for metrics in tasks.values())
    if _size(status) <= max_bytes:
        status["message"] = f"Evaluated {len(tasks)} tasks."
        return status
    status["results"] = {name: _headline(metrics) for name, metrics in tasks.items()}
    status["groups"] = {name: _headline(metrics) for name, metrics in groups.items()}
    kept = len(status["results"])
    note = f"Results truncated to headline metrics ({kept} of {total} values) to fit status; full results are on the output volume."
    if _size(status) > max_bytes:
        status["results"] = {}
        status["nSamples"] = {}
        note = (
            f"Results of {len(tasks)} tasks are too large for status; kept group headlines only; "
            "full results are on the output volume."
        )
    status["message"] = note
    return status


def condense_sentinels(run: RunResults) -> schema.Sentinels:
    """status.sentinels: whether the run's scores passed their checks, and the failures, bounded."""
    failed = run.untrusted()
    failures: list[schema.SentinelFailure] = [
        {"task": echoed_text.bounded(task, SENTINEL_CHARS), "reason": echoed_text.bounded(reason, SENTINEL_CHARS)}
        for task, reason in failed[:MAX_SENTINEL_FAILURES]
    ]
    if not failed:
        message = "Every sentinel check passed."
    else:
        more = f" ({len(failed) - 1} more failed)" if len(failed) > 1 else ""
        message = f"{failed[0][0]}: {failed[0][1]}{more}."
    return {"trusted": not failed, "message": echoed_text.bounded(message, 1024), "failures": failures}


def _condense_task(result: scores.TaskScores) -> dict[str, schema.MetricEntry]:
    # JSON has no NaN/inf (they become None), and lm-eval writes "N/A" for a missing stderr.
    return {
        score.key: {"value": schema.finite_number(score.value), "stderr": schema.finite_number(score.stderr)}
        for score in result.values
        if _is_number(score.value)
    }


def _sample_counts(counts: Mapping[str, Any]) -> schema.SampleCounts:
    kept: schema.SampleCounts = {}
    if _is_number(counts.get("original")):
        kept["original"] = int(counts["original"])
    if _is_number(counts.get("effective")):
        kept["effective"] = int(counts["effective"])
    return kept


def _headline(metrics: Mapping[str, schema.MetricEntry]) -> dict[str, schema.MetricEntry]:
    first = next(iter(metrics.items()), None)
    return dict([first]) if first else {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _size(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":")).encode())


def progress_status(done: int, total: int, *, updated: str | None = None) -> schema.Progress:
    """status.progress; `summary` is what `kubectl get evals` shows (Progress column), `updated`
    when it was true. No ETA: a reader computes it from status.timing.requestsStarted, the share
    done and `updated` (`assay.operator.decide.progress_eta`), so that it needs no write to stay current."""
    percent = int(100 * done / total) if total > 0 else 0
    status: schema.Progress = {"requestsDone": int(done), "requestsTotal": int(total)}
    status["summary"] = f"{int(done)}/{int(total)} ({percent}%)"
    if updated is not None:
        status["updated"] = updated
    return status
