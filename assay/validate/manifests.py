"""Evaluation manifests checked offline: every error of every document, each on its line.

A manifest goes through what the operator and the runner pod would do with it, minus what
needs a cluster or the run's machine: the spec parser (`assay.spec.read_manifest`, every
field read on its own so that all field errors come out of one pass), the engine's offline
checks (`assay.runner.checks.offline_check`: model name, model_args, task names, task YAML), then
the admission rules that need no cluster (remote code, unsafe task code). Each error is
placed on the line of the field it names, found in the YAML's node tree; a task YAML's
problem is placed in that YAML instead. ConfigMaps named in spec.taskSources cannot be read
offline: their tasks are checked only when their files are passed with --include_path.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from assay import spec as spec_module
from assay.errors import Problem, UserError
from assay.operator.admission import validation
from assay.runner.checks import offline_check
from assay.spec import manifest_file


@dataclasses.dataclass
class Outcome:
    """What checking one or more manifest files found."""

    problems: list[Problem] = dataclasses.field(default_factory=list)
    valid: list[str] = dataclasses.field(default_factory=list)
    """One sentence per Evaluation without problems."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """What could not be checked offline, and how to check it."""


def check_file(path: str, *, include_path: str | None, stdin: TextIO | None = None) -> Outcome:
    """Every document of the manifest file `path` (`-`: standard input)."""
    source = "<stdin>" if path == "-" else path
    outcome = Outcome()
    try:
        text = (stdin or sys.stdin).read() if path == "-" else Path(path).read_text(encoding="utf-8")
        documents = manifest_file.read_documents(text, source)
    except OSError as error:
        outcome.problems.append(Problem(f"Cannot read {path}: {error.strerror}; check the -f path."))
        return outcome
    except UnicodeDecodeError:
        outcome.problems.append(Problem(f"{path} is not UTF-8 text; an Evaluation manifest is YAML."))
        return outcome
    except UserError as error:  # a YAML syntax error: its message names the file and line
        outcome.problems.append(Problem(str(error)))
        return outcome
    if not documents:
        outcome.problems.append(
            Problem(f"{source} holds no manifest; write an Evaluation (apiVersion: {spec_module.API_VERSION}).")
        )
    for document in documents:
        _check_document(document, source, include_path=include_path, outcome=outcome)
    return outcome


def _check_document(
    document: manifest_file.Document, source: str, *, include_path: str | None, outcome: Outcome
) -> None:
    metadata, reading, errors = spec_module.read_manifest(document.data)
    found = [Problem(str(error), file=source, line=document.line_of_message(str(error))) for error in errors]
    if reading is not None and reading.evaluation is not None:
        found += _engine_problems(document, source, reading, include_path=include_path, notes=outcome.notes)
    outcome.problems.extend(found)
    if not found and reading is not None and reading.evaluation is not None:
        evaluation = reading.evaluation
        outcome.valid.append(
            f"{source}: Evaluation {_name(metadata)!r} is valid: model {evaluation.model!r}, "
            f"tasks {', '.join(evaluation.tasks)}."
        )


def _engine_problems(
    document: manifest_file.Document,
    source: str,
    reading: spec_module.SpecReading,
    *,
    include_path: str | None,
    notes: list[str],
) -> list[Problem]:
    """The runner's and the admission's offline checks, each on the fields it needs that were read as written."""
    evaluation = reading.evaluation
    assert evaluation is not None
    manager = offline_check.spec_task_index(evaluation, include_path)
    found: list[Problem] = []
    if reading.usable("model", "modelArgs", "endpoint", "trustRemoteCode"):
        found += offline_check.model_problems(evaluation.model, evaluation.run_model_args())
    if reading.usable("tasks"):
        found += offline_check.task_problems(manager, evaluation.tasks)
    tasks_resolve = reading.usable("tasks") and not any(problem.field == "tasks" for problem in found)
    if evaluation.task_sources and include_path is None:
        # Names from the ConfigMaps are unknown here: say what was not checked rather than call them errors.
        found = [problem for problem in found if problem.field != "tasks"]
        notes.append(
            f"{source}:{document.line_of('spec.taskSources')}: the tasks of spec.taskSources (ConfigMaps "
            f"{', '.join(evaluation.task_sources)}) cannot be read offline and were not checked; pass "
            "their YAML files with --include_path to check them."
        )
    if reading.usable("modelArgs", "trustRemoteCode") and (error := validation.remote_code_error(evaluation)):
        found.append(Problem(str(error), field="modelArgs"))
    unsafe_finder = functools.partial(validation.unsafe_in, manager)
    if (
        tasks_resolve
        and reading.usable("allowUnsafeCode")
        and (error := validation.unsafe_error(evaluation, unsafe_finder))
    ):
        found.append(Problem(str(error), field="tasks"))
    return [_placed(problem, document, source) for problem in found]


def _placed(problem: Problem, document: manifest_file.Document, source: str) -> Problem:
    """An engine problem on its line: a task YAML's stays in that file; the rest go to the spec field they concern."""
    if problem.file is not None:
        return problem
    return dataclasses.replace(problem, file=source, line=document.line_of(f"spec.{problem.field or ''}".rstrip(".")))


def _name(metadata: Mapping[str, object]) -> str:
    return str(metadata.get("name") or "")
