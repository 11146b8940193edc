"""What the CRD schema cannot check: names that only the engine knows.

The API server has already enforced types, ranges and cross-field rules (CEL); here the
operator asks the engine whether the tasks and the model exist and whether the spec
grants what they need (unsafe task code, remote model code). Catching these before a Job
exists saves a pod start, an image pull and a model download per mistake.

The engine's lookups are hooks with defaults, so that tests (and an operator image
without the task library) can supply their own; a hook whose engine part is missing is
skipped, and the runner's `--check` still catches the mistake in the pod.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.booleans import optional_bool
from assay.errors import UserError, suggest
from assay.operator.admission import task_sources
from assay.runner import api as engine
from assay.spec import Evaluation

logger = logging.getLogger(__name__)

TaskResolver = Callable[[Sequence[str]], Sequence[str]]
"""names → the unknown ones (or raises UserError with the engine's own message)."""
UnsafeTaskFinder = Callable[[Sequence[str]], Sequence[str]]
"""names → those whose task config says `unsafe_code: true`."""
ModelNames = Callable[[], Sequence[str]]

_REMOTE_CODE_KEYS = ("trust_remote_code",)


@functools.lru_cache(maxsize=1)
def _builtin_task_manager() -> Any:
    """The engine's task index, built once: the operator's task library is its image's."""
    try:
        return engine.task_index()
    except ImportError as error:
        logger.info("Task index unavailable (%s); task names are checked in the runner pod.", error)
        return None


def _task_manager(include_path: str | None, allow_code: bool = False) -> Any:
    if include_path is None or _builtin_task_manager() is None:
        return _builtin_task_manager()
    # spec.taskSources: a fresh folder per check, indexed as the runner indexes it
    return engine.tenant_task_index(include_path, allow_code=allow_code)


def library_names() -> frozenset[str]:
    """Task, group and tag names of the task library (empty where this image lacks the engine)."""
    manager = _builtin_task_manager()
    return frozenset(getattr(manager, "index", None) or ())


def resolve_tasks(names: Sequence[str], include_path: str | None = None, allow_code: bool = False) -> Sequence[str]:
    """The engine's TaskManager, when this image has it: raises UserError on unknown names."""
    manager = _task_manager(include_path, allow_code)
    if manager is not None:
        manager.match_tasks(list(names))
    return []


def unsafe_tasks(names: Sequence[str], include_path: str | None = None, allow_code: bool = False) -> Sequence[str]:
    """Tasks the run would build whose config says `unsafe_code: true`: through tags, groups and
    group-level overrides exactly as the engine composes them (no task is built)."""
    return unsafe_in(_task_manager(include_path, allow_code), names)


def unsafe_in(manager: Any, names: Sequence[str]) -> Sequence[str]:
    """`unsafe_tasks` with the engine's task index given (None: no index, so none found)."""
    if manager is None or not hasattr(manager, "leaf_configs"):
        return []
    configs: dict[str, dict[str, Any]] = manager.leaf_configs(list(names))
    return [name for name, config in configs.items() if config.get("unsafe_code")]


def model_names() -> Sequence[str]:
    return engine.model_names()


def validate_with_sources(
    spec: Evaluation, *, namespace: str, get: task_sources.ConfigMapGetter, allow_task_code: bool = False
) -> list[dict[str, Any]]:
    """`validate` with the tasks of spec.taskSources known; their status.taskSources entries.

    A tenant's task files are data: `!function` (and Python keys) only where the admin's
    policy allows task code, and no name the task library already has."""
    sources = task_sources.read(spec.task_sources, namespace=namespace, get=get, allow_code=allow_task_code)
    task_sources.check_parse(sources)  # in a bounded child process, before this one parses them
    with task_sources.materialized(sources) as root:
        if root is not None:
            checker = functools.partial(engine.check_task_file, root=root, allow_code=allow_task_code)
            sources = task_sources.check(sources, root, checker=checker)
            task_sources.refuse_library_names(sources, library_names())
        validate(
            spec,
            include_path=root,
            tasks_resolver=functools.partial(resolve_tasks, include_path=root, allow_code=allow_task_code),
            unsafe_finder=functools.partial(unsafe_tasks, include_path=root, allow_code=allow_task_code),
        )
    return [source.status() for source in sources]


def validate(
    spec: Evaluation,
    *,
    include_path: str | None = None,
    tasks_resolver: TaskResolver | None = None,
    unsafe_finder: UnsafeTaskFinder | None = None,
    models: ModelNames | None = model_names,
) -> None:
    """Raise UserError with one sentence naming the field and the fix."""
    tasks_resolver = tasks_resolver or functools.partial(resolve_tasks, include_path=include_path)
    unsafe_finder = unsafe_finder or functools.partial(unsafe_tasks, include_path=include_path)
    if models is not None:
        known = list(models())
        if known and spec.model not in known:
            raise UserError(
                f"spec.model {spec.model!r} is not a known model backend.{suggest(spec.model, known)} "
                f"Known models: {', '.join(known)}."
            )
    remote_code = remote_code_error(spec)
    if remote_code is not None:
        raise remote_code
    unknown = list(tasks_resolver(spec.tasks))
    if unknown:
        raise UserError(f"Unknown tasks in spec.tasks: {', '.join(unknown)}. List them with `assay ls tasks`.")
    unsafe = unsafe_error(spec, unsafe_finder)
    if unsafe is not None:
        raise unsafe


def remote_code_error(spec: Evaluation) -> UserError | None:
    """The model's repository code asked for in modelArgs without spec.trustRemoteCode."""
    for key in _REMOTE_CODE_KEYS:
        if _truthy(spec.model_args, key) and not spec.trust_remote_code:
            return UserError(
                f"spec.modelArgs.{key} asks to run the model repository's code: set spec.trustRemoteCode: true to allow it."
            )
    return None


def unsafe_error(spec: Evaluation, unsafe_finder: UnsafeTaskFinder) -> UserError | None:
    """Tasks that execute model-generated code without spec.allowUnsafeCode."""
    unsafe = list(unsafe_finder(spec.tasks))
    if unsafe and not spec.allow_unsafe_code:
        return UserError(
            f"Tasks {', '.join(unsafe)} execute model-generated code: set spec.allowUnsafeCode: true to allow it."
        )
    return None


def _truthy(model_args: Mapping[str, Any], key: str) -> bool:
    """A boolean modelArg as every backend reads it: `no` is false, `on` a refusal (never bool(str))."""
    return bool(optional_bool(model_args.get(key), name=f"spec.modelArgs.{key}"))
