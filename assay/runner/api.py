"""What the control plane may ask of the engine, and nothing more.

The operator runs in an image without torch, transformers or datasets. It still wants the
engine's own answers to "do these task names resolve?", "which models exist?", and, for
`assay apply --local`, to run a spec in this process. Each function here imports the
engine inside its body, so importing this module (and the operator) costs nothing; the
import-linter contracts in pyproject.toml allow the operator this module and no other
part of `assay.runner`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay import spec as spec_module
    from assay.run_results import RunResults
    from assay.spec.status import RunnerResults


def task_index(include_path: str | None = None) -> Any:
    """The engine's task index (a `TaskManager` over the built-in library and `include_path`)."""
    from assay.runner.tasks.index import TaskManager

    return TaskManager(include_path)


def check_task_file(path: str, *, root: str | None = None, allow_code: bool = True) -> tuple[str, ...]:
    """The names a task YAML defines; UserError naming what is wrong with it (see file_check)."""
    from assay.runner.tasks.file_check import check_task_file as check

    return check(path, root=root, allow_code=allow_code)


def check_task_texts(files: Sequence[Sequence[str]]) -> None:
    """Parse each (source, text) task YAML as the task loader would, within its bounds; UserError
    beginning with the source of the first one past a bound or malformed. Run in a bounded child
    process by the operator (`bounded_parse`), before its own parse of the same text."""
    from assay.runner.tasks.yaml_loader import check_text

    for source, text in files:
        check_text(text, source=source)


def tenant_task_index(include_path: str, *, allow_code: bool) -> Any:
    """The task index with a tenant's task folder: its names may not shadow the library's,
    and its `!function` helpers run only when `allow_code`."""
    from assay.runner.tasks.index import TaskManager

    return TaskManager(include_path, include_code=allow_code, include_may_shadow=False)


def model_names() -> Sequence[str]:
    from assay.runner.models import model_names as registered

    return registered()


def run_spec(
    spec: spec_module.Evaluation, output_dir: str, *, output_root: str | None = None, status_file: str | None = None
) -> RunResults | None:
    """Run one Evaluation on this process's share; its results on rank 0, else None.

    `status_file`: where rank 0 writes the status fields (scores, the comparison with
    spec.baseline, whose path is read under `output_root`)."""
    from assay.runner.job import run_spec as run
    from assay.runner.results.status_sink import FileStatusSink

    sink = FileStatusSink(status_file) if status_file is not None else None
    return run(spec, output_dir, sink=sink, output_root=output_root)


def condense_results(results: RunResults) -> RunnerResults:
    """A run's results → the Evaluation's `status` fields (see `status_sink`)."""
    from assay.runner.results.status_sink import condense_results as condense

    return condense(results)


def results_tables(results: RunResults) -> str:
    """lm-eval's table of a run's results (and of its groups, when it has some), as `assay run` prints it."""
    from assay.runner.results.table import make_table

    tables = [make_table(results)]
    if results.groups:
        tables.append(make_table(results, "groups"))
    return "\n".join(tables)
