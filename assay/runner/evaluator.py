"""simple_evaluate and evaluate: lm-eval's pipeline from task names to the results dict.

Every rank builds every document's prompt in document order (so few-shot draws never
depend on the rank), then runs only its share of the requests, chosen by token cost.
Per-document scores travel to rank 0, which puts them back in document order and
aggregates exactly as a single process would.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from assay import run_rules
from assay.batch_size import BatchSize
from assay.errors import UsageError, UserError
from assay.run_options import DEFAULT_BOOTSTRAP_ITERS, DEFAULT_OTHER_SEED, DEFAULT_RANDOM_SEED, EvalOptions
from assay.run_results import RunResults
from assay.runner import distributed, doc_work
from assay.runner.checks import preflight
from assay.runner.doc_work import ProgressFn
from assay.runner.models.lm import LM
from assay.runner.results import assemble
from assay.runner.tasks.index import LoadedTasks, TaskManager
from assay.runner.tasks.overrides import RunOverrides
from assay.runner.tasks.prompt_plan import ChatTemplate, PromptPlan, PromptSettings
from assay.runner.tasks.task import Task

log = logging.getLogger(__name__)

_KEYWORDS_AS_GIVEN = (
    "num_fewshot",
    "max_batch_size",
    "device",
    "use_cache",
    "cache_requests",
    "rewrite_requests_cache",
    "delete_requests_cache",
    "limit",
    "samples",
    "bootstrap_iters",
    "check_integrity",
    "write_out",
    "system_instruction",
    "apply_chat_template",
    "fewshot_as_multiturn",
    "predict_only",
    "random_seed",
    "numpy_random_seed",
    "torch_random_seed",
    "fewshot_random_seed",
    "confirm_run_unsafe_code",
    "metadata",
)
"""simple_evaluate's keywords that reach `EvalOptions` as given, under the same name (the
others are parsed first: model, model_args, tasks, batch_size, log_samples, gen_kwargs)."""


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
    """Evaluate `model` on `tasks`; lm-eval 0.4.13's signature and results dict (None on ranks but 0).

    Kept for callers written against lm-eval: the one edge that builds `EvalOptions` from keywords.
    """
    given = dict(locals())  # the keywords as the caller gave them, before any is parsed
    del verbosity  # lm-eval deprecated it too; logging is configured by the caller
    from assay.runner.models.model_args import parse_model_args

    run_rules.check_limit_or_samples(limit, samples)
    lm, name = _built_or_named(model)
    options = EvalOptions(
        model=name,
        model_args=model_args,
        tasks=tuple(tasks or ()),
        parsed_model_args=parse_model_args(model_args) if isinstance(model_args, str) else dict(model_args or {}),
        batch_size=None if batch_size is None else BatchSize.parse(batch_size, source="--batch_size", error=UsageError),
        log_samples=run_rules.log_samples(log_samples=log_samples, predict_only=predict_only),
        gen_kwargs=parse_model_args(gen_kwargs, flag="--gen_kwargs") or None
        if isinstance(gen_kwargs, str)
        else gen_kwargs,
        **{keyword: given[keyword] for keyword in _KEYWORDS_AS_GIVEN},
    )
    return run(options, lm=lm, task_manager=task_manager, progress=progress, evaluation_tracker=evaluation_tracker)


def _built_or_named(model: object) -> tuple[LM | None, str | None]:
    """simple_evaluate's `model`: the caller's instance, or a registered name."""
    if isinstance(model, LM):
        return model, None
    if isinstance(model, str):
        return None, model
    raise UserError(f"model must be a registered model name or an assay LM instance, not {type(model).__name__}.")


def run(
    options: EvalOptions,
    *,
    lm: LM | None = None,
    task_manager: TaskManager | None = None,
    progress: ProgressFn | None = None,
    evaluation_tracker: Any = None,
) -> dict[str, Any] | None:
    """simple_evaluate's pipeline (`run_results`), its results as lm-eval's dict (None on ranks but 0)."""
    run = run_results(
        options, lm=lm, task_manager=task_manager, progress=progress, evaluation_tracker=evaluation_tracker
    )
    return run.to_lmeval_dict() if run is not None else None


def run_results(
    options: EvalOptions,
    *,
    lm: LM | None = None,
    task_manager: TaskManager | None = None,
    progress: ProgressFn | None = None,
    evaluation_tracker: Any = None,
) -> RunResults | None:
    """The pipeline behind simple_evaluate: model, tasks, overrides, evaluate, run info.

    Beside the record, what only this process has: a model the caller built (then
    `options.model` is None and the caller closes it), a task index to reuse (else one is
    built from `options.include_path`), and a (done, total) progress callback for rank 0.
    """
    start = time.time()
    if options.delete_requests_cache:
        from assay.runner.models.caching import delete_request_cache

        delete_request_cache()
    _seed_everything(options.random_seed, options.numpy_random_seed, options.torch_random_seed)
    if not options.tasks:
        raise UserError("No tasks given; pass --tasks with at least one task name (see `assay ls tasks`).")
    if task_manager is None:
        task_manager = TaskManager(
            options.include_path, metadata={**options.parsed_model_args, **(options.metadata or {})}
        )
    # What can be known without the model fails now, in seconds, not after the model loaded.
    preflight.check(
        model=lm if lm is not None else options.model,
        model_args=options.parsed_model_args,
        tasks=options.tasks,
        task_manager=task_manager,
        num_fewshot=options.num_fewshot,
    )
    model = build_lm(options, lm)
    try:
        return _run_with(model, options, task_manager, progress, start, evaluation_tracker)
    finally:
        if lm is None:
            model.close()


def _run_with(
    lm: LM,
    options: EvalOptions,
    task_manager: TaskManager,
    progress: ProgressFn | None,
    start: float,
    evaluation_tracker: Any,
) -> RunResults | None:
    """Tasks, overrides, evaluate and run info on a model that is already built."""
    loaded = task_manager.load(list(options.tasks))
    configure_tasks(loaded, options, chat_template=lm.apply_chat_template)
    if options.check_integrity:
        check_tasks(loaded)
    if evaluation_tracker is not None:
        evaluation_tracker.general_config_tracker.log_experiment_args(
            model_source=options.model if options.model is not None else "CUSTOM",
            model_args=options.model_args or "",
            system_instruction=options.system_instruction,
            chat_template=lm.chat_template(options.apply_chat_template) if options.apply_chat_template else None,
            fewshot_as_multiturn=options.fewshot_as_multiturn,
        )
    results = evaluate(lm, loaded, options, progress=progress)
    if results is None:
        return None
    from assay.runner.results import run_info

    facts = {"git_hash": run_info.git_hash(), "date": start, **run_info.environment(), **_safe(lm.tokenizer_info)}
    # the results' own members (the sentinels' block) follow the provenance
    return dataclasses.replace(results, config=run_config(options, lm), run_info={**facts, **results.run_info})


def build_lm(options: EvalOptions, given: LM | None = None) -> LM:
    """The model: the caller's instance, else the registered backend built from the options."""
    from assay.runner.models import get_model

    if given is not None:
        lm = given
    elif options.model is not None:
        lm = get_model(options.model).from_run(
            options.parsed_model_args,
            batch_size=options.batch_size,
            max_batch_size=options.max_batch_size,
            device=options.device,
        )
    else:
        raise UserError("model must be a registered model name or an assay LM instance, not None.")
    if options.use_cache is not None:
        from assay.runner.models.cache_identity import identify
        from assay.runner.models.caching import CachingLM, response_cache_path

        path = response_cache_path(options.use_cache, distributed.rank_and_world()[0])
        built_here = given is None
        try:
            # a caller's own instance is known by its class alone: its model_args are not ours to see
            identity = identify(lm, options.parsed_model_args if built_here else None)
            lm = CachingLM(lm, path, identity=identity)
        except BaseException:
            if built_here:  # a refused cache ends the run before `run` could close the model
                lm.close()
            raise
    return lm


def configure_tasks(loaded: LoadedTasks, options: EvalOptions, *, chat_template: ChatTemplate | None = None) -> None:
    """The run's overrides of every task (gen_kwargs, predict_only, num_fewshot, few-shot seed) and
    how its prompts are rendered, decided once per task into the plan its prompt builder follows;
    the configs stay as loaded. `chat_template`: the model's, used when the options apply one."""
    overrides = RunOverrides(
        num_fewshot=options.num_fewshot,
        gen_kwargs=options.gen_kwargs,
        predict_only=options.predict_only,
        fewshot_seed=options.fewshot_random_seed,
    )
    if options.apply_chat_template and chat_template is None:
        raise ValueError("the options apply a chat template: configure_tasks needs the model's")
    settings = PromptSettings(
        system_instruction=options.system_instruction,
        chat_template=chat_template if options.apply_chat_template else None,
        fewshot_as_multiturn=bool(options.fewshot_as_multiturn),
    )
    for task in loaded.tasks.values():
        if options.num_fewshot is not None and task.config.num_fewshot == 0:
            log.info("num_fewshot is fixed to 0 by %s's config; --num_fewshot is ignored for it.", task.name)
        task.configure(overrides, settings)


def run_config(options: EvalOptions, lm: LM) -> dict[str, Any]:
    """The results' `config`: lm-eval's keys, values as the run was told them."""
    found = getattr(lm, "batch_sizes", None)
    speed_info = getattr(lm, "speed_info", None)
    return {
        "model": options.model if options.model is not None else type(lm).__name__,
        "model_args": options.model_args,
        **_safe(lm.model_info),
        "batch_size": options.batch_size.given if options.batch_size is not None else None,
        # lm-eval's HFLM.batch_sizes: the sizes auto detection chose (empty for a fixed size)
        "batch_sizes": list(found.values()) if isinstance(found, dict) else [],
        "device": options.device,
        "use_cache": options.use_cache,
        "limit": options.limit,
        "bootstrap_iters": options.bootstrap_iters,
        "gen_kwargs": options.gen_kwargs,
        "random_seed": options.random_seed,
        "numpy_seed": options.numpy_random_seed,
        "torch_seed": options.torch_random_seed,
        "fewshot_seed": options.fewshot_random_seed,
        # Assay's own: whether shared contexts ran once (the hf backend), else absent
        **(_safe(speed_info) if callable(speed_info) else {}),
    }


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
    # Without torch installed no backend of this process can draw from its generator.
    if torch_seed is not None and importlib.util.find_spec("torch") is not None:
        import torch

        torch.manual_seed(torch_seed)


def check_tasks(loaded: LoadedTasks) -> None:
    """--check_integrity: every task renders its first document's prompt and target, and says so
    (lm-eval runs its own test suite instead, which ships only with its source tree)."""
    for task in loaded.tasks.values():
        doc = task.eval_docs[0]
        prompt = task.fewshot_context(doc, PromptPlan())  # zero-shot, plain text
        target = repr(task.doc_to_target(doc))
        target = target if len(target) <= 40 else target[:37] + "..."
        prompts = f"{len(prompt)} prompts" if isinstance(prompt, list) else f"a {len(prompt)}-character prompt"
        log.info("--check_integrity: %s renders its first document: %s, target %s.", task.name, prompts, target)
    log.info(
        "--check_integrity checked %d tasks: each renders its first document's prompt and target "
        "(lm-eval's own test suite is not run).",
        len(loaded.tasks),
    )


def sample_size(task: Task, limit: int | float | None) -> int | None:
    if limit is None:
        return None
    return int(math.ceil(len(task.eval_docs) * limit)) if limit < 1.0 else int(limit)


def evaluate(
    lm: LM, loaded: LoadedTasks, options: EvalOptions, *, progress: ProgressFn | None = None
) -> RunResults | None:
    """Build, shard, answer and score every task's requests; the results on rank 0."""
    for task in loaded.tasks.values():
        if task.config.unsafe_code and not options.confirm_run_unsafe_code:
            raise UserError(f"Task {task.name!r} runs model-written code; pass --confirm_run_unsafe_code to run it.")
        if "bypass" in task.metrics.fns and not options.log_samples:
            raise UsageError("--predict_only needs --log_samples (it writes predictions, not metrics).")
    rank, world_size = distributed.rank_and_world()
    samples = options.samples or {}
    work: list[doc_work.DocWork] = []
    for task in loaded.tasks.values():
        chosen = task.selected_docs(limit=sample_size(task, options.limit), samples=samples.get(task.name))
        per_doc = doc_work.requests_for(task, chosen, lm, options)
        for position, ((doc_id, doc), instances) in enumerate(zip(chosen, per_doc, strict=False)):
            work.append(doc_work.DocWork(task, position, doc_id, doc, instances))
        if options.write_out and rank == 0 and per_doc:
            doc_work.print_example(task, per_doc[0])

    keep = "full" if options.log_samples else "scores" if options.score_records else None
    if options.sequential is not None:
        from assay.runner.sequential import run as sequential_run

        return sequential_run.evaluate(lm, loaded, work, options, options.sequential, keep=keep, progress=progress)
    shards = distributed.balanced_shards([item.cost for item in work], world_size)
    mine = [work[i] for i in shards[rank]]
    global_total = sum(inst.repeats for item in work for inst in item.instances)
    doc_work.run_requests(
        lm,
        [inst for item in mine for inst in item.instances],
        progress if rank == 0 else None,
        global_total=global_total,
    )

    gathered = distributed.gather_to_rank0(doc_work.score(mine, keep=keep, samples=samples))
    if rank != 0 or gathered is None:
        return None
    health = getattr(lm, "request_health", None)
    return assemble.run_results(
        loaded,
        gathered,
        bootstrap_iters=options.bootstrap_iters,
        keep_samples=keep is not None,
        sentinels=options.sentinels,
        served=health() if callable(health) else None,
    )
