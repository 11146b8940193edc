"""Two runs in, one `Comparison` out: every task, metric and filter both runs have.

For each, the test follows the metric's aggregation (corpus.py): a mean of 0/1 values →
exact McNemar, another mean → paired t, a corpus-level aggregation → paired bootstrap. A
task whose documents are clustered (its `cluster_key`) gets a clustered z test for its
means instead of McNemar and paired t (clustered.py).

Groups that aggregate are compared as a whole too (groups.py), after their tasks: one row
per group, metric and filter, a stratified z test over the subtasks' paired documents.

The overall verdict is Holm-corrected over every row, group rows included: a group row
repeats evidence its subtasks' rows already carry, so counting it makes the family larger
and the correction stricter, never looser.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from assay.compare import clustered, corpus, groups, outputs, pairing, statistics, verdicts
from assay.errors import UsageError
from assay.run_results import RunResults


@dataclasses.dataclass(frozen=True)
class Settings:
    alpha: float = 0.05
    iterations: int = 1000
    seed: int = 1234
    tolerances: tuple[verdicts.Tolerance, ...] = ()
    margin: float | None = None


@dataclasses.dataclass(frozen=True)
class Row:
    task: str
    metric: str
    filter: str
    higher_is_better: bool
    result: statistics.PairedTest
    max_drop: float
    verdict: str
    p_holm: float = float("nan")
    group: groups.GroupMetric | None = None
    """For a group's row: its subtasks and weighting."""


@dataclasses.dataclass(frozen=True)
class Comparison:
    baseline: str
    candidate: str
    settings: Settings
    rows: tuple[Row, ...]
    tasks: tuple[pairing.TaskPairing, ...]
    verdict: str
    notes: tuple[str, ...]
    untrusted: tuple[str, ...] = ()
    """Why a run's scores are not trusted (its sentinels failed): then the verdict is never a pass."""


def compare_runs(baseline: outputs.RunOutput, candidate: outputs.RunOutput, settings: Settings) -> Comparison:
    notes = [*baseline.notes, *candidate.notes, *_run_notes(baseline.results, candidate.results)]
    rows: list[Row] = []
    tasks: list[pairing.TaskPairing] = []
    for task in _shared_tasks(baseline, candidate, notes):
        pairs = pairing.pair_task(
            task,
            baseline.samples(task),
            candidate.samples(task),
            configs=(_config(baseline, task), _config(candidate, task)),
            higher_is_better={**_directions(candidate, task), **_directions(baseline, task)},
        )
        tasks.append(pairs)
        notes.extend(pairing.prompt_notes(task, pairs, (baseline.results, candidate.results)))
        notes.extend(_pairing_notes(pairs))
        rows.extend(row for metric in pairs.metrics if (row := _row(metric, settings, notes)) is not None)
        notes.extend(_cluster_notes(pairs, baseline.cluster_key(task) or candidate.cluster_key(task), rows))
    rows.extend(_group_rows(baseline.results, candidate.results, tasks, settings, notes))
    if not rows:
        raise UsageError(
            f"Nothing to compare: {baseline.label} and {candidate.label} have no task, metric and document "
            "in common with samples (run both with --log_samples)."
        )
    rows = _with_holm(rows, settings)
    overall = verdicts.overall([_holm_verdict(row, settings) for row in rows])
    untrusted = _untrusted(baseline, candidate)
    if untrusted and overall != verdicts.REGRESSED:  # a gate never passes on an untrusted score
        overall = verdicts.INCONCLUSIVE
    return Comparison(
        str(baseline.results_path),
        str(candidate.results_path),
        settings,
        tuple(rows),
        tuple(tasks),
        overall,
        (*untrusted, *notes),
        untrusted,
    )


def _untrusted(baseline: outputs.RunOutput, candidate: outputs.RunOutput) -> tuple[str, ...]:
    """One sentence per run whose sentinels failed (see `RunResults.untrusted`)."""
    said = []
    for role, run in (("baseline", baseline), ("candidate", candidate)):
        failed = run.results.untrusted()
        if failed:
            task, reason = failed[0]
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            said.append(f"The {role}'s scores are not trusted: {task}: {reason}{more}.")
    return tuple(said)


def _shared_tasks(baseline: outputs.RunOutput, candidate: outputs.RunOutput, notes: list[str]) -> list[str]:
    names = groups.group_names(baseline.results) | groups.group_names(candidate.results)
    listed = [run.results.results_names() for run in (baseline, candidate)]
    shared = [task for task in listed[0] if task in listed[1] and task not in names]
    for task in shared:
        missing = [run.label for run in (baseline, candidate) if task not in run.tasks_with_samples()]
        if missing:
            notes.append(f"{task}: left out, no samples file in the {' and '.join(missing)} (run with --log_samples).")
    only = sorted((set(listed[0]) ^ set(listed[1])) - names)
    if only:
        notes.append(f"In one run only, left out: {', '.join(only)}.")
    return [task for task in shared if task in baseline.tasks_with_samples() and task in candidate.tasks_with_samples()]


def _config(run: outputs.RunOutput, task: str) -> Mapping[str, Any]:
    return run.results.config_of(task)


def _directions(run: outputs.RunOutput, task: str) -> Mapping[str, Any]:
    return run.results.higher_is_better_of(task)


def _run_notes(baseline: RunResults, candidate: RunResults) -> list[str]:
    keys = ("system_instruction_sha", "chat_template_sha", "fewshot_as_multiturn")
    changed = [key.removesuffix("_sha") for key in keys if baseline.run_info.get(key) != candidate.run_info.get(key)]
    return [f"The runs' prompts differ in {', '.join(changed)}."] if changed else []


def _pairing_notes(pairs: pairing.TaskPairing) -> list[str]:
    notes = []
    if pairs.only_baseline or pairs.only_candidate:
        notes.append(
            f"{pairs.task}: {pairs.paired} documents paired; left out {pairs.only_baseline} in the baseline only "
            f"and {pairs.only_candidate} in the candidate only."
        )
    if pairs.doc_id_mismatches:
        notes.append(
            f"{pairs.task}: {pairs.doc_id_mismatches} paired documents have different doc_ids (another order?)."
        )
    return notes


def _row(metric: pairing.MetricPairs, settings: Settings, notes: list[str]) -> Row | None:
    result = _test(metric, settings)
    if result is None:
        notes.append(
            f"{metric.task} {metric.metric} ({metric.filter}): aggregation {metric.aggregation!r} is not "
            "one assay compare knows; left out."
        )
        return None
    max_drop = verdicts.max_drop_for(list(settings.tolerances), metric.task, metric.metric)
    verdict = verdicts.verdict(
        result,
        higher_is_better=metric.higher_is_better,
        alpha=settings.alpha,
        max_drop=max_drop,
        margin=settings.margin,
    )
    return Row(metric.task, metric.metric, metric.filter, metric.higher_is_better, result, max_drop, verdict)


def _test(metric: pairing.MetricPairs, settings: Settings) -> statistics.PairedTest | None:
    if metric.aggregation == "brier_score":
        baseline = np.array([corpus.brier_per_document(item) for item in metric.baseline])
        candidate = np.array([corpus.brier_per_document(item) for item in metric.candidate])
    elif metric.aggregation in corpus.CORPUS:
        aggregate, prepare = corpus.CORPUS[metric.aggregation]
        return statistics.paired_bootstrap(
            prepare(metric.baseline),
            prepare(metric.candidate),
            aggregate,
            alpha=settings.alpha,
            iterations=settings.iterations,
            seed=settings.seed,
        )
    elif (numbers := metric.numbers()) is not None:
        baseline, candidate = numbers
    else:
        return None
    if metric.clusters is not None:
        return clustered.clustered_z(baseline, candidate, metric.clusters, alpha=settings.alpha)
    binary = (
        metric.aggregation != "brier_score"
        and np.isin(baseline, (0.0, 1.0)).all()
        and np.isin(candidate, (0.0, 1.0)).all()
    )
    test = statistics.mcnemar if binary else statistics.paired_t
    return test(baseline, candidate, alpha=settings.alpha)


def _cluster_notes(pairs: pairing.TaskPairing, key: str | None, rows: list[Row]) -> list[str]:
    clusters = next((metric.clusters for metric in pairs.metrics if metric.clusters is not None), None)
    if clusters is None:
        return []
    count = clustered.cluster_count(clusters)
    sentence = (
        f"{pairs.task}: documents clustered by {repr(key) if key else 'their cluster field'} ({count} clusters over "
        f"{len(clusters)} paired documents): its means get a clustered z test instead of McNemar or paired t"
    )
    if any(row.task == pairs.task and row.result.test == "bootstrap" for row in rows):
        sentence += "; the bootstrap of its corpus metrics ignores the clusters"
    sentence += "."
    if count < 30:
        sentence += " With fewer than 30 clusters the normal approximation is rough."
    return [sentence]


def _group_rows(
    baseline: RunResults, candidate: RunResults, tasks: list[pairing.TaskPairing], settings: Settings, notes: list[str]
) -> list[Row]:
    pairs = {(metric.task, metric.metric, metric.filter): metric for task in tasks for metric in task.metrics}
    rows = []
    specs = groups.group_metrics(baseline, candidate, notes)
    for spec in specs:
        result = groups.compare_group(spec, pairs, alpha=settings.alpha, notes=notes)
        if result is None:
            continue
        higher = groups.direction(spec, baseline, pairs)
        max_drop = verdicts.max_drop_for(list(settings.tolerances), spec.group, spec.metric)
        verdict = verdicts.verdict(
            result, higher_is_better=higher, alpha=settings.alpha, max_drop=max_drop, margin=settings.margin
        )
        rows.append(Row(spec.group, spec.metric, spec.filter, higher, result, max_drop, verdict, group=spec))
    notes.extend(groups.weighting_note([row.group for row in rows if row.group is not None]))
    return rows


def _with_holm(rows: list[Row], settings: Settings) -> list[Row]:
    adjusted = statistics.holm([row.result.p_value for row in rows])
    return [dataclasses.replace(row, p_holm=p) for row, p in zip(rows, adjusted)]


def _holm_verdict(row: Row, settings: Settings) -> str:
    return verdicts.verdict(
        row.result,
        higher_is_better=row.higher_is_better,
        alpha=settings.alpha,
        max_drop=row.max_drop,
        margin=settings.margin,
        p_value=row.p_holm,
    )
