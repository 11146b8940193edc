"""Aggregated scores as typed records, and lm-eval's `metric,filter` keys.

lm-eval keys each number of a results row as `"acc,none"` and its standard error as
`"acc_stderr,none"`; the same keys reach an Evaluation's status and Prometheus labels.
Those strings are made (`row_entries`) and taken apart (`read_row`, `split_key`) here and
nowhere else: the evaluator, groups, `assay.run_results` (whose records the table, the
loggers, the status sink and `assay compare` read) and the operator's metrics all handle
`MetricValue` records. This module sits below both the runner and the operator because
both read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from typing import Any

NOT_AVAILABLE = "N/A"
"""lm-eval's stderr where none could be computed."""


@dataclasses.dataclass(frozen=True)
class MetricValue:
    """One aggregated number of a task or group: (metric, filter, value, stderr)."""

    metric: str
    filter: str
    value: Any
    stderr: float | None = None
    """None where lm-eval writes "N/A" (or where the row lists no stderr)."""
    has_stderr: bool = True
    """Whether the row lists a stderr at all: lm-eval's table leaves the cell blank if not."""
    sample_count: int | None = None
    """Groups: how many documents the value pools (lm-eval's `sample_count`)."""

    @property
    def key(self) -> str:
        return f"{self.metric},{self.filter}"

    @property
    def stderr_key(self) -> str:
        return f"{self.metric}_stderr,{self.filter}"


@dataclasses.dataclass(frozen=True)
class TaskScores:
    """One task's or group's aggregated results."""

    name: str
    alias: str
    values: tuple[MetricValue, ...] = ()
    sample_len: int | None = None
    """Documents scored (the most any metric saw); for a group, summed over its leaves."""

    def find(self, metric: str, filter_name: str) -> MetricValue | None:
        return next((v for v in self.values if v.metric == metric and v.filter == filter_name), None)


def split_key(key: str) -> tuple[str, str]:
    """`"acc,none"` → ("acc", "none"); a key without a comma has the filter ""."""
    metric, _, filter_name = key.partition(",")
    return metric, filter_name


def row_entries(values: Iterable[MetricValue]) -> dict[str, Any]:
    """lm-eval's row entries: `metric,filter` then, when listed, `metric_stderr,filter`."""
    entries: dict[str, Any] = {}
    for value in values:
        entries[value.key] = value.value
        if value.has_stderr:
            entries[value.stderr_key] = value.stderr if value.stderr is not None else NOT_AVAILABLE
    return entries


def read_row(row: Mapping[str, Any], *, skip: Collection[str] = (), comma_keys_only: bool = False) -> list[MetricValue]:
    """The values of one lm-eval results row, in row order.

    `comma_keys_only` reads the metric values alone; `skip` leaves out the named members
    (lm-eval's W&B logger lists every member but the alias, name and sample_len among them).
    Stderr keys are read with the value they belong to.
    """
    values: list[MetricValue] = []
    for key in row:
        if key in skip or (comma_keys_only and "," not in key):
            continue
        metric, filter_name = split_key(key)
        if metric.endswith("_stderr"):
            continue
        stderr_key = f"{metric}_stderr,{filter_name}"
        stderr = row.get(stderr_key)
        number = stderr if isinstance(stderr, (int, float)) and not isinstance(stderr, bool) else None
        values.append(MetricValue(metric, filter_name, row[key], None if number is None else number, stderr_key in row))
    return values
