"""This rank's share of a run: documents' requests built, answered by the model, scored.

Every rank builds every document's requests in document order (few-shot draws never
depend on the rank), then runs only its share, chosen by token cost, and scores those
documents into `DocScores` for rank 0.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from assay.compare import outputs
from assay.run_options import EvalOptions
from assay.runner.jsonutil import json_default, sha256_text
from assay.runner.models import progress_label
from assay.runner.models.instance import Instance
from assay.runner.models.lm import LM
from assay.runner.scoring import sentinel_evidence
from assay.runner.scoring.records import DocScores
from assay.runner.scoring.sentinels import DocEvidence
from assay.runner.tasks.documents import Doc
from assay.runner.tasks.task import Task

ProgressFn = Callable[[int, int], None]
"""Called with (done, total) requests for status reporting (rank 0 only)."""


class DocWork:
    """One document of one task on this rank: its requests and, later, its responses."""

    __slots__ = ("task", "position", "doc_id", "doc", "instances")

    def __init__(self, task: Task, position: int, doc_id: int, doc: Doc, instances: list[Instance]) -> None:
        self.task, self.position, self.doc_id, self.doc, self.instances = task, position, doc_id, doc, instances

    @property
    def cost(self) -> int:
        return sum(len(str(inst.args[0])) + len(str(inst.args[-1])) for inst in self.instances) * max(
            self.task.config.repeats, 1
        )


def requests_for(task: Task, chosen: list[tuple[int, Doc]], lm: LM, options: EvalOptions) -> list[list[Instance]]:
    """The chosen documents' requests as the task's prompt plan wants them, from the request
    cache when --cache_requests allows (the plan names the cached file, as lm-eval's key does)."""
    if not options.cache_requests:
        return task.build_requests(chosen)
    from assay.runner.models.caching import RequestCache

    plan = task.prompt_plan
    cache = RequestCache.for_task(
        task,
        num_fewshot=plan.num_fewshot,
        chat=bool(options.apply_chat_template),
        multiturn=plan.settings.fewshot_as_multiturn,
        system_instruction=plan.settings.system_instruction,
        tokenizer_name=lm.tokenizer_name if options.apply_chat_template else "",
    )
    cached: list[list[Instance]] | None = None if options.rewrite_requests_cache else cache.load()
    if cached is not None and len(cached) >= len(chosen):
        return cached[: len(chosen)]
    built = task.build_requests(chosen)
    cache.save(built)
    return built


def print_example(task: Task, instances: list[Instance]) -> None:
    """--write_out: the first document's prompt and target, in lm-eval's words."""
    first = instances[0]
    print(
        f"Task: {task.name}; document {first.doc_id}; context prompt (starting on next line):\n{first.args[0]}\n"
        f"(end of prompt on previous line)\ntarget string or answer choice index (starting on next line):\n"
        f"{task.doc_to_target(first.doc)}\n(end of target on previous line)"
    )


_PROGRESS_CHUNK = 4096  # requests per model call for progress, where a backend does not stream answers


def run_requests(lm: LM, instances: list[Instance], progress: ProgressFn | None, *, global_total: int) -> None:
    """Send this rank's requests to the model, one call per request type.

    Progress counts answers as the model reports them (`LM.streams_answers`: the hf backend
    and the response cache), so every request of a type is sent in one call, as lm-eval
    sends them: sorted and batched as a local run does, the numbers of a pod equal a local
    run's. A backend that does not stream is called per chunk of requests when progress is
    reported, with a report after each. Progress is rank 0's share scaled to the whole run:
    shards are balanced by cost, so rank 0's fraction done stands for everyone's.
    """
    by_type: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_type[inst.request_type].append(inst)
    total = sum(inst.repeats for inst in instances)
    done = 0
    if progress is None or not total:
        report: ProgressFn | None = None
    else:
        report = progress
        report(0, global_total)  # the model is loaded and the requests built: the run's start-up ends here

    def scaled(count: int) -> None:
        assert report is not None
        report(min(global_total, round(count * global_total / total)), global_total)

    reached = scaled if report is not None else _unreported

    streams = bool(getattr(lm, "streams_answers", False))
    for request_type, group in by_type.items():
        expanded = [inst for inst in group for _ in range(inst.repeats)]
        step = _PROGRESS_CHUNK if report is not None and not streams else max(len(expanded), 1)
        method = getattr(lm, request_type)
        for start in range(0, len(expanded), step):
            chunk = expanded[start : start + step]
            with progress_label.serving(inst.task_name for inst in chunk), _answers_counted(lm, done, reached):
                responses = method([inst.request for inst in chunk])
            if len(responses) != len(chunk):
                raise RuntimeError(
                    f"{type(lm).__name__}.{request_type} returned {len(responses)} results for {len(chunk)} requests"
                )
            for inst, response in zip(chunk, responses, strict=False):
                inst.resps.append(response)
            done += len(chunk)
            reached(done)


def _unreported(count: int) -> None:
    """Progress where nobody listens."""


@contextlib.contextmanager
def _answers_counted(lm: LM, before: int, reached: Callable[[int], None]) -> Iterator[None]:
    """While a streaming backend answers one call, `reached` hears the running count of
    answers (`before` plus those reported so far) after each of its batches."""
    if reached is _unreported or not getattr(lm, "streams_answers", False):
        yield
        return
    heard = before
    previous = lm.answer_sink

    def count(done: Sequence[tuple[int, Any]]) -> None:
        nonlocal heard
        heard += len(done)
        reached(heard)
        if previous is not None:
            previous(done)

    lm.answer_sink = count
    try:
        yield
    finally:
        lm.answer_sink = previous


def score(mine: list[DocWork], *, keep: str | None, samples: Mapping[str, Sequence[int]]) -> list[DocScores]:
    """Each of this rank's documents scored under each of its task's filter pipelines.

    `keep`: "full" keeps each document's samples-JSONL record (--log_samples), "scores"
    only its identity and metric values (a `scores_` line, see `assay.compare.outputs`), None nothing."""
    by_task: dict[str, list[DocWork]] = defaultdict(list)
    for item in mine:
        by_task[item.task.name].append(item)
    records: list[DocScores] = []
    for name, items in by_task.items():
        task = items[0].task
        clusters = outputs.cluster_key(task.dump_config()) if keep == "scores" else None
        instances = [inst for item in items for inst in item.instances]
        for ensemble in task.filters:
            ensemble.apply(instances)
        for filter_index, ensemble in enumerate(task.filters):
            key = ensemble.name
            for item in items:
                requests = sorted(item.instances, key=lambda inst: inst.idx)
                metrics = task.process_results(item.doc, [inst.filtered_resps[key] for inst in requests])
                sample = None
                if keep is not None:
                    sample = _log_sample(task, item, requests, key, metrics, samples.get(name))
                    sample = sample if keep == "full" else outputs.score_line(sample, cluster_key=clusters)
                evidence = _evidence(task, requests, metrics) if filter_index == 0 else None
                records.append(DocScores(name, filter_index, item.position, metrics, sample, evidence))
    return records


def _evidence(task: Task, requests: list[Instance], metrics: Mapping[str, Any]) -> DocEvidence | None:
    """What the sentinels read of one document's responses (see `scoring.sentinels`)."""
    if task.output_type == "multiple_choice":
        return sentinel_evidence.multiple_choice([inst.resps[0][0] for inst in requests if inst.resps], metrics)
    if task.output_type == "generate_until" and requests:
        first = requests[0]
        return sentinel_evidence.generation(first.resps, [first.filtered_resps[f.name] for f in task.filters])
    return None


def _log_sample(
    task: Task,
    item: DocWork,
    requests: list[Instance],
    key: str,
    metrics: dict[str, Any],
    indices: Sequence[int] | None,
) -> dict[str, Any]:
    target = task.doc_to_target(item.doc)
    sample = {
        "doc_id": indices[item.doc_id] if indices else item.doc_id,
        "doc": item.doc,
        "target": target,
        "arguments": [inst.args for inst in requests],
        "resps": [inst.resps for inst in requests],
        "filtered_resps": [inst.filtered_resps[key] for inst in requests],
        "filter": key,
        "metrics": list(metrics.keys()),
        "doc_hash": sha256_text(json.dumps(requests[0].doc, indent=2, default=json_default, ensure_ascii=False)),
        "prompt_hash": sha256_text(str(requests[0].args[0])),
        "target_hash": sha256_text(str(target)),
    }
    sample.update(metrics)
    return sample
