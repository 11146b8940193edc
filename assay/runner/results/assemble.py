"""Rank 0's last step: every document's scores → the run's `RunResults`.

Per task and filter, the per-document values are aggregated (with lm-eval's stderr) into
`TaskScores` records; groups aggregate their leaf tasks' records bottom-up, and take the
n-shot and higher_is_better their children agree on. lm-eval's dict is rendered from the
record (`assay.run_results`), its `metric,filter` keys by `assay.scores`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from assay import scores
from assay.run_options import SentinelSettings
from assay.run_results import ABSENT, RunResults, TaskResult
from assay.runner.results import sentinel_report
from assay.runner.scoring.records import DocScores
from assay.runner.scoring.stderr import stderr_for
from assay.runner.tasks.groups import Group, groups_bottom_up
from assay.runner.tasks.index import LoadedTasks
from assay.runner.tasks.task import Task

_CORPUS_METRICS = ("bleu", "chrf", "chrf++", "ter")


def run_results(
    loaded: LoadedTasks,
    gathered: Iterable[Iterable[DocScores]],
    *,
    bootstrap_iters: int | None,
    keep_samples: bool,
    sentinels: SentinelSettings | None = None,
    served: Mapping[str, int] | None = None,
) -> RunResults:
    """The run's results from every rank's DocScores (rank 0 only), with the sentinels' block
    when `sentinels` are enabled (`served`: a served model's request health, if counted)."""
    by_task: dict[str, list[DocScores]] = defaultdict(list)
    for rank_records in gathered:
        for record in rank_records:
            by_task[record.task].append(record)
    tasks: dict[str, TaskResult] = {}
    for name, task in loaded.tasks.items():
        records = sorted(by_task.get(name, []), key=lambda r: (r.filter_index, r.position))
        tasks[name] = _task_result(task, records, bootstrap_iters=bootstrap_iters, keep_samples=keep_samples)
    all_groups = list(loaded.groups.values())
    aggregated: dict[str, scores.TaskScores] = {
        name: result.scores for name, result in tasks.items() if result.scores is not None
    }
    for group in groups_bottom_up(loaded.groups):
        aggregated[group.name] = group.aggregate(aggregated)
    # lm-eval merges n-shot and higher_is_better in its listing order, parents before their
    # sub-groups: a sub-group not yet merged counts as having neither (kept on purpose).
    merged: dict[str, TaskResult] = dict(tasks)
    for group in all_groups:
        merged[group.name] = _group_result(group, aggregated[group.name], merged)
    for group in groups_bottom_up(loaded.groups):
        tasks[group.name] = merged[group.name]
    evidence = {name: [r.evidence for r in by_task.get(name, []) if r.evidence is not None] for name in loaded.tasks}
    return RunResults(
        tasks=tasks,
        groups=tuple(group.name for group in all_groups if group.has_aggregation),
        group_subtasks={group.name: tuple(group.child_names) for group in all_groups},
        run_info={"sentinels": sentinel_report.block(tasks, evidence, sentinels, served)}
        if sentinels is not None and sentinels.enabled
        else {},
    )


def _task_result(
    task: Task, records: list[DocScores], *, bootstrap_iters: int | None, keep_samples: bool
) -> TaskResult:
    config = task.dump_config()
    result = aggregate_task(task, records, alias=config.get("task_alias", task.name), bootstrap_iters=bootstrap_iters)
    return TaskResult(
        name=task.name,
        scores=result,
        config=config,
        version=task.version,
        n_shot=config.get("num_fewshot", 0),
        higher_is_better=task.metrics.higher_is_better_for(value.metric for value in result.values),
        n_samples={"original": len(task.eval_docs), "effective": result.sample_len},
        samples=tuple(r.sample for r in records if r.sample is not None) if keep_samples else None,
    )


def aggregate_task(
    task: Task, records: list[DocScores], *, alias: str, bootstrap_iters: int | None
) -> scores.TaskScores:
    """Per metric and filter, in first-seen order: the aggregated value and lm-eval's stderr."""
    raw: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for record in records:
        for metric, value in record.scores.items():
            raw[(metric, task.filters[record.filter_index].name)].append(value)
    values: list[scores.MetricValue] = []
    for (metric, filter_key), items in raw.items():
        aggregation = task.metrics.aggregation_for(metric)
        stderr = None
        if isinstance(bootstrap_iters, int) and bootstrap_iters > 0 and len(items) > 1:
            iters = min(bootstrap_iters, 100) if metric in _CORPUS_METRICS else bootstrap_iters
            stderr = stderr_for(aggregation, items, iters, metric=metric)
        values.append(scores.MetricValue(metric, filter_key, aggregation(items), stderr))
    sample_len = max((len(items) for items in raw.values()), default=0)
    return scores.TaskScores(task.name, alias, tuple(values), sample_len)


def _group_result(group: Group, aggregated: scores.TaskScores, tasks: dict[str, TaskResult]) -> TaskResult:
    """A group's row, version, and the n-shot and higher_is_better its children agree on."""
    children = [tasks[child] for child in group.child_names if child in tasks]
    shots = {child.n_shot for child in children if child.n_shot is not ABSENT}
    merged = _merged_higher_is_better(children)
    return TaskResult(
        name=group.name,
        scores=aggregated,
        version=group.version,
        n_shot=shots.pop() if len(shots) == 1 else ABSENT,
        higher_is_better=merged or None,
    )


def _merged_higher_is_better(children: list[TaskResult]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for child in children:
        for metric, better in (child.higher_is_better or {}).items():
            if metric not in merged:
                merged[metric] = better
            elif merged[metric] is not None and merged[metric] != better:
                merged[metric] = None
    return merged
