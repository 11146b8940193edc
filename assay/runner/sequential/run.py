"""A sequential run: each task's documents in a seeded random order, scored chunk by chunk,
until the task's gate knows the answer or the documents run out. A group whose score is the
mean over its documents (MMLU) is one unit (`pooling`): its tasks' documents in one order,
one gate, all its tasks stopping together.

Within a chunk the run is an ordinary run's: every rank holds every document's requests
(built in document order, so few-shot draws never depend on the order or the rank), takes
its cost-balanced share of the chunk, sends it to the model in one call per request type
(batching, shared-prefix passes and the response cache work as always) and scores it. Rank
0 gathers the chunk's scores, feeds the task's gate (`sequential_watch`) and broadcasts go
on or stop, so that every rank leaves the task after the same chunk. A stopped run resumes
like any other: the same seed draws the same order, and the response cache answers the
chunks already scored.

The results record, per task (and per pooled group), the documents scored of the total, why
it stopped, the gate's interval at the stop and the work not spent (`run_info["sequential"]`,
see `block`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.errors import UserError
from assay.run_options import EvalOptions, SequentialSettings
from assay.run_results import RunResults
from assay.runner import distributed, doc_work
from assay.runner.doc_work import DocWork, ProgressFn
from assay.runner.models.lm import LM
from assay.runner.results import assemble
from assay.runner.scoring.records import DocScores
from assay.runner.sequential import order as chunk_order
from assay.runner.sequential.pooling import Unit, units
from assay.runner.sequential.watch import Baseline, Member, TaskWatch
from assay.runner.tasks.index import LoadedTasks
from assay.runner.tasks.task import Task

log = logging.getLogger(__name__)

SCORED_IN_FULL = "exhausted"
"""The reason of a task that ran out of documents (also one no gate could decide)."""


def evaluate(
    lm: LM,
    loaded: LoadedTasks,
    work: list[DocWork],
    options: EvalOptions,
    settings: SequentialSettings,
    *,
    keep: str | None,
    progress: ProgressFn | None,
) -> RunResults | None:
    """The evaluator's `evaluate` in chunks: the results on rank 0, with their `sequential` member."""
    by_task: dict[str, list[DocWork]] = {name: [] for name in loaded.tasks}
    for item in work:
        by_task[item.task.name].append(item)
    planned = units(loaded, by_task)
    done = run_tasks(lm, planned, settings, keep=keep, samples=options.samples or {}, progress=progress)
    if done is None:
        return None
    scored, sequential = done
    health = getattr(lm, "request_health", None)
    results = assemble.run_results(
        loaded,
        [scored],
        bootstrap_iters=options.bootstrap_iters,
        keep_samples=keep is not None,
        sentinels=options.sentinels,
        served=health() if callable(health) else None,
    )
    return dataclasses.replace(results, run_info={**results.run_info, "sequential": sequential})


def run_tasks(
    lm: LM,
    planned: Sequence[Unit],
    settings: SequentialSettings,
    *,
    keep: str | None,
    samples: Mapping[str, Sequence[int]],
    progress: ProgressFn | None,
) -> tuple[list[DocScores], dict[str, Any]] | None:
    """Every unit's chunks on this rank; on rank 0 the scores of the documents scored and the
    results' `sequential` block (None elsewhere). `planned`: the units (`pooling.units`), the
    same on every rank."""
    rank, _ = distributed.rank_and_world()
    baseline = _baseline(settings) if rank == 0 else None
    counter = _Progress(progress if rank == 0 else None, sum(_requests(unit.items) for unit in planned))
    scored: list[DocScores] = []
    tasks: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    for unit in planned:
        watch = _watch(unit, settings, baseline) if rank == 0 else None
        records, summary = _run_unit(lm, unit, settings, watch, keep=keep, samples=samples, counter=counter)
        if rank != 0:
            continue
        scored.extend(records)
        if unit.group is None:
            tasks[unit.name] = summary
            continue
        groups[unit.name] = summary
        for task in unit.tasks:
            tasks[task.name] = _member_summary(unit, summary, task, records)
    if rank != 0:
        return None
    label = baseline.label if baseline is not None else None
    return scored, block(settings, tasks, baseline_label=label, groups=groups)


def _run_unit(
    lm: LM,
    unit: Unit,
    settings: SequentialSettings,
    watch: TaskWatch | None,
    *,
    keep: str | None,
    samples: Mapping[str, Sequence[int]],
    counter: _Progress,
) -> tuple[list[DocScores], dict[str, Any]]:
    rank, world = distributed.rank_and_world()
    items = unit.items
    order = chunk_order.document_order(len(items), seed=settings.seed, task=unit.name)
    sizes = chunk_order.chunk_sizes(len(items), settings.chunk_size)
    pieces = chunk_order.chunks(order, sizes)
    # where each document comes in the order: the gate sees a chunk's documents in that order
    place = {(items[index].task.name, items[index].position): at for at, index in enumerate(order)}
    scored: list[DocScores] = []
    decision: Any = None
    started = time.perf_counter()
    documents = 0
    for number, piece in enumerate(pieces, start=1):
        chunk = [items[index] for index in piece]
        shard = distributed.balanced_shards([item.cost for item in chunk], world)[rank]
        mine = [chunk[index] for index in shard]
        doc_work.run_requests(lm, [inst for item in mine for inst in item.instances], None, global_total=0)
        gathered = distributed.gather_to_rank0(doc_work.score(mine, keep=keep, samples=samples))
        documents += len(chunk)
        stop = False
        if rank == 0:
            assert gathered is not None
            records = [record for part in gathered for record in part]
            scored.extend(records)
            exhausted = number == len(pieces)
            if watch is not None:
                decision = watch.look(records, exhausted=exhausted, place=place)
            stop = exhausted or (decision is not None and decision.stop)
        counter.add(_requests(chunk))
        if distributed.broadcast_from_rank0(stop):
            break
    counter.add(sum(_requests([items[i] for i in piece]) for piece in pieces[number:]))
    if rank != 0:
        return [], {}
    # model-seconds: every rank's share of the wall time, so the figure holds on one rank or many
    elapsed = (time.perf_counter() - started) * world
    summary = _summary(watch, decision, documents=documents, total=len(items), looks=number, seconds=elapsed)
    if unit.group is not None:
        summary["tasks"] = [task.name for task in unit.tasks]
    log.info(
        "%s%s: scored %d of %d documents in %d chunk(s) of up to %d; %s",
        "group " if unit.group is not None else "",
        unit.name,
        documents,
        len(items),
        number,
        max(sizes),
        summary["stopped"],
    )
    return scored, summary


def _member_summary(unit: Unit, group: Mapping[str, Any], task: Task, records: Sequence[DocScores]) -> dict[str, Any]:
    """A pooled group's task in the results' `sequential.tasks`: its own documents, the group's stop."""
    total = sum(1 for item in unit.items if item.task.name == task.name)
    documents = len({record.position for record in records if record.task == task.name})
    per_document = float(group["seconds_per_document"])
    return {
        "documents": documents,
        "total": total,
        "stopped": group["stopped"],
        "group": unit.name,
        "looks": group["looks"],
        "seconds_per_document": per_document,
        "saved_documents": total - documents,
        "saved_seconds": per_document * (total - documents),
    }


def _summary(
    watch: TaskWatch | None, decision: Any, *, documents: int, total: int, looks: int, seconds: float
) -> dict[str, Any]:
    """One task's (or pooled group's) entry in the results' `sequential` block."""
    per_document = seconds / documents if documents else 0.0
    summary: dict[str, Any] = {
        "documents": documents,
        "total": total,
        "stopped": decision.reason if decision is not None and decision.stop else SCORED_IN_FULL,
        "looks": looks,
        "seconds_per_document": per_document,
        "saved_documents": total - documents,
        "saved_seconds": per_document * (total - documents),
    }
    if watch is None or not watch.metrics:
        summary["note"] = "no per-document metric of a known range to decide on: every document scored"
    elif watch.gate is None:
        summary["note"] = (
            "nothing to decide against (no baseline scores of this task, or of one of the group's, "
            "no target half-width): every document scored"
        )
    if watch is not None:
        summary["max_drop"] = watch.max_drop if watch.baseline else None
        if watch.unpaired:
            summary["unpaired"] = watch.unpaired
    if decision is not None:
        summary["interval"] = [
            {
                "metric": look.metric,
                "n": look.n,
                "mean_difference": _finite(look.mean_difference),
                "lower": _finite(look.lower),
                "upper": _finite(look.upper),
            }
            for look in decision.looks
        ]
    return summary


def block(
    settings: SequentialSettings,
    tasks: Mapping[str, Any],
    *,
    baseline_label: str | None,
    groups: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The results' `sequential` member: how the run was told to look, and what each task (and
    each pooled group: `groups`, its tasks' entries naming it as their `group`) did."""
    return {
        "seed": settings.seed,
        "chunk_size": settings.chunk_size,
        "alpha": settings.alpha,
        "baseline": baseline_label,
        "target_ci_half_width": settings.target_half_width,
        "tasks": dict(tasks),
        "groups": dict(groups or {}),
    }


def _watch(unit: Unit, settings: SequentialSettings, baseline: Baseline | None) -> TaskWatch:
    members = []
    for task in unit.tasks:
        values = None
        if baseline is not None:
            try:
                values = baseline.values(task.name)
            except UserError as error:  # an unreadable scores file: this task (its group) is scored in full
                log.warning("the baseline's scores of %s cannot be read (%s); scoring every document", task.name, error)
        members.append(Member(task, [item.doc for item in unit.items if item.task.name == task.name], values))
    metrics = unit.metrics.get(unit.tasks[0].name, {})
    return TaskWatch(unit.name, members, metrics, settings, with_baseline=baseline is not None)


def _baseline(settings: SequentialSettings) -> Baseline | None:
    if settings.baseline is None:
        return None
    try:
        return Baseline.read(settings.baseline)
    except UserError as error:  # the run is not lost: it scores every document, and the comparison says why
        log.warning("the baseline %s cannot be read (%s); every document is scored", settings.baseline, error)
        return None


def _requests(items: Sequence[DocWork]) -> int:
    return sum(inst.repeats for item in items for inst in item.instances)


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class _Progress:
    """Requests done of the run's total, on rank 0; a stopped task's requests count as done."""

    def __init__(self, report: Callable[[int, int], None] | None, total: int) -> None:
        self.report, self.total, self.done = report, total, 0
        if report is not None:
            report(0, total)

    def add(self, requests: int) -> None:
        self.done = min(self.total, self.done + requests)
        if self.report is not None and requests:
            self.report(self.done, self.total)
