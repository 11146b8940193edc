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
from typing import Any, Callable, Sequence

from assay.errors import UserError, suggest
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
def _task_manager() -> Any:
    """The engine's task index, built once: the operator's task library is its image's."""
    try:
        return engine.task_index()
    except ImportError as error:
        logger.info("Task index unavailable (%s); task names are checked in the runner pod.", error)
        return None


def resolve_tasks(names: Sequence[str]) -> Sequence[str]:
    """The engine's TaskManager, when this image has it: raises UserError on unknown names."""
    manager = _task_manager()
    if manager is not None:
        manager.match_tasks(list(names))
    return []


def unsafe_tasks(names: Sequence[str]) -> Sequence[str]:
    """Tasks (or members of tags) whose config says `unsafe_code: true`."""
    manager = _task_manager()
    index = getattr(manager, "index", None)
    if manager is None or not isinstance(index, dict):
        return []
    found: list[str] = []
    for name in manager.match_tasks(list(names)):
        entry = index.get(name)
        if entry is None:
            continue
        members = [index[m] for m in sorted(entry.members) if m in index] if entry.kind == "tag" else [entry]
        found += [m.name for m in members if (m.config or {}).get("unsafe_code")]
    return list(dict.fromkeys(found))


def model_names() -> Sequence[str]:
    return engine.model_names()


def validate(
    spec: Evaluation,
    *,
    tasks_resolver: TaskResolver = resolve_tasks,
    unsafe_finder: UnsafeTaskFinder = unsafe_tasks,
    models: ModelNames | None = model_names,
) -> None:
    """Raise UserError with one sentence naming the field and the fix."""
    if models is not None:
        known = list(models())
        if known and spec.model not in known:
            raise UserError(
                f"spec.model {spec.model!r} is not a known model backend.{suggest(spec.model, known)} "
                f"Known models: {', '.join(known)}."
            )
    for key in _REMOTE_CODE_KEYS:
        if _truthy(spec.model_args.get(key)) and not spec.trust_remote_code:
            raise UserError(
                f"spec.modelArgs.{key} asks to run the model repository's code: set spec.trustRemoteCode: true to allow it."
            )
    unknown = list(tasks_resolver(spec.tasks))
    if unknown:
        raise UserError(f"Unknown tasks in spec.tasks: {', '.join(unknown)}. List them with `assay ls tasks`.")
    unsafe = list(unsafe_finder(spec.tasks))
    if unsafe and not spec.allow_unsafe_code:
        raise UserError(
            f"Tasks {', '.join(unsafe)} execute model-generated code: set spec.allowUnsafeCode: true to allow it."
        )


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
