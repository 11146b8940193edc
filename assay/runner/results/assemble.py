"""Rank 0's last step: every document's scores → lm-eval's results dict.

Per task and filter, the per-document values are aggregated (with lm-eval's stderr) into
`TaskScores` records; groups aggregate their leaf tasks' records bottom-up; only then is
lm-eval 0.4.13's dict made, its `metric,filter` keys by `assay.scores`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from assay import scores
from assay.runner.scoring.records import DocScores
from assay.runner.scoring.stderr import stderr_for
from assay.runner.tasks.groups import Group, groups_bottom_up
from assay.runner.tasks.index import LoadedTasks
from assay.runner.tasks.task import Task

_CORPUS_METRICS = ("bleu", "chrf", "chrf++", "ter")


def results_dict(loaded: LoadedTasks, gathered: Iterable[Iterable[DocScores]], *, bootstrap_iters: int | None, log_samples: bool) -> dict[str, Any]:
    """lm-eval's results dict from every rank's DocScores (rank 0 only)."""
    by_task: dict[str, list[DocScores]] = defaultdict(list)
    for rank_records in gathered:
        for record in rank_records:
            by_task[record.task].append(record)
    task_scores: dict[str, scores.TaskScores] = {}
    configs, versions, n_shot, higher, n_samples, logged = {}, {}, {}, {}, {}, {}
    for name, task in loaded.tasks.items():
        records = sorted(by_task.get(name, []), key=lambda r: (r.filter_index, r.position))
        config = task.dump_config()
        task_scores[name] = aggregate_task(task, records, alias=config.get("task_alias", name), bootstrap_iters=bootstrap_iters)
        configs[name] = config
        versions[name] = task.version
        n_shot[name] = config.get("num_fewshot", 0)
        higher[name] = task.metrics.higher_is_better_for(value.metric for value in task_scores[name].values)
        n_samples[name] = {"original": len(task.eval_docs), "effective": task_scores[name].sample_len}
        logged[name] = [r.sample for r in records]
    return _with_groups(loaded, task_scores, configs=configs, versions=versions, n_shot=n_shot, higher=higher,
                        n_samples=n_samples, logged=logged if log_samples else None)  # fmt: skip


def aggregate_task(task: Task, records: list[DocScores], *, alias: str, bootstrap_iters: int | None) -> scores.TaskScores:
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


def _task_row(result: scores.TaskScores) -> dict[str, Any]:
    return {"name": result.name, "alias": result.alias, "sample_len": result.sample_len, **scores.row_entries(result.values)}


def _group_row(result: scores.TaskScores) -> dict[str, Any]:
    row: dict[str, Any] = {"alias": result.alias, "name": result.name}
    if result.sample_len is None:  # a group without aggregate_metric_list only nests its children
        return row
    row["sample_len"] = result.sample_len
    row.update(scores.row_entries(result.values))
    counts = {value.key: value.sample_count for value in result.values if value.sample_count is not None}
    if counts:
        row["sample_count"] = counts
    return row


def _merged_higher_is_better(group: Group, higher: dict[str, dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for child in group.child_names:
        for metric, better in higher.get(child, {}).items():
            if metric not in merged:
                merged[metric] = better
            elif merged[metric] is not None and merged[metric] != better:
                merged[metric] = None
    return merged


def _with_groups(
    loaded: LoadedTasks,
    task_scores: dict[str, scores.TaskScores],
    *,
    configs: dict[str, Any],
    versions: dict[str, Any],
    n_shot: dict[str, Any],
    higher: dict[str, dict[str, Any]],
    n_samples: dict[str, Any],
    logged: dict[str, Any] | None,
) -> dict[str, Any]:
    all_groups = list(loaded.groups.values())
    metrics_rows = {name: _task_row(result) for name, result in task_scores.items()}
    for group in groups_bottom_up(loaded.groups):
        aggregated = group.aggregate(task_scores)
        task_scores[group.name] = aggregated
        metrics_rows[group.name] = _group_row(aggregated)
        versions[group.name] = group.version
    for group in all_groups:
        shots = {n_shot[c] for c in group.child_names if c in n_shot}
        if len(shots) == 1:
            n_shot[group.name] = shots.pop()
        merged = _merged_higher_is_better(group, higher)
        if merged:
            higher[group.name] = merged
    group_rows = {g.name: dict(metrics_rows[g.name]) for g in all_groups if g.has_aggregation and g.name in metrics_rows}
    results: dict[str, Any] = {
        "results": {name: dict(row) for name, row in metrics_rows.items()},
        **({"groups": group_rows} if group_rows else {}),
        "group_subtasks": {g.name: g.child_names for g in all_groups},
        "configs": dict(sorted(configs.items())),
        "versions": dict(sorted(versions.items())),
        "n-shot": dict(sorted(n_shot.items())),
        "higher_is_better": dict(sorted(higher.items())),
        "n-samples": n_samples,
    }
    if logged is not None:
        results["samples"] = logged
    return results
