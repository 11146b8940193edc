"""Rank 0's watch over one task of a sequential run (or one pooled group's tasks, `pooling`):
its chunks' scores fed to the gate, in the order the run drew them.

Against a baseline, each scored document is paired with the baseline's document of the same
`doc_hash` (the same rule as `assay compare`: a hash that occurs several times pairs
occurrence by occurrence in document order), and the gate sees the paired differences
(candidate − baseline); a document the baseline lacks is left out. Without a baseline the
gate sees the run's own scores and stops at a precision.

Only per-document metrics of a known range decide: a mean of 0/1 (or bounded) values, whose
confidence sequence can be valid at every look. Corpus metrics (perplexity, BLEU, F1 over the
corpus) and metrics of no known range never stop a task; they are aggregated and compared
at the end as in any run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from assay.compare import outputs, verdicts
from assay.compare.sequential import GateDecision, MetricBounds, SequentialGate, known_bounds
from assay.errors import UserError
from assay.run_options import SequentialSettings
from assay.runner.jsonutil import json_default, sha256_text
from assay.runner.scoring.aggregations import AGGREGATIONS
from assay.runner.scoring.records import DocScores
from assay.runner.tasks.documents import Doc
from assay.runner.tasks.task import Task

log = logging.getLogger(__name__)

PairKey = tuple[str, str, int]
"""(filter, doc_hash, occurrence of that hash in the task)."""


def doc_hash(doc: Doc) -> str:
    """A document's `doc_hash`, as its samples and scores_ lines write it."""
    return sha256_text(json.dumps(doc, indent=2, default=json_default, ensure_ascii=False))


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The baseline run, read once: its label and, per task, each document's values by pair key."""

    label: str
    run: outputs.RunOutput

    @classmethod
    def read(cls, path: str) -> Baseline:
        return cls(label=path, run=outputs.read_run(path, label="the baseline"))

    def values(self, task: str) -> dict[PairKey, Mapping[str, Any]] | None:
        """The task's per-document values, None where the baseline has no scores for it."""
        if task not in self.run.tasks_with_samples():
            return None
        by_filter: dict[str, list[outputs.Sample]] = defaultdict(list)
        for sample in self.run.samples(task):
            by_filter[sample.filter].append(sample)
        found: dict[PairKey, Mapping[str, Any]] = {}
        for name, samples in by_filter.items():
            seen: dict[str, int] = defaultdict(int)
            for sample in sorted(samples, key=lambda s: s.doc_id):
                found[(name, sample.doc_hash, seen[sample.doc_hash])] = sample.values
                seen[sample.doc_hash] += 1
        return found


def deciding_metrics(task: Task) -> dict[str, tuple[str, int, MetricBounds]]:
    """`metric,filter` → (metric, filter index, bounds) for each metric that may stop `task`.
    Empty for a task scored by cluster (`cluster_key`): the sequence's guarantee assumes
    independent documents, so such a task runs to its end and is compared as today."""
    found: dict[str, tuple[str, int, MetricBounds]] = {}
    if outputs.cluster_key(task.dump_config()) is not None:
        return found
    mean = AGGREGATIONS.get("mean")
    higher = task.metrics.higher_is_better
    for metric in task.metrics.fns:
        bounds = known_bounds(metric, bool(higher.get(metric, True)))
        if bounds is None or task.metrics.aggregation_for(metric) is not mean:
            continue
        for index, ensemble in enumerate(task.filters):
            found[f"{metric},{ensemble.name}"] = (metric, index, bounds)
    return found


@dataclasses.dataclass(frozen=True)
class Member:
    """One task a watch pairs: its documents (task order) and the baseline's values of it."""

    task: Task
    docs: list[Doc]
    baseline: Mapping[PairKey, Mapping[str, Any]] | None


class TaskWatch:
    """One gate over a task, or over a group's tasks pooled, and what it needs to turn a chunk's
    DocScores into observations.

    `metrics`: the deciding `metric,filter` keys (`deciding_metrics` of a task; a pooled group's
    keys are those every one of its tasks has, `pooling.group_metrics`). `name` is the task's or
    group's, which `spec.gate.maxDropFor` rules match."""

    def __init__(
        self,
        name: str,
        members: list[Member],
        metrics: Mapping[str, tuple[str, int, MetricBounds]],
        settings: SequentialSettings,
        *,
        with_baseline: bool,
    ) -> None:
        self.name = name
        self.members = {member.task.name: member for member in members}
        self.metrics = dict(metrics)
        self.unpaired = 0
        self.max_drop = _max_drops(settings, name, {key: metric for key, (metric, _, _) in self.metrics.items()})
        has_baseline = all(member.baseline is not None for member in members)
        # what the watch reports: whether a baseline was asked for and has every task's scores
        self.baseline: bool | None = has_baseline if with_baseline else None
        # No gate where nothing can decide: no bounded per-document metric, no baseline scores of
        # (every) task where a baseline was asked for, nor a precision to stop at.
        in_range = all(self.max_drop[key] < b.high - b.low for key, (_, _, b) in self.metrics.items())
        decidable = (
            bool(self.metrics)
            and in_range
            and (has_baseline if with_baseline else settings.target_half_width is not None)
        )
        self.gate = (
            SequentialGate(
                {key: bounds for key, (_, _, bounds) in self.metrics.items()},
                alpha=settings.alpha,
                max_drop=self.max_drop if with_baseline else None,
                target_half_width=settings.target_half_width,
            )
            if decidable
            else None
        )
        # per task, every document's pair key in the task's order (occurrences counted in that order)
        self.keys: dict[str, list[tuple[str, int]]] = {}
        for member in members:
            seen: dict[str, int] = defaultdict(int)
            keys: list[tuple[str, int]] = []
            for doc in member.docs:
                digest = doc_hash(doc)
                keys.append((digest, seen[digest]))
                seen[digest] += 1
            self.keys[member.task.name] = keys

    def look(
        self, records: Iterable[DocScores], *, exhausted: bool, place: Mapping[tuple[str, int], int] | None = None
    ) -> GateDecision | None:
        """Observe one chunk's records (every rank's, gathered) and decide; None without a gate.

        A document counts when every deciding metric has a value for it (and, against a
        baseline, the baseline has one too): the gate sees the same documents for every metric.
        `place`: (task, position) → the document's place in the run's random order, the order
        the gate sees the chunk's documents in (by default the task's order)."""
        if self.gate is None:
            return None
        by_document: dict[tuple[str, int], dict[str, float | None]] = defaultdict(dict)
        for record in records:
            member = self.members[record.task]
            filter_name = member.task.filters[record.filter_index].name
            for metric, value in record.scores.items():
                key = f"{metric},{filter_name}"
                if key in self.metrics:
                    by_document[(record.task, record.position)][key] = self._observed(
                        member, record.position, key, value
                    )
        observed: dict[str, list[float]] = {key: [] for key in self.metrics}
        for document in sorted(by_document) if place is None else sorted(by_document, key=place.__getitem__):
            values = by_document[document]
            if any(values.get(key) is None for key in self.metrics):
                self.unpaired += 1
                continue
            for key in self.metrics:
                observed[key].append(float(values[key]))  # type: ignore[arg-type]  # None excluded above
        self.gate.observe(observed)
        return self.gate.decide(exhausted=exhausted)

    def _observed(self, member: Member, position: int, key: str, value: Any) -> float | None:
        """The value the gate sees for one document: its own, or its difference from the baseline's."""
        number = self._number(value, key)
        if number is None or member.baseline is None:
            return number
        metric, _, _ = self.metrics[key]
        filter_name = key.split(",", 1)[1]
        digest, occurrence = self.keys[member.task.name][position]
        other = self._number(member.baseline.get((filter_name, digest, occurrence), {}).get(metric), key)
        return None if other is None else number - other

    def _number(self, value: Any, key: str) -> float | None:
        """A per-document value as a float inside the metric's range; None (and never decides) otherwise."""
        bounds = self.metrics[key][2]
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None
        return number if math.isfinite(number) and bounds.low <= number <= bounds.high else None


def _max_drops(settings: SequentialSettings, task: str, metrics: Mapping[str, str]) -> dict[str, float]:
    """Per deciding `metric,filter` key, the drop tolerated there (`spec.gate.maxDropFor`'s rules)."""
    try:
        tolerances = [verdicts.Tolerance(settings.max_drop)] + [
            verdicts.parse_max_drop(f"{target}={value}") for target, value in settings.max_drop_for.items()
        ]
    except UserError:  # refused where the settings were read; here only the general one counts
        tolerances = [verdicts.Tolerance(settings.max_drop)]
    return {key: verdicts.max_drop_for(tolerances, task, metric) for key, metric in metrics.items()}
