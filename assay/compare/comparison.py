"""Two runs in, one `Comparison` out: every task, metric and filter both runs have.

For each, the test follows the metric's aggregation (corpus.py): a mean of 0/1 values →
exact McNemar, another mean → paired t, a corpus-level aggregation → paired bootstrap. A
task whose documents are clustered (its `cluster_key`) gets a clustered z test for its
means instead of McNemar and paired t (clustered.py).

Groups that aggregate are compared as a whole too (groups.py), after their tasks: one row
per group, metric and filter, a stratified z test over the subtasks' paired documents.

Every row's verdict, and the overall one, use the row's Holm-adjusted p over every row,
group rows included: a group row repeats evidence its subtasks' rows already carry, so
counting it makes the family larger and the correction stricter, never looser. The
bootstrap's iterations grow with the number of rows, for a row whose p looks significant,
so that Holm can still pass it (`statistics.bootstrap_iterations`).

Every row left out is named in the notes with why (no direction, an aggregation assay
compare does not know, a metric one run lacks), and so is every row whose numbers are not
finite (it reads `inconclusive`; JSON writes its numbers as null). Checks outside the
statistics (is either run's scoring trustworthy?) mark a comparison `inconclusive_because`.
A run that stopped early (a sequential run) is compared on the documents both runs have, a
group it gated as one by the group's own row (stopped_runs.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from assay.compare import clustered, corpus, directions, groups, outputs, pairing, statistics, stopped_runs, verdicts
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
    verdict: str = verdicts.INCONCLUSIVE
    """Decided by the row's Holm-adjusted p (`p_holm`), the p that status and the reports show."""
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
    iterations: int = 1000
    """The most bootstrap iterations a row used: `settings.iterations`, or more where a row's p
    at that many was below α and Holm over many rows needs a finer one."""
    doubts: tuple[str, ...] = ()
    """Why the comparison cannot be believed whatever its rows say (`inconclusive_because`)."""


def inconclusive_because(result: Comparison, reason: str) -> Comparison:
    """The comparison with a doubt from outside the statistics, one sentence (a run whose
    scores its own checks do not trust): no longer a pass (improved, unchanged, equivalent
    become inconclusive, which fails a strict gate); a regression stays one, as a broken run
    must not pass a gate that it fails."""
    verdict = result.verdict if result.verdict == verdicts.REGRESSED else verdicts.INCONCLUSIVE
    return dataclasses.replace(result, verdict=verdict, doubts=(*result.doubts, reason))


def compare_runs(baseline: outputs.RunOutput, candidate: outputs.RunOutput, settings: Settings) -> Comparison:
    notes = [
        *stopped_runs.notes("baseline", baseline.results),
        *stopped_runs.notes("candidate", candidate.results),
        *baseline.notes,
        *candidate.notes,
        *_run_notes(baseline.results, candidate.results),
    ]
    tasks = [_pair(task, baseline, candidate, notes) for task in _shared_tasks(baseline, candidate, notes)]
    metrics = [metric for pairs in tasks for metric in pairs.metrics if _has_direction(metric, notes)]
    specs = groups.group_metrics(baseline.results, candidate.results, notes)
    iterations = statistics.bootstrap_iterations(
        settings.iterations, rows=len(metrics) + len(specs), alpha=settings.alpha
    )
    rows: list[Row] = []
    for pairs in tasks:
        own = [metric for metric in metrics if metric.task == pairs.task]
        rows.extend(row for metric in own if (row := _row(metric, settings, iterations, notes)) is not None)
        notes.extend(_cluster_notes(pairs, baseline.cluster_key(pairs.task) or candidate.cluster_key(pairs.task), rows))
    rows.extend(_group_rows(specs, baseline.results, tasks, settings, notes))
    if not rows:
        raise UsageError(_nothing_to_compare(baseline, candidate, tasks, notes))
    rows = _decided(rows, settings)
    notes.extend(_non_finite_notes(rows))
    pooled = stopped_runs.pooled(candidate.results)
    if any(stopped_runs.too_few_alone(row, pooled) for row in rows):
        notes.append(
            "Tasks the candidate stopped with their group (gated as one) have too few documents to decide "
            "alone: their inconclusive rows leave the verdict to the group's row."
        )
    untrusted = _untrusted(baseline, candidate)
    result = Comparison(
        str(baseline.results_path),
        str(candidate.results_path),
        settings,
        tuple(rows),
        tuple(tasks),
        verdicts.overall([row.verdict for row in rows if not stopped_runs.too_few_alone(row, pooled)]),
        tuple(notes),
        iterations=max([settings.iterations, *(row.result.iterations or 0 for row in rows)]),
    )
    for reason in untrusted:  # a gate never passes on an untrusted score
        result = inconclusive_because(result, reason)
    return result


def _pair(
    task: str, baseline: outputs.RunOutput, candidate: outputs.RunOutput, notes: list[str]
) -> pairing.TaskPairing:
    configs = (_config(baseline, task), _config(candidate, task))
    pairs = pairing.pair_task(
        task,
        baseline.samples(task),
        candidate.samples(task),
        configs=configs,
        higher_is_better=directions.resolve({**_directions(candidate, task), **_directions(baseline, task)}, configs),
    )
    notes.extend(pairing.prompt_notes(task, pairs, (baseline.results, candidate.results)))
    notes.extend(_pairing_notes(pairs))
    notes.extend(pairs.unpaired)
    return pairs


def _has_direction(metric: pairing.MetricPairs, notes: list[str]) -> bool:
    if metric.higher_is_better is None:
        notes.append(directions.refused_note(metric.task, metric.metric, metric.filter))
        return False
    return True


def _nothing_to_compare(
    baseline: outputs.RunOutput, candidate: outputs.RunOutput, tasks: list[pairing.TaskPairing], notes: list[str]
) -> str:
    listed = [set(run.results.results_names()) for run in (baseline, candidate)]
    if not listed[0] & listed[1]:
        why = "they have no task in common"
    elif not tasks:
        why = "no task they share has samples in both (run both with --log_samples)"
    elif not any(pairs.paired for pairs in tasks):
        why = "their shared tasks have no document in common (another dataset, or another split?)"
    else:
        why = "no metric of their shared documents could be compared"
    detail = " ".join(notes[-3:])
    return f"Nothing to compare: {baseline.label} and {candidate.label}: {why}." + (f" {detail}" if detail else "")


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


def _row(metric: pairing.MetricPairs, settings: Settings, iterations: int, notes: list[str]) -> Row | None:
    assert metric.higher_is_better is not None  # refused before (`_has_direction`)
    result = _test(metric, settings, iterations)
    if result is None:
        notes.append(
            f"{metric.task} {metric.metric} ({metric.filter}): aggregation {metric.aggregation!r} is not "
            "one assay compare knows; left out."
        )
        return None
    max_drop = verdicts.max_drop_for(list(settings.tolerances), metric.task, metric.metric)
    return Row(metric.task, metric.metric, metric.filter, metric.higher_is_better, result, max_drop)


def _test(metric: pairing.MetricPairs, settings: Settings, iterations: int) -> statistics.PairedTest | None:
    if metric.aggregation == "brier_score":
        baseline = np.array([corpus.brier_per_document(item) for item in metric.baseline])
        candidate = np.array([corpus.brier_per_document(item) for item in metric.candidate])
    elif metric.aggregation in corpus.CORPUS:
        aggregate, prepare = corpus.CORPUS[metric.aggregation]
        sides = (prepare(metric.baseline), prepare(metric.candidate))
        first = statistics.paired_bootstrap(
            *sides, aggregate, alpha=settings.alpha, iterations=settings.iterations, seed=settings.seed
        )
        # Only a row that looks significant needs the finer p that Holm over many rows asks for:
        # redrawn with the same seed (its first draws are the same), the others cost no more.
        if iterations <= settings.iterations or not first.p_value < settings.alpha:
            return first
        return statistics.paired_bootstrap(
            *sides, aggregate, alpha=settings.alpha, iterations=iterations, seed=settings.seed
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
    specs: list[groups.GroupMetric],
    baseline: RunResults,
    tasks: list[pairing.TaskPairing],
    settings: Settings,
    notes: list[str],
) -> list[Row]:
    pairs = {(metric.task, metric.metric, metric.filter): metric for task in tasks for metric in task.metrics}
    rows = []
    for spec in specs:
        result = groups.compare_group(spec, pairs, alpha=settings.alpha, notes=notes)
        if result is None:
            continue
        higher = groups.direction(spec, baseline, pairs)
        if higher is None:
            notes.append(directions.refused_note(spec.group, spec.metric, spec.filter))
            continue
        max_drop = verdicts.max_drop_for(list(settings.tolerances), spec.group, spec.metric)
        rows.append(Row(spec.group, spec.metric, spec.filter, higher, result, max_drop, group=spec))
    notes.extend(groups.weighting_note([row.group for row in rows if row.group is not None]))
    return rows


def _decided(rows: list[Row], settings: Settings) -> list[Row]:
    """Each row with its Holm-adjusted p and the verdict that p gives."""
    adjusted = statistics.holm([row.result.p_value for row in rows])
    return [
        dataclasses.replace(
            row,
            p_holm=p,
            verdict=verdicts.verdict(
                row.result,
                higher_is_better=row.higher_is_better,
                alpha=settings.alpha,
                max_drop=row.max_drop,
                margin=settings.margin,
                p_value=p,
            ),
        )
        for row, p in zip(rows, adjusted, strict=False)
    ]


def _non_finite_notes(rows: list[Row]) -> list[str]:
    notes = []
    for row in rows:
        sides = [
            f"the {side}'s is {value}"
            for side, value in (("baseline", row.result.baseline), ("candidate", row.result.candidate))
            if not math.isfinite(value)
        ]
        if sides:
            notes.append(
                f"{row.task} {row.metric} ({row.filter}): not finite, {' and '.join(sides)} (a NaN score or a -inf "
                "log-likelihood); its numbers are null in JSON and it cannot be tested."
            )
    return notes
