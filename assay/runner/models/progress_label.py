"""What a request progress bar says: lm-eval's "Running <type> requests", and the tasks they serve.

The evaluator sends a model one call per request type, mixing the tasks of a run; a bar
that only says "Running loglikelihood requests" leaves the user guessing which tasks it
covers. The LM methods keep lm-eval's signature (a caller's own LM must still fit), so the
task names travel beside the call: the evaluator sets them with `serving`, and each
backend's bar reads them with `bar_label`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

_SHOWN = 3  # task names a bar shows before "and N more"
_TASKS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("assay_progress_tasks", default=())


@contextlib.contextmanager
def serving(task_names: Iterable[str]) -> Iterator[None]:
    """While inside, bars name these tasks (each once, in the order given)."""
    token = _TASKS.set(tuple(dict.fromkeys(task_names)))
    try:
        yield
    finally:
        _TASKS.reset(token)


def bar_label(request_type: str) -> str:
    """'Running loglikelihood requests (arc_easy, lambada_openai)'; lm-eval's words alone outside `serving`."""
    label = f"Running {request_type} requests"
    tasks = _TASKS.get()
    if not tasks:
        return label
    more = f" and {len(tasks) - _SHOWN} more" if len(tasks) > _SHOWN else ""
    return f"{label} ({', '.join(tasks[:_SHOWN])}{more})"
