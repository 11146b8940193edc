"""The `assay validate` subcommand: its flags, its report and its exit code.

`--tasks` is lm-eval's `validate` (which asks only whether the names resolve), grown into
the check a run would otherwise make the hard way: unknown names with the closest known
ones, every task YAML under --include_path that does not load, and each named task's config
(unknown keys, the evaluation split, doc_to_choice, metrics and filters, Jinja syntax, `!function`
helpers: the same check `assay run` makes before the model loads). `-f` checks Evaluation manifests. Every
problem is printed, file:line first where it is known; exit 1 if there was any, 0 if none.
Nothing is downloaded, no model is loaded, no cluster is asked.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence

from assay.errors import Problem, UsageError

DESCRIPTION = textwrap.dedent("""
    Check task names, task YAML and Evaluation manifests offline, and report every problem at once
    (file:line first where it is known); exit 1 if there is any.

    --tasks: each name resolves (or the closest known names are suggested), every YAML under
    --include_path loads, and each task's config has only lm-eval's keys, a test or validation
    split, doc_to_choice where it is multiple_choice, known metrics and filters, Jinja templates
    that compile and `!function` helpers that import and have the function (`assay run` makes
    the same check before the model loads).
    -f: each Evaluation in the file is parsed as the operator parses it (every field's error, on
    its line), then its model, model_args and tasks are checked as the runner pod checks them.
    Model files, datasets and the cluster are not looked at: `assay apply --local` and the runner
    pod check those where the run happens.
""")
EPILOG = textwrap.dedent("""
    examples:
      assay validate --tasks hellaswag,arc_easy
      assay validate --tasks my_task --include_path ./my_tasks
      assay validate -f eval.yaml -f suite.yaml
      kustomize build . | assay validate -f -
""")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks", "-t", default=None, type=str, metavar="TASK1,TASK2", help="Comma-separated task names"
    )
    parser.add_argument("--include_path", type=str, default=None, metavar="DIR", help="Extra folder of task YAMLs")
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        default=[],
        metavar="FILE",
        help="Evaluation manifest (YAML, several documents allowed; - for stdin); repeatable",
    )


def run(args: argparse.Namespace) -> int:
    if not args.tasks and not args.filename:
        raise UsageError("Give --tasks, -f FILE, or both (see `assay validate --help`).")
    problems: list[Problem] = []
    if args.tasks:
        problems += _check_tasks([name.strip() for name in args.tasks.split(",") if name.strip()], args.include_path)
    for path in args.filename:
        problems += _check_manifest(path, args.include_path)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} {'problem' if len(problems) == 1 else 'problems'} found.")
        return 1
    return 0


def _check_tasks(names: Sequence[str], include_path: str | None) -> list[Problem]:
    from assay.runner.checks import offline_check

    print(f"Validating tasks: {list(names)}")
    manager = offline_check.task_index(include_path)
    # A broken file that defines an asked-for name is reported with that name (its error included), not twice.
    unknown = [name for name in names if name not in manager.index]
    broken = [file.problem() for file in manager.broken if not any(name in file.names for name in unknown)]
    problems = broken + offline_check.task_problems(manager, names)
    if not problems:
        print("All tasks found and valid")
    return problems


def _check_manifest(path: str, include_path: str | None) -> list[Problem]:
    from assay.validate import manifests

    outcome = manifests.check_file(path, include_path=include_path)
    for line in outcome.valid:
        print(line)
    for note in outcome.notes:
        print(f"note: {note}")
    return outcome.problems
