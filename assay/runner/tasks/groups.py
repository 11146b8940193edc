"""Groups: named collections of tasks (and sub-groups) that may aggregate their metrics.

A group with an `aggregate_metric_list` reports the size-weighted (or plain) mean of its
leaf tasks' metrics with a pooled stderr, as lm-eval 0.4.12+ does; a group without one
only nests its children in the table. Tags never aggregate: they expand to tasks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from assay import scores
from assay.booleans import strict_bool
from assay.errors import UserError


@dataclasses.dataclass(frozen=True)
class AggregateMetric:
    """One entry of a group's `aggregate_metric_list`."""

    metric: str
    filter_list: tuple[str, ...] | None = None
    """Filters to aggregate; None means every filter the children report for the metric."""
    aggregation: str | Callable[..., float] = "mean"
    weight_by_size: bool = True

    @classmethod
    def from_yaml(cls, raw: dict[str, Any], group: str) -> AggregateMetric:
        if "metric" not in raw:
            raise UserError(f"Group {group!r}: every aggregate_metric_list entry needs a 'metric' key.")
        aggregation = raw.get("aggregation", "mean")
        if aggregation != "mean" and not callable(aggregation):
            raise UserError(
                f"Group {group!r}: aggregation {aggregation!r} is not supported; use 'mean' or a !function."
            )
        filters = raw.get("filter_list")
        if isinstance(filters, str):
            filters = [filters]
        return cls(
            metric=raw["metric"],
            filter_list=tuple(filters) if filters is not None else None,
            aggregation=aggregation,
            # A quoted "false" is not true: read as every other boolean (it also decides a
            # sequential run's pooling).
            weight_by_size=strict_bool(
                raw.get("weight_by_size", True), name=f"group {group!r} aggregate_metric_list weight_by_size"
            ),
        )


GROUP_KEYS = ("group", "group_alias", "task", "aggregate_metric_list", "metadata")


@dataclasses.dataclass
class Group:
    name: str
    alias: str | None = None
    aggregate_metric_list: list[AggregateMetric] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None
    raw_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    children: dict[str, Group | Any] = dataclasses.field(default_factory=dict)

    def add(self, child: Any) -> None:
        self.children[child.name] = child

    def __iter__(self) -> Iterator[Any]:
        return iter(self.children.values())

    @property
    def child_names(self) -> list[str]:
        return list(self.children)

    @property
    def version(self) -> str:
        return str(self.metadata.get("version", "N/A")) if self.metadata else "N/A"

    @property
    def has_aggregation(self) -> bool:
        return bool(self.aggregate_metric_list)

    def leaf_tasks(self) -> list[Any]:
        leaves: list[Any] = []
        for child in self.children.values():
            leaves.extend(child.leaf_tasks() if isinstance(child, Group) else [child])
        return leaves

    def subgroups(self, recursive: bool = True) -> list[Group]:
        found: list[Group] = []
        for child in self.children.values():
            if isinstance(child, Group):
                found.append(child)
                if recursive:
                    found.extend(child.subgroups())
        return found

    def config_dict(self) -> dict[str, Any]:
        return {
            "group": self.name,
            "group_alias": self.alias,
            "task": self.raw_config.get("task"),
            "aggregate_metric_list": [dataclasses.asdict(agg) for agg in self.aggregate_metric_list] or None,
            "metadata": self.metadata,
        }

    def aggregate(self, task_scores: Mapping[str, scores.TaskScores]) -> scores.TaskScores:
        """This group's results: each aggregate metric over its leaf tasks, with pooled stderr."""
        if not self.aggregate_metric_list:
            return scores.TaskScores(self.name, self.alias or self.name)
        leaves = [task_scores[task.name] for task in self.leaf_tasks() if task.name in task_scores]
        values: list[scores.MetricValue] = []
        for agg in self.aggregate_metric_list:
            reported = sorted({v.filter for leaf in leaves for v in leaf.values if v.metric == agg.metric})
            for filter_name in agg.filter_list if agg.filter_list is not None else reported:
                value = _aggregate_one(agg, filter_name, leaves)
                if value is not None:
                    values.append(value)
        sample_len = sum(leaf.sample_len or 0 for leaf in leaves)
        return scores.TaskScores(self.name, self.alias or self.name, tuple(values), sample_len)


def _aggregate_one(
    agg: AggregateMetric, filter_name: str, leaves: list[scores.TaskScores]
) -> scores.MetricValue | None:
    from assay.runner.scoring.stderr import aggregate_group_metric, group_stderr

    found = [(leaf, value) for leaf in leaves if (value := leaf.find(agg.metric, filter_name)) is not None]
    if not found:
        return None
    values = [value.value for _, value in found]
    sizes = [leaf.sample_len or 0 for leaf, _ in found]
    if callable(agg.aggregation):
        aggregated = agg.aggregation(values, sizes)
    else:
        aggregated = aggregate_group_metric(values, sizes, weight_by_size=agg.weight_by_size)
    stderrs = [value.stderr for _, value in found]
    # lm-eval pools only when every leaf has a stderr; one "N/A" makes the group's "N/A".
    pooled = group_stderr(stderrs, sizes, weight_by_size=agg.weight_by_size) if None not in stderrs else None
    return scores.MetricValue(agg.metric, filter_name, aggregated, pooled, True, sum(sizes))


def groups_bottom_up(groups: dict[str, Group]) -> list[Group]:
    """Children before parents, so nested groups aggregate before the groups that hold them."""
    nested = {sub.name for group in groups.values() for sub in group.subgroups(recursive=False)}
    ordered: list[Group] = []
    seen: set[str] = set()

    def visit(group: Group) -> None:
        if group.name in seen:
            return
        for child in group:
            if isinstance(child, Group):
                visit(child)
        seen.add(group.name)
        ordered.append(group)

    for name, group in groups.items():
        if name not in nested:
            visit(group)
    return ordered
