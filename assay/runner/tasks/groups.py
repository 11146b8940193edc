"""Groups: named collections of tasks (and sub-groups) that may aggregate their metrics.

A group with an `aggregate_metric_list` reports the size-weighted (or plain) mean of its
leaf tasks' metrics with a pooled stderr, as lm-eval 0.4.12+ does; a group without one
only nests its children in the table. Tags never aggregate: they expand to tasks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Union

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
    def from_yaml(cls, raw: dict[str, Any], group: str) -> "AggregateMetric":
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
            weight_by_size=bool(raw.get("weight_by_size", True)),
        )


GROUP_KEYS = ("group", "group_alias", "task", "aggregate_metric_list", "metadata")


@dataclasses.dataclass
class Group:
    name: str
    alias: str | None = None
    aggregate_metric_list: list[AggregateMetric] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None
    raw_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    children: dict[str, Union["Group", Any]] = dataclasses.field(default_factory=dict)

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

    def subgroups(self, recursive: bool = True) -> list["Group"]:
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

    def aggregate(self, task_metrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """This group's row of the results: aggregated values over its leaf tasks."""
        from assay.runner.scoring.stderr import aggregate_group_metric, group_stderr

        row: dict[str, Any] = {"alias": self.alias or self.name, "name": self.name}
        if not self.aggregate_metric_list:
            return row
        leaves = [task.name for task in self.leaf_tasks()]
        row["sample_len"] = sum(task_metrics[name].get("sample_len", 0) for name in leaves if name in task_metrics)
        sample_count: dict[str, int] = {}
        for agg in self.aggregate_metric_list:
            filters = agg.filter_list if agg.filter_list is not None else self._filters_reported(agg.metric, leaves, task_metrics)
            for filter_name in filters:
                key, stderr_key = f"{agg.metric},{filter_name}", f"{agg.metric}_stderr,{filter_name}"
                values, sizes, stderrs = [], [], []
                for name in leaves:
                    result = task_metrics.get(name, {})
                    if key in result:
                        values.append(result[key])
                        sizes.append(result.get("sample_len", 0))
                        if result.get(stderr_key) is not None:
                            stderrs.append(result[stderr_key])
                if not values:
                    continue
                if callable(agg.aggregation):
                    row[key] = agg.aggregation(values, sizes)
                else:
                    row[key] = aggregate_group_metric(values, sizes, weight_by_size=agg.weight_by_size)
                sample_count[key] = sum(sizes)
                if len(stderrs) == len(values) and "N/A" not in stderrs:
                    pooled = group_stderr(stderrs, sizes, weight_by_size=agg.weight_by_size)
                    row[stderr_key] = pooled if pooled is not None else "N/A"
                else:
                    row[stderr_key] = "N/A"
        if sample_count:
            row["sample_count"] = sample_count
        return row

    @staticmethod
    def _filters_reported(metric: str, leaves: list[str], task_metrics: dict[str, dict[str, Any]]) -> list[str]:
        prefix = f"{metric},"
        found = {
            key[len(prefix):]
            for name in leaves
            for key in task_metrics.get(name, {})
            if key.startswith(prefix) and "_stderr" not in key
        }
        return sorted(found)


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
