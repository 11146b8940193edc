"""Pairing the documents of two runs, per task, filter and metric.

Documents pair on `doc_hash` (sha256 of the document), so two runs over the same data pair
even when their doc_ids differ (another order, another shard); a hash that occurs several
times in one run (duplicate documents) pairs occurrence by occurrence in doc_id order.
Documents in one run only are counted and left out. Pairs whose doc_ids differ are
counted too: usually a different dataset order, sometimes a different dataset.

Different prompts are allowed (comparing 0-shot with 5-shot is a fair question); they are
named in the report: the n-shot of each side and how many paired documents' prompts differ.

A paired document's cluster (outputs.py: its task's `cluster_key`) is the baseline's, else
the candidate's; a task none of whose documents has one is not clustered.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from assay.compare import outputs
from assay.compare.corpus import MEAN, aggregation_of
from assay.run_results import ABSENT, RunResults

Key = tuple[str, str, int]
"""(filter, doc_hash, occurrence of that hash in the run)."""


@dataclasses.dataclass(frozen=True)
class MetricPairs:
    """One metric of one task under one filter: per-document values of both runs, paired."""

    task: str
    metric: str
    filter: str
    aggregation: str
    higher_is_better: bool | None
    """None where neither run nor lm-eval's registry says (directions.py): the row is refused."""
    baseline: list[Any]
    candidate: list[Any]
    clusters: list[str | None] | None = None
    """Per paired document, its cluster (None: a cluster of its own); None if the task has none."""

    def numbers(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Both sides' per-document values as arrays, for a mean of numbers; None for anything else."""
        if self.aggregation != MEAN:
            return None
        try:
            baseline, candidate = np.asarray(self.baseline, dtype=float), np.asarray(self.candidate, dtype=float)
        except (TypeError, ValueError):
            return None
        return (baseline, candidate) if baseline.ndim == 1 else None


@dataclasses.dataclass(frozen=True)
class TaskPairing:
    task: str
    paired: int
    """Documents in both runs (counted once, over all filters)."""
    only_baseline: int
    only_candidate: int
    doc_id_mismatches: int
    prompt_differences: int
    metrics: tuple[MetricPairs, ...]
    unpaired: tuple[str, ...] = ()
    """Sentences naming each metric left out (in one run only) or compared on fewer documents."""


def pair_task(
    task: str,
    baseline: list[outputs.Sample],
    candidate: list[outputs.Sample],
    *,
    configs: tuple[Mapping[str, Any], Mapping[str, Any]],
    higher_is_better: Mapping[str, bool],
) -> TaskPairing:
    """Pairs one task's samples; `configs` are the task's config in each results JSON."""
    left, right = _keyed(baseline), _keyed(candidate)
    shared = [key for key in left if key in right]
    metrics = []
    for filter_name, metric in _metric_names(left, right, shared):
        keys = [
            key
            for key in shared
            if key[0] == filter_name and metric in left[key].values and metric in right[key].values
        ]
        if keys:
            metrics.append(
                MetricPairs(
                    task=task,
                    metric=metric,
                    filter=filter_name,
                    aggregation=_aggregation(metric, configs),
                    higher_is_better=higher_is_better.get(metric),
                    baseline=[left[key].values[metric] for key in keys],
                    candidate=[right[key].values[metric] for key in keys],
                    clusters=_clusters(left, right, keys),
                )
            )
    return TaskPairing(
        task=task,
        unpaired=tuple(_unpaired_notes(task, left, right, shared, metrics)),
        paired=len(_documents(shared)),
        only_baseline=len(_documents(left) - _documents(right)),
        only_candidate=len(_documents(right) - _documents(left)),
        doc_id_mismatches=len({(k[1], k[2]) for k in shared if left[k].doc_id != right[k].doc_id}),
        prompt_differences=len({(k[1], k[2]) for k in shared if left[k].prompt_hash != right[k].prompt_hash}),
        metrics=tuple(metrics),
    )


def _unpaired_notes(
    task: str,
    left: Mapping[Key, outputs.Sample],
    right: Mapping[Key, outputs.Sample],
    shared: list[Key],
    compared: list[MetricPairs],
) -> list[str]:
    """A sentence for each metric of the paired documents that one run reports and the other
    does not (left out), and for each compared on fewer documents than its filter paired."""
    sides: dict[tuple[str, str], set[str]] = defaultdict(set)
    for key in shared:
        for side, run in (("baseline", left), ("candidate", right)):
            for metric in run[key].values:
                sides[(key[0], metric)].add(side)
    counted = {(m.filter, m.metric): len(m.baseline) for m in compared}
    per_filter: dict[str, int] = defaultdict(int)
    for key in shared:
        per_filter[key[0]] += 1
    notes = []
    for (filter_name, metric), seen in sorted(sides.items(), key=lambda item: (item[0][1], item[0][0])):
        if (filter_name, metric) not in counted:
            where = " and ".join(sorted(seen)) + (" only" if len(seen) == 1 else ", never on the same document")
            notes.append(f"{task} {metric} ({filter_name}): left out, reported by the {where}.")
        elif counted[(filter_name, metric)] < per_filter[filter_name]:
            missing = per_filter[filter_name] - counted[(filter_name, metric)]
            notes.append(
                f"{task} {metric} ({filter_name}): compared on {counted[(filter_name, metric)]} documents; "
                f"{missing} paired documents lack it in one run."
            )
    return notes


def _clusters(
    left: Mapping[Key, outputs.Sample], right: Mapping[Key, outputs.Sample], keys: list[Key]
) -> list[str | None] | None:
    clusters = [left[key].cluster if left[key].cluster is not None else right[key].cluster for key in keys]
    return clusters if any(cluster is not None for cluster in clusters) else None


def _documents(keys: Iterable[Key]) -> set[tuple[str, int]]:
    """The documents behind some keys, whatever their filter."""
    return {(key[1], key[2]) for key in keys}


def _keyed(samples: Iterable[outputs.Sample]) -> dict[Key, outputs.Sample]:
    seen: dict[tuple[str, str], int] = defaultdict(int)
    keyed = {}
    for sample in sorted(samples, key=lambda s: (s.filter, s.doc_id)):
        occurrence = seen[(sample.filter, sample.doc_hash)]
        seen[(sample.filter, sample.doc_hash)] += 1
        keyed[(sample.filter, sample.doc_hash, occurrence)] = sample
    return keyed


def _metric_names(
    left: Mapping[Key, outputs.Sample], right: Mapping[Key, outputs.Sample], shared: list[Key]
) -> list[tuple[str, str]]:
    """(filter, metric) pairs with a value in both runs, in first-seen order."""
    names: dict[tuple[str, str], None] = {}
    for key in shared:
        for metric in left[key].values:
            if metric in right[key].values:
                names[(key[0], metric)] = None
    return sorted(names, key=lambda pair: (pair[1], pair[0]))


def _aggregation(metric: str, configs: tuple[Mapping[str, Any], Mapping[str, Any]]) -> str:
    """The baseline's aggregation for `metric` (the candidate's if the baseline names none)."""
    for config in configs:
        for entry in config.get("metric_list") or []:
            if isinstance(entry, dict) and entry.get("metric") == metric and isinstance(entry.get("aggregation"), str):
                return str(entry["aggregation"])
    return aggregation_of(metric, None)


def prompt_notes(task: str, pairing: TaskPairing, results: tuple[RunResults, RunResults]) -> list[str]:
    """Sentences naming how the two runs' prompts for `task` differ (none if they agree)."""
    notes = []
    shots = [_n_shot(run, task) for run in results]
    if shots[0] != shots[1]:
        notes.append(f"{task}: {shots[0]}-shot baseline, {shots[1]}-shot candidate.")
    configs = [run.config_of(task) for run in results]
    changed = sorted(key for key in PROMPT_KEYS if configs[0].get(key) != configs[1].get(key))
    if changed:
        notes.append(f"{task}: the task configs differ in {', '.join(changed)}.")
    if pairing.prompt_differences:
        notes.append(
            f"{task}: {pairing.prompt_differences} of {pairing.paired} paired documents have different prompts."
        )
    return notes


def _n_shot(run: RunResults, task: str) -> Any:
    shots = run.tasks[task].n_shot if task in run.tasks else ABSENT
    return None if shots is ABSENT else shots


PROMPT_KEYS = (
    "description",
    "doc_to_text",
    "doc_to_choice",
    "doc_to_target",
    "target_delimiter",
    "fewshot_delimiter",
    "gen_prefix",
    "generation_kwargs",
)
"""Task config keys that change a prompt (or what is asked of the model). Not fewshot_config:
lm-eval writes its defaults where Assay leaves it out; n-shot and prompt_hash show its effect."""
