"""Groups compared as a whole: the number a group reports, recomputed over the paired documents.

lm-eval 0.4 (and Assay) report a group that has an `aggregate_metric_list` under the results
JSON's `groups`, with `group_subtasks` naming its children (sub-groups among them). Its
value for a `metric,filter` is the mean of the values of its leaf tasks that report that
key, weighted by each task's `sample_len` when the entry says `weight_by_size` (the default
since 0.4.12), else the plain mean (lm_eval/api/group.py, `Group.aggregate`).

The group's own config is not in the results JSON, so the weighting is read from the
numbers: whichever mean of the leaf values reproduces the group's value (a writer that puts
the group's config under `configs` is believed instead). Where both do (equal sizes) they are
the same number and the same test; where neither does (a custom aggregation) the group is
left out and the report says so.

Compared over the paired documents, a size-weighted group is the mean over all its paired
documents and an unweighted one the mean of its subtasks' means; clustered.py has the
standard error. Only groups of metrics averaged over per-document numbers are compared; the
mean of several tasks' perplexities or BLEU scores is left out, with a note.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from assay.compare import clustered, pairing, statistics
from assay.run_results import RunResults
from assay.scores import MetricValue, TaskScores

PairsByKey = Mapping[tuple[str, str, str], pairing.MetricPairs]
"""(task, metric, filter) → that metric's paired values."""


@dataclasses.dataclass(frozen=True)
class GroupMetric:
    """One metric and filter of a group that both runs aggregate."""

    group: str
    metric: str
    filter: str
    subtasks: tuple[str, ...]
    """The leaf tasks whose values make the group's (those reporting the metric and filter)."""
    weight_by_size: bool


def group_names(results: RunResults) -> set[str]:
    """Every group a results JSON names, aggregating or not (they have no samples of their own)."""
    return set(results.group_subtasks) | set(results.groups)


def group_metrics(baseline: RunResults, candidate: RunResults, notes: list[str]) -> list[GroupMetric]:
    """Each metric and filter of each group that both runs aggregate, with its subtasks and weighting."""
    found = []
    base_groups, cand_groups = set(baseline.groups), set(candidate.groups)
    if base_groups ^ cand_groups:
        notes.append(
            f"Groups aggregated in one run only, not compared: {', '.join(sorted(base_groups ^ cand_groups))}."
        )
    for group in sorted(base_groups & cand_groups):
        leaves = leaf_tasks(group, baseline.group_subtasks)
        if leaves != leaf_tasks(group, candidate.group_subtasks):
            notes.append(f"{group}: the runs' groups have different subtasks; not compared as a group.")
            continue
        for metric, filter_name in _metric_keys(_row(baseline, group), _row(candidate, group)):
            spec = _group_metric(group, metric, filter_name, leaves, (baseline, candidate), notes)
            found.extend([spec] if spec is not None else [])
    return found


def _group_metric(
    group: str,
    metric: str,
    filter_name: str,
    leaves: tuple[str, ...],
    runs: tuple[RunResults, RunResults],
    notes: list[str],
) -> GroupMetric | None:
    name = f"{group} {metric} ({filter_name})"
    # lm-eval aggregates the leaves that report the key; the candidate's must be the same ones.
    subtasks = tuple(task for task in leaves if _value(runs[0], task, metric, filter_name) is not None)
    if not subtasks or any(_value(runs[1], task, metric, filter_name) is None for task in subtasks):
        notes.append(f"{name}: the runs' subtasks do not both report it; not compared as a group.")
        return None
    weightings = _weightings(runs[0], group, metric, filter_name, subtasks) & _weightings(
        runs[1], group, metric, filter_name, subtasks
    )
    if not weightings:
        notes.append(
            f"{name}: neither a size-weighted nor a plain mean of its subtasks gives the group's value "
            "(a custom aggregation?); not compared as a group."
        )
        return None
    # {True, False}: equal sizes, where both weightings are the same number and the same test.
    return GroupMetric(group, metric, filter_name, subtasks, weight_by_size=True in weightings)


def leaf_tasks(group: str, group_subtasks: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The tasks under `group`, sub-groups expanded, in order (lm-eval weights leaves, not sub-groups)."""
    leaves: dict[str, None] = {}
    for child in group_subtasks.get(group) or ():
        if child in group_subtasks and child != group:
            leaves.update(dict.fromkeys(leaf_tasks(child, group_subtasks)))
        else:
            leaves[child] = None
    return tuple(leaves)


def _row(run: RunResults, name: str) -> TaskScores:
    found = run.tasks[name].scores if name in run.tasks else None
    return found if found is not None else TaskScores(name, name)


def _value(run: RunResults, task: str, metric: str, filter_name: str) -> MetricValue | None:
    """A leaf's value as the results JSON's `results` lists it."""
    entry = run.tasks.get(task)
    if entry is None or not entry.in_results or entry.scores is None:
        return None
    return entry.scores.find(metric, filter_name)


def _metric_keys(baseline: TaskScores, candidate: TaskScores) -> list[tuple[str, str]]:
    """(metric, filter) with a number in both runs' group entry, sorted by filter then metric."""
    keys = [
        (value.metric, value.filter)
        for value in baseline.values
        if _is_number(value.value) and _is_number(getattr(candidate.find(value.metric, value.filter), "value", None))
    ]
    return sorted(keys, key=lambda key: (key[1], key[0]))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _weightings(results: RunResults, group: str, metric: str, filter_name: str, subtasks: tuple[str, ...]) -> set[bool]:
    """The values of weight_by_size consistent with one run's numbers ({True, False} if both are)."""
    configured = _configured(results, group, metric, filter_name)
    if configured is not None:
        return {configured}
    value = getattr(_row(results, group).find(metric, filter_name), "value", None)
    rows = [_row(results, task) for task in subtasks]
    values: list[Any] = [getattr(row.find(metric, filter_name), "value", None) for row in rows]
    sizes: list[Any] = [row.sample_len for row in rows]
    if not values or not all(_is_number(v) for v in values):
        return set()
    found = set()
    if all(isinstance(size, int) and size > 0 for size in sizes) and _close(value, _weighted(values, sizes)):
        found.add(True)
    if _close(value, sum(values) / len(values)):
        found.add(False)
    return found


def _weighted(values: list[float], sizes: list[int]) -> float:
    return float(sum(v * n for v, n in zip(values, sizes, strict=False)) / sum(sizes))


def _close(reported: Any, computed: float) -> bool:
    return _is_number(reported) and math.isclose(float(reported), computed, rel_tol=1e-9, abs_tol=1e-12)


def _configured(results: RunResults, group: str, metric: str, filter_name: str) -> bool | None:
    """weight_by_size from the group's aggregate_metric_list, where the results JSON has it."""
    entries = results.config_of(group).get("aggregate_metric_list")
    for entry in entries or []:
        if not isinstance(entry, dict) or entry.get("metric") != metric:
            continue
        filters = entry.get("filter_list")
        if filters is None or filter_name in ([filters] if isinstance(filters, str) else filters):
            return bool(entry.get("weight_by_size", True))
    return None


def compare_group(
    spec: GroupMetric, pairs: PairsByKey, *, alpha: float, notes: list[str]
) -> statistics.PairedTest | None:
    """The group's paired comparison (clustered.stratified_z), or None with a note saying why not."""
    parts = [pairs.get((task, spec.metric, spec.filter)) for task in spec.subtasks]
    missing = [task for task, part in zip(spec.subtasks, parts, strict=False) if part is None]
    name = f"{spec.group} {spec.metric} ({spec.filter})"
    if missing:
        notes.append(f"{name}: not compared as a group; no paired documents in {', '.join(missing)}.")
        return None
    strata = []
    for part in (part for part in parts if part is not None):
        numbers = part.numbers()
        if numbers is None:
            notes.append(
                f"{name}: not compared as a group; {part.task}'s {part.metric} is not a mean of per-document numbers."
            )
            return None
        strata.append((numbers, part.clusters))
    total = sum(len(numbers[0]) for numbers, _ in strata)
    return clustered.stratified_z(
        [
            clustered.Stratum(base, cand, len(base) / total if spec.weight_by_size else 1 / len(strata), clusters)
            for (base, cand), clusters in strata
        ],
        alpha=alpha,
    )


def direction(spec: GroupMetric, results: RunResults, pairs: PairsByKey) -> bool | None:
    """higher_is_better for the group's metric: the results JSON's, else its first subtask's (None: unknown)."""
    stated = results.higher_is_better_of(spec.group).get(spec.metric)
    if isinstance(stated, bool):
        return stated
    return pairs[(spec.subtasks[0], spec.metric, spec.filter)].higher_is_better


def weighting_note(specs: Sequence[GroupMetric]) -> list[str]:
    """One sentence naming the groups compared as a whole and how each is weighted."""
    named = {spec.group: "size-weighted" if spec.weight_by_size else "subtasks weighted equally" for spec in specs}
    if not named:
        return []
    listed = ", ".join(f"{group} ({how})" for group, how in named.items())
    return [
        f"Groups compared as a whole: {listed}; stratified z: delta over the paired documents, "
        "SE from each subtask's own (paired or clustered) SE."
    ]
