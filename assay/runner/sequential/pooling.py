"""What a sequential run gates as one: a task, or a group whose score is the mean of its documents.

A group such as MMLU (57 subtasks under four subgroups) reports `acc` as the mean of its
subtasks' accuracies weighted by their sizes: the mean over all of its documents. Gating
each subtask on its own would spend most of a small subtask before its own sequence
decides; the group's question is one question about one mean. So such a group is *pooled*:
its documents, every subtask's, run in one seeded random order under one confidence
sequence on the group's metric, and all its subtasks stop together.

A group is pooled when every entry of its `aggregate_metric_list` is a mean weighted by size
and at least one of them is a deciding metric (`watch.deciding_metrics`) of every one of its
tasks. A group that aggregates otherwise (its subtasks weighted equally, or a function of
its own) asks about another mean than its documents' one, which one pooled sequence does
not answer: its members are planned on their own (a subgroup may still be pooled, each task
otherwise gated alone), and the group's own figure is compared at the end as in any run.
The choice depends only on the tasks' configuration, so every rank plans the same units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from assay.compare.sequential import MetricBounds
from assay.runner.doc_work import DocWork
from assay.runner.sequential.watch import deciding_metrics
from assay.runner.tasks.groups import Group
from assay.runner.tasks.index import LoadedTasks
from assay.runner.tasks.task import Task

Deciding = dict[str, tuple[str, int, MetricBounds]]
"""`metric,filter` → (metric, filter index in the task, bounds), as `deciding_metrics` gives them."""


@dataclasses.dataclass(frozen=True)
class Unit:
    """Documents gated as one: one task's, or a pooled group's (its tasks' one after the other)."""

    name: str
    """The task's or group's name: it seeds the order and is what maxDropFor rules match."""
    items: list[DocWork]
    tasks: list[Task]
    group: Group | None = None
    metrics: Mapping[str, Deciding] = dataclasses.field(default_factory=dict)
    """Per task, its deciding metrics (a pooled group's keys, each with the task's own filter index)."""


def group_metrics(group: Group) -> dict[str, Deciding]:
    """Per task of `group`, the keys the pooled group decides on; empty when the group is not pooled."""
    entries = group.aggregate_metric_list
    if not entries or any(e.aggregation != "mean" or not e.weight_by_size for e in entries):
        return {}
    tasks = group.leaf_tasks()
    if not tasks:
        return {}
    per_task = {task.name: deciding_metrics(task) for task in tasks}
    shared = set.intersection(*(set(found) for found in per_task.values()))
    keys = {
        key
        for key in shared
        for entry in entries
        if key.split(",", 1)[0] == entry.metric
        and (entry.filter_list is None or key.split(",", 1)[1] in entry.filter_list)
    }
    # one direction and range per key across the tasks, or the pooled difference means nothing
    keys = {key for key in keys if len({per_task[task.name][key][2] for task in tasks}) == 1}
    if not keys:
        return {}
    return {name: {key: found[key] for key in sorted(keys)} for name, found in per_task.items()}


def units(loaded: LoadedTasks, work: Mapping[str, list[DocWork]]) -> list[Unit]:
    """The run's units in the order asked for: pooled groups, and every other task on its own."""
    planned: list[Unit] = []
    placed: set[str] = set()

    def visit(node: Task | Group) -> None:
        if isinstance(node, Group):
            pooled = group_metrics(node)
            if not pooled:
                for child in node:
                    visit(child)
                return
            tasks = [task for task in node.leaf_tasks() if task.name not in placed]
            placed.update(task.name for task in tasks)
            items = [item for task in tasks for item in work.get(task.name, [])]
            planned.append(Unit(node.name, items, tasks, node, {task.name: pooled[task.name] for task in tasks}))
        elif node.name not in placed:
            placed.add(node.name)
            planned.append(
                Unit(node.name, list(work.get(node.name, [])), [node], None, {node.name: deciding_metrics(node)})
            )

    for root in loaded.roots:
        visit(root)
    for task in loaded.tasks.values():  # anything the roots did not reach (none today)
        visit(task)
    return [unit for unit in planned if unit.items]
