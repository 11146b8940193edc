"""simple_evaluate and evaluate: lm-eval's pipeline from task names to the results dict.

Every rank builds every document's prompt in document order (so few-shot draws never
depend on the rank), then runs only its share of the requests, chosen by token cost.
Per-document scores travel to rank 0, which puts them back in document order and
aggregates exactly as a single process would.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import defaultdict
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from assay.errors import UsageError, UserError
from assay.runner import distributed
from assay.runner.tasks.groups import groups_bottom_up
from assay.runner.models.instance import Instance
from assay.runner.jsonutil import json_default, sha256_text
from assay.runner.models.lm import LM
from assay.runner.options import DEFAULT_BOOTSTRAP_ITERS, DEFAULT_OTHER_SEED, DEFAULT_RANDOM_SEED, EvalOptions
from assay.runner.tasks.task import PromptSettings, Task
from assay.runner.tasks.index import LoadedTasks, TaskManager

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]
_CORPUS_METRICS = ("bleu", "chrf", "chrf++", "ter")


def simple_evaluate(
    model: str | LM,
    model_args: str | dict[str, Any] | None = None,
    tasks: Sequence[Any] | None = None,
    num_fewshot: int | None = None,
    batch_size: int | str | None = None,
    max_batch_size: int | None = None,
    device: str | None = None,
    use_cache: str | None = None,
    cache_requests: bool = False,
    rewrite_requests_cache: bool = False,
    delete_requests_cache: bool = False,
    limit: int | float | None = None,
    samples: Mapping[str, Sequence[int]] | None = None,
    bootstrap_iters: int = DEFAULT_BOOTSTRAP_ITERS,
    check_integrity: bool = False,
    write_out: bool = False,
    log_samples: bool = True,
    evaluation_tracker: Any = None,
    system_instruction: str | None = None,
    apply_chat_template: bool | str = False,
    fewshot_as_multiturn: bool = True,
    gen_kwargs: str | dict[str, Any] | None = None,
    task_manager: TaskManager | None = None,
    verbosity: str | None = None,
    predict_only: bool = False,
    random_seed: int | None = DEFAULT_RANDOM_SEED,
    numpy_random_seed: int | None = DEFAULT_OTHER_SEED,
    torch_random_seed: int | None = DEFAULT_OTHER_SEED,
    fewshot_random_seed: int | None = DEFAULT_OTHER_SEED,
    confirm_run_unsafe_code: bool = False,
    metadata: dict[str, Any] | None = None,
    *,
    progress: ProgressFn | None = None,
) -> dict[str, Any] | None:
    """Evaluate `model` on `tasks`; lm-eval 0.4.13's signature and results dict.

    Returns the results on rank 0 and None on other ranks. The keyword arguments are
    lm-eval's, kept for drop-in use; they become one `EvalOptions` record for `run`.
    """
    del verbosity  # lm-eval deprecated it too; logging is configured by the caller
    options = EvalOptions(
        model=model, model_args=model_args, tasks=tuple(tasks or ()), num_fewshot=num_fewshot,
        batch_size=batch_size, max_batch_size=max_batch_size, device=device, use_cache=use_cache,
        cache_requests=cache_requests, rewrite_requests_cache=rewrite_requests_cache,
        delete_requests_cache=delete_requests_cache, limit=limit, samples=samples,
        bootstrap_iters=bootstrap_iters, check_integrity=check_integrity, write_out=write_out,
        log_samples=log_samples, system_instruction=system_instruction, apply_chat_template=apply_chat_template,
        fewshot_as_multiturn=fewshot_as_multiturn, gen_kwargs=gen_kwargs, task_manager=task_manager,
        predict_only=predict_only, random_seed=random_seed, numpy_random_seed=numpy_random_seed,
        torch_random_seed=torch_random_seed, fewshot_random_seed=fewshot_random_seed,
        confirm_run_unsafe_code=confirm_run_unsafe_code, metadata=metadata, progress=progress,
    )
    return run(options, evaluation_tracker=evaluation_tracker)


def run(options: EvalOptions, *, evaluation_tracker: Any = None) -> dict[str, Any] | None:
    """The pipeline behind simple_evaluate: model, tasks, overrides, evaluate, run info."""
    from assay.runner.models.model_args import parse_model_args
    from assay.runner.models import get_model

    start = time.time()
    if options.limit is not None and options.samples is not None:
        raise UsageError("--limit and --samples cannot be used together; pick one.")
    if options.delete_requests_cache:
        from assay.runner.models.caching import delete_request_cache

        delete_request_cache()
    _seed_everything(options.random_seed, options.numpy_random_seed, options.torch_random_seed)
    if not options.tasks:
        raise UserError("No tasks given; pass --tasks with at least one task name (see `assay ls tasks`).")
    gen_kwargs = options.gen_kwargs
    if isinstance(gen_kwargs, str):
        gen_kwargs = parse_model_args(gen_kwargs, flag="--gen_kwargs") or None

    if isinstance(options.model, str):
        lm: LM = get_model(options.model).create_from_arg_string(
            options.model_args if options.model_args is not None else "",
            {"batch_size": options.batch_size, "max_batch_size": options.max_batch_size, "device": options.device},
        )
    elif isinstance(options.model, LM):
        lm = options.model
    else:
        raise UserError(f"model must be a registered model name or an assay LM instance, not {type(options.model).__name__}.")

    rank, _ = distributed.rank_and_world()
    if options.use_cache is not None:
        from assay.runner.models.caching import CachingLM

        lm = CachingLM(lm, f"{options.use_cache}_rank{rank}.db")

    task_manager = options.task_manager
    if task_manager is None:
        parsed_args = parse_model_args(options.model_args) if isinstance(options.model_args, str) else dict(options.model_args or {})
        task_manager = TaskManager(options.include_path, metadata={**parsed_args, **(options.metadata or {})})
    loaded = task_manager.load(list(options.tasks))

    for task in loaded.tasks.values():
        if task.output_type == "generate_until" and gen_kwargs:
            task.config.generation_kwargs = {**(task.config.generation_kwargs or {}), **gen_kwargs}
        if options.predict_only:
            task.predict_only()
        if options.num_fewshot is not None:
            if task.config.num_fewshot == 0:
                log.info("num_fewshot is fixed to 0 by %s's config; --num_fewshot is ignored for it.", task.name)
            else:
                task.config.num_fewshot = options.num_fewshot
        elif task.config.num_fewshot is None:
            task.config.num_fewshot = 0
        task.set_fewshot_seed(options.fewshot_random_seed)

    if options.check_integrity:
        check_tasks(loaded)
    if evaluation_tracker is not None:
        evaluation_tracker.general_config_tracker.log_experiment_args(
            model_source=options.model if isinstance(options.model, str) else "CUSTOM",
            model_args=options.model_args or "",
            system_instruction=options.system_instruction,
            chat_template=lm.chat_template(options.apply_chat_template) if options.apply_chat_template else None,
            fewshot_as_multiturn=options.fewshot_as_multiturn,
        )

    results = evaluate(
        lm,
        loaded,
        limit=options.limit,
        samples=options.samples,
        cache_requests=options.cache_requests,
        rewrite_requests_cache=options.rewrite_requests_cache,
        bootstrap_iters=options.bootstrap_iters,
        write_out=options.write_out,
        log_samples=True if options.predict_only else options.log_samples,
        system_instruction=options.system_instruction,
        apply_chat_template=options.apply_chat_template,
        fewshot_as_multiturn=options.fewshot_as_multiturn,
        confirm_run_unsafe_code=options.confirm_run_unsafe_code,
        progress=options.progress,
    )
    if results is None:
        return None
    results["config"] = {
        "model": options.model if isinstance(options.model, str) else type(options.model).__name__,
        "model_args": options.model_args,
        **_safe(lm.model_info),
        "batch_size": options.batch_size,
        "batch_sizes": list(getattr(lm, "batch_sizes", {}).values()) if isinstance(getattr(lm, "batch_sizes", None), dict) else [],
        "device": options.device,
        "use_cache": options.use_cache,
        "limit": options.limit,
        "bootstrap_iters": options.bootstrap_iters,
        "gen_kwargs": gen_kwargs,
        "random_seed": options.random_seed,
        "numpy_seed": options.numpy_random_seed,
        "torch_seed": options.torch_random_seed,
        "fewshot_seed": options.fewshot_random_seed,
    }
    from assay.runner.results import run_info

    results["git_hash"] = run_info.git_hash()
    results["date"] = start
    results.update(run_info.environment())
    results.update(_safe(lm.tokenizer_info))
    return results


def _safe(getter: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return dict(getter())
    except NotImplementedError:
        return {}


def _seed_everything(python_seed: int | None, numpy_seed: int | None, torch_seed: int | None) -> None:
    if python_seed is not None:
        random.seed(python_seed)
    if numpy_seed is not None:
        np.random.seed(numpy_seed)
    if torch_seed is not None:
        import torch

        torch.manual_seed(torch_seed)


def check_tasks(loaded: LoadedTasks) -> None:
    """--check_integrity: every task renders its first document's prompt and target."""
    for task in loaded.tasks.values():
        doc = task.eval_docs[0]
        task.fewshot_context(doc, 0, PromptSettings())
        task.doc_to_target(doc)


def sample_size(task: Task, limit: int | float | None) -> int | None:
    if limit is None:
        return None
    return int(math.ceil(len(task.eval_docs) * limit)) if limit < 1.0 else int(limit)


class _DocWork:
    """One document of one task on this rank: its requests and, later, its responses."""

    __slots__ = ("task", "position", "doc_id", "doc", "instances")

    def __init__(self, task: Task, position: int, doc_id: int, doc: dict[str, Any], instances: list[Instance]) -> None:
        self.task, self.position, self.doc_id, self.doc, self.instances = task, position, doc_id, doc, instances

    @property
    def cost(self) -> int:
        return sum(len(str(inst.args[0])) + len(str(inst.args[-1])) for inst in self.instances) * max(self.task.config.repeats, 1)


def evaluate(
    lm: LM,
    loaded: LoadedTasks,
    *,
    limit: int | float | None = None,
    samples: Mapping[str, Sequence[int]] | None = None,
    cache_requests: bool | str = False,
    rewrite_requests_cache: bool = False,
    bootstrap_iters: int | None = DEFAULT_BOOTSTRAP_ITERS,
    write_out: bool = False,
    log_samples: bool = True,
    system_instruction: str | None = None,
    apply_chat_template: bool | str = False,
    fewshot_as_multiturn: bool = False,
    confirm_run_unsafe_code: bool = False,
    progress: ProgressFn | None = None,
) -> dict[str, Any] | None:
    if limit is not None and samples is not None:
        raise UsageError("--limit and --samples cannot be used together; pick one.")
    for task in loaded.tasks.values():
        if task.config.unsafe_code and not confirm_run_unsafe_code:
            raise UserError(f"Task {task.name!r} runs model-written code; pass --confirm_run_unsafe_code to run it.")
        if "bypass" in task.metrics.fns and not log_samples:
            raise UsageError("--predict_only needs --log_samples (it writes predictions, not metrics).")
    rank, world_size = distributed.rank_and_world()
    settings = PromptSettings(
        system_instruction=system_instruction,
        chat_template=lm.apply_chat_template if apply_chat_template else None,
        fewshot_as_multiturn=fewshot_as_multiturn,
    )

    work: list[_DocWork] = []
    for task in loaded.tasks.values():
        chosen = task.selected_docs(limit=sample_size(task, limit), samples=(samples or {}).get(task.name))
        per_doc = _requests_for(task, chosen, settings, lm, cache_requests, rewrite_requests_cache, apply_chat_template)
        for position, ((doc_id, doc), instances) in enumerate(zip(chosen, per_doc)):
            work.append(_DocWork(task, position, doc_id, doc, instances))
        if write_out and rank == 0 and per_doc:
            _print_example(task, per_doc[0])

    shards = distributed.balanced_shards([item.cost for item in work], world_size)
    mine = [work[i] for i in shards[rank]]
    global_total = sum(inst.repeats for item in work for inst in item.instances)
    _run_requests(lm, [inst for item in mine for inst in item.instances], progress if rank == 0 else None, global_total=global_total)

    records = _score(mine, log_samples, (samples or {}))
    gathered = distributed.gather_to_rank0(records)
    if rank != 0 or gathered is None:
        return None
    by_task: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for rank_records in gathered:
        for record in rank_records:
            by_task[record[0]].append(record)
    return _assemble(loaded, by_task, bootstrap_iters, log_samples)


def _requests_for(
    task: Task,
    chosen: list[tuple[int, dict[str, Any]]],
    settings: PromptSettings,
    lm: LM,
    cache_requests: bool | str,
    rewrite: bool,
    apply_chat_template: bool | str,
) -> list[list[Instance]]:
    num_fewshot = task.config.num_fewshot or 0
    if not cache_requests:
        return task.build_requests(docs=chosen, num_fewshot=num_fewshot, settings=settings)
    from assay.runner.models.caching import RequestCache

    cache = RequestCache.for_task(
        task,
        num_fewshot=num_fewshot,
        chat=bool(apply_chat_template),
        multiturn=settings.fewshot_as_multiturn,
        system_instruction=settings.system_instruction,
        tokenizer_name=lm.tokenizer_name if apply_chat_template else "",
    )
    cached: list[list[Instance]] | None = None if rewrite else cache.load()
    if cached is not None and len(cached) >= len(chosen):
        return cached[: len(chosen)]
    built = task.build_requests(docs=chosen, num_fewshot=num_fewshot, settings=settings)
    cache.save(built)
    return built


def _print_example(task: Task, instances: list[Instance]) -> None:
    first = instances[0]
    print(
        f"Task: {task.name}; document {first.doc_id}; context prompt (starting on next line):\n{first.args[0]}\n"
        f"(end of prompt on previous line)\ntarget string or answer choice index (starting on next line):\n"
        f"{task.doc_to_target(first.doc)}\n(end of target on previous line)"
    )


_PROGRESS_CHUNK = 4096  # requests per model call when progress is reported: ~1 report per chunk


def _run_requests(lm: LM, instances: list[Instance], progress: ProgressFn | None, *, global_total: int) -> None:
    """Send this rank's requests to the model, one call per request type (per chunk with progress).

    Progress is rank 0's share scaled to the whole run: shards are balanced by cost, so
    rank 0's fraction done stands for everyone's.
    """
    by_type: dict[str, list[Instance]] = defaultdict(list)
    for inst in instances:
        by_type[inst.request_type].append(inst)
    total = sum(inst.repeats for inst in instances)
    done = 0
    for request_type, group in by_type.items():
        expanded = [inst for inst in group for _ in range(inst.repeats)]
        step = _PROGRESS_CHUNK if progress is not None else max(len(expanded), 1)
        method = getattr(lm, request_type)
        for start in range(0, len(expanded), step):
            chunk = expanded[start : start + step]
            responses = method([inst.request for inst in chunk])
            if len(responses) != len(chunk):
                raise RuntimeError(f"{type(lm).__name__}.{request_type} returned {len(responses)} results for {len(chunk)} requests")
            for inst, response in zip(chunk, responses):
                inst.resps.append(response)
            done += len(chunk)
            if progress is not None and total:
                progress(min(global_total, round(done * global_total / total)), global_total)


def _score(mine: list[_DocWork], log_samples: bool, samples: Mapping[str, Sequence[int]]) -> list[tuple[Any, ...]]:
    """(task, filter index, position, metrics, logged sample) for each of this rank's docs and filters."""
    by_task: dict[str, list[_DocWork]] = defaultdict(list)
    for item in mine:
        by_task[item.task.name].append(item)
    records: list[tuple[Any, ...]] = []
    for name, items in by_task.items():
        task = items[0].task
        instances = [inst for item in items for inst in item.instances]
        for ensemble in task.filters:
            ensemble.apply(instances)
        for filter_index, ensemble in enumerate(task.filters):
            key = ensemble.name
            for item in items:
                requests = sorted(item.instances, key=lambda inst: inst.idx)
                metrics = task.process_results(item.doc, [inst.filtered_resps[key] for inst in requests])
                sample = _log_sample(task, item, requests, key, metrics, samples.get(name)) if log_samples else None
                records.append((name, filter_index, item.position, metrics, sample))
    return records


def _log_sample(task: Task, item: _DocWork, requests: list[Instance], key: str, metrics: dict[str, Any], indices: Sequence[int] | None) -> dict[str, Any]:
    import json

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


def _assemble(loaded: LoadedTasks, by_task: dict[str, list[tuple[Any, ...]]], bootstrap_iters: int | None, log_samples: bool) -> dict[str, Any]:
    from assay.runner.scoring.stderr import stderr_for

    metrics_rows: dict[str, dict[str, Any]] = {}
    configs, versions, n_shot, higher, n_samples, logged = {}, {}, {}, {}, {}, {}
    for name, task in loaded.tasks.items():
        records = sorted(by_task.get(name, []), key=lambda r: (r[1], r[2]))
        raw: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for _, filter_index, _, metrics, _ in records:
            for metric, value in metrics.items():
                raw[(metric, task.filters[filter_index].name)].append(value)
        row: dict[str, Any] = {}
        sample_len = 0
        for (metric, filter_key), items in raw.items():
            aggregation = task.metrics.aggregation_for(metric)
            row[f"{metric},{filter_key}"] = aggregation(items)
            sample_len = max(sample_len, len(items))
            stderr = None
            if isinstance(bootstrap_iters, int) and bootstrap_iters > 0 and len(items) > 1:
                iters = min(bootstrap_iters, 100) if metric in _CORPUS_METRICS else bootstrap_iters
                stderr = stderr_for(aggregation, items, iters, metric=metric)
            row[f"{metric}_stderr,{filter_key}"] = stderr if stderr is not None else "N/A"
        config = task.dump_config()
        metrics_rows[name] = {"name": name, "alias": config.get("task_alias", name), "sample_len": sample_len, **row}
        configs[name] = config
        versions[name] = task.version
        n_shot[name] = config.get("num_fewshot", 0)
        higher[name] = task.metrics.higher_is_better_for(metric for metric, _ in raw)
        n_samples[name] = {"original": len(task.eval_docs), "effective": sample_len}
        logged[name] = [r[4] for r in records]

    all_groups = list(loaded.groups.values())
    for group in groups_bottom_up(loaded.groups):
        metrics_rows[group.name] = group.aggregate(metrics_rows)
        versions[group.name] = group.version
    for group in all_groups:
        shots = {n_shot[c] for c in group.child_names if c in n_shot}
        if len(shots) == 1:
            n_shot[group.name] = shots.pop()
        merged: dict[str, Any] = {}
        for child in group.child_names:
            for metric, better in higher.get(child, {}).items():
                if metric not in merged:
                    merged[metric] = better
                elif merged[metric] is not None and merged[metric] != better:
                    merged[metric] = None
        if merged:
            higher[group.name] = merged
    group_rows = {g.name: dict(metrics_rows[g.name]) for g in all_groups if g.has_aggregation and g.name in metrics_rows}
    results: dict[str, Any] = {
        "results": {name: dict(row) for name, row in metrics_rows.items()},
        **({"groups": group_rows} if group_rows else {}),
        "group_subtasks": {g.name: g.child_names for g in all_groups},
        "configs": dict(sorted(configs.items())),
        "versions": dict(sorted(versions.items())),
        "n-shot": dict(sorted(n_shot.items())),
        "higher_is_better": dict(sorted(higher.items())),
        "n-samples": n_samples,
    }
    if log_samples:
        results["samples"] = logged
    return results
