"""`assay`: lm-eval's command line (run, ls, validate) plus Assay's own subcommands.

Assay's own: `compare`, `apply --local`, `operator`, `runner`, `data`, and the cluster
commands `get`, `results`, `logs` and `describe` (`assay.cli_cluster`), which read
Evaluations through the kubeconfig as kubectl does.

`assay run` takes every flag of `lm-eval run` 0.4.13 with the same names, short forms,
defaults and precedence (CLI > `--config` YAML > defaults), and prints the same summary
line and tables. As in lm-eval, a first argument that is not a subcommand means `run`.

Errors a user can cause end as one sentence on stderr: exit 2 for a bad flag or flag
combination (argparse's convention), 1 for a run that failed. Heavy modules (torch,
transformers, datasets, the evaluator) are imported only by `run`, so `ls` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from assay import check_command, data_command, run_logging, task_tables
from assay.cli_cluster import commands as cluster_commands
from assay.compare import command as compare_command
from assay.errors import UsageError, UserError
from assay.run_arguments import RUN_EPILOG, add_run_arguments
from assay.run_flags import RunFlags, resolve_run_config, summary_line
from assay.validate import command as validate_command
from assay.version_info import VersionAction

PROG = "assay"
# Subcommands handed to another module's main(argv) untouched.
DELEGATED = {
    "apply": ("assay.operator.local", "run an Evaluation manifest on this machine (assay apply -f eval.yaml --local)"),
    "operator": ("assay.operator.main", "run the Kubernetes operator"),
    "runner": ("assay.runner.job", "the runner Job's entry point (used inside pods)"),
}


# --- argparse pieces --------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and a UsageError (exit 2); `epilog_from`
    writes the epilog when the help is shown (building the parser imports no engine module)."""

    epilog_from: Callable[[], str] | None = None

    def error(self, message: str) -> Any:
        raise UsageError(f"{message} (see `{self.prog} --help`).")

    def format_help(self) -> str:
        if self.epilog_from is not None:
            self.epilog = self.epilog_from()
        return super().format_help()


EPILOG = textwrap.dedent("""
            examples:
              assay run --model hf --model_args pretrained=gpt2 --tasks hellaswag
              assay ls tasks
              assay validate --tasks hellaswag,arc_easy
              assay validate -f eval.yaml
              assay compare out/baseline out/candidate
              assay check out/run                 # its scores plausible? (sentinels)
              assay apply -f eval.yaml --local
              assay get -A                        # Evaluations on the cluster (kubeconfig as kubectl)
              assay results NAME                  # its scores as lm-eval's table
              assay logs NAME -f                  # rank 0's log
              assay describe NAME                 # what happened, why, what to do

            As with lm-eval, `assay --model hf --tasks hellaswag` means `assay run ...`.
        """)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Assay: lm-evaluation-harness compatible evaluation, distributed and Kubernetes-native.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=VersionAction, nargs=0, help="Print the version and, from a checkout, the git commit; exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="Available commands", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="Evaluate a model on tasks (lm-eval's `run`)",
        description="Evaluate a language model on tasks, with lm-eval 0.4.13's flags.",
        usage=f"{PROG} run --model <model> --tasks <task> <task> --model_args <arg=value> <arg=value> [options]",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(run)

    _add_ls_parser(
        sub.add_parser(
            "ls", help="List tasks, groups, subtasks or tags", description="List the task library as Markdown tables."
        )
    )

    validate = sub.add_parser(
        "validate",
        help="Check tasks, task YAML and Evaluation manifests offline; report every problem",
        description=validate_command.DESCRIPTION,
        epilog=validate_command.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    validate_command.add_arguments(validate)

    compare = sub.add_parser(
        "compare",
        help="Compare two runs: a regression, or noise? (paired tests)",
        description=compare_command.DESCRIPTION,
        epilog=compare_command.EPILOG,
        usage=f"{PROG} compare BASELINE CANDIDATE [options] | {PROG} compare --plan BASELINE [--mde D]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare_command.add_arguments(compare)

    check_command.add_parser(sub)
    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    cluster_commands.add_parsers(sub)

    data_command.add_arguments(
        sub.add_parser("data", help="Manage offline benchmark data", description="Manage offline benchmark data."),
        parser_class=_Parser,
    )
    return parser


def _add_ls_parser(ls: argparse.ArgumentParser) -> None:
    ls.add_argument(
        "what",
        choices=["tasks", "groups", "subtasks", "tags"],
        nargs="?",
        help="What to list: tasks (all), groups, subtasks or tags",
    )
    ls.add_argument("--include_path", type=str, default=None, metavar="DIR", help="Extra folder of task YAMLs")


def normalize_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """lm-eval's legacy form: with two or more arguments and no subcommand first, insert `run`."""
    argv = list(argv)
    commands = _subcommands(parser)
    if len(argv) > 1 and argv[0] not in commands:
        argv.insert(0, "run")
    return argv


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# --- subcommands ------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    if args.tasks is not None and len(args.tasks) == 1 and args.tasks[0] in task_tables.LIST_TASKS_NAMES:
        from assay.runner.tasks.index import TaskManager

        manager = TaskManager(include_path=args.include_path)
        print(task_tables.listing(manager, task_tables.LIST_TASKS_NAMES[args.tasks[0]]))
        return 0
    flags = resolve_run_config(args)
    if not flags.output_path:
        return _run(flags)
    from assay.runner.results import output

    # Before the model loads: lm-eval finds an unwritable path after the whole evaluation.
    created = output.check_writable(flags.output_path, name="--output_path")
    code = 1
    try:
        code = _run(flags)
        return code
    finally:
        if code != 0:  # failed or interrupted: no empty folder left behind
            output.remove_if_empty(created)


def _run(flags: RunFlags) -> int:
    level = run_logging.level_from(flags.verbosity)
    run_logging.quiet_libraries()

    from assay.runner import distributed

    # Under torchrun every rank joins one process group: each runs its share of the
    # requests and rank 0 alone aggregates, writes files and prints the table.
    with distributed.process_group():
        rank = distributed.rank_and_world()[0]
        with run_logging.showing(level, rank0=rank == 0):
            try:
                return _run_on_this_rank(flags, is_rank0=rank == 0)
            except KeyboardInterrupt:
                from assay.runner.models import caching

                cache = caching.response_cache_path(flags.use_cache, rank) if flags.use_cache is not None else None
                if cache is None:
                    print(
                        f"{PROG}: interrupted; nothing was kept: run again with --use_cache <path> (a file prefix) "
                        "to keep the answers as they come, so that the same command resumes after an interruption.",
                        file=sys.stderr,
                    )
                    return 130
                if not os.path.exists(cache):
                    raise
                print(
                    f"{PROG}: interrupted; to resume, run the same command again: the response cache {cache} "
                    f"keeps the {caching.stored_answers(cache)} answers computed so far.",
                    file=sys.stderr,
                )
                return 130


def _run_on_this_rank(flags: RunFlags, *, is_rank0: bool) -> int:
    from assay.runner.results import output
    from assay.runner.results.loggers import HubLogger, WandbLogger

    wandb_logger = WandbLogger(flags.wandb_args, flags.wandb_config_args) if flags.wandb_args and is_rank0 else None
    hub_logger = HubLogger(flags.hf_hub_log_args) if flags.hf_hub_log_args and is_rank0 else None
    tracker = output.EvaluationTracker(flags.output_path)

    from assay.runner import evaluator
    from assay.runner.tasks.index import TaskManager

    task_manager = TaskManager(include_path=flags.include_path, metadata=flags.metadata)
    options = dataclasses.replace(flags.run_options(), tasks=tuple(task_manager.match_tasks(flags.tasks)))
    run = evaluator.run_results(options, task_manager=task_manager, evaluation_tracker=tracker)
    if run is None:  # not rank 0
        return 0
    samples = run.samples_by_task() if flags.log_samples else None
    results = run.to_lmeval_dict(samples=False)
    if flags.show_config:
        print(output.dumps(results))
    batch_sizes = (run.config or {}).get("batch_sizes", [])
    if wandb_logger is not None:
        try:
            wandb_logger.post_init(run)
            wandb_logger.log_eval_result()
            if samples:
                wandb_logger.log_eval_samples(samples)
        except Exception as err:  # like lm-eval: a logging failure does not fail the run
            logging.getLogger(__name__).warning("Logging to W&B failed: %s", err)
    saved = tracker.save(
        results,
        samples,
        model_source=flags.model,
        model_args=flags.model_args,
        system_instruction=flags.system_instruction,
        chat_template=None,
        fewshot_as_multiturn=flags.fewshot_as_multiturn,
    )
    saved.log_paths()
    if not flags.output_path:
        logging.getLogger(__name__).info("No --output_path given: the results are printed below, not saved to a file.")

    from assay.runner.results.table import make_table

    print(summary_line(flags, batch_sizes))
    print(make_table(run))
    if run.groups:
        print(make_table(run, "groups"))
    if wandb_logger is not None:
        wandb_logger.finish()
    if hub_logger is not None:
        hub_logger.push(saved)
    if flags.sentinels.strict and run.untrusted():
        print(
            f"{PROG}: the scores are not trusted (--sentinels strict=true): see the notes under the table.",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_ls(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.what is None:
        _subcommands(parser)["ls"].print_help()
        return 0
    from assay.runner.tasks.index import TaskManager

    manager = TaskManager(include_path=args.include_path)
    print(task_tables.listing(manager, args.what))
    return 0


def cmd_data(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.data_command != "import":
        _subcommands(parser)["data"].print_help()
        return 0
    return data_command.run_import(args)


def _delegate(name: str, argv: list[str]) -> int:
    import importlib

    module_name = DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise UserError(
                f"`{PROG} {name}` is not available in this installation ({module_name} is missing)."
            ) from None
        raise
    main_fn: Callable[[list[str]], int | None] = module.main
    return int(main_fn(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    code = _main(list(sys.argv[1:] if argv is None else argv))
    if argv is None and "vllm" in sys.modules:
        _exit_past_vllm_teardown(code)
    return code


def _exit_past_vllm_teardown(code: int) -> None:
    """Ends the process without the interpreter's teardown once vLLM ran in it.

    The engine is shut down by then (the evaluator closes it), but vLLM's CPU build still
    aborts in its C++ static destructors at exit about one run in eight ("terminate called
    without an active exception", rc 134), which would fail a runner Job whose results are
    already written. Only the command-line process does this: a caller's `main(argv)` returns.
    """
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _main(argv: list[str]) -> int:
    try:
        if argv and argv[0] in DELEGATED:
            return _delegate(argv[0], argv[1:])
        parser = build_parser()
        if argv == ["run"]:
            _subcommands(parser)["run"].print_help()
            return 0
        args = parser.parse_args(normalize_argv(argv, parser))
        if args.command is None:
            parser.print_help()
            return 0
        if args.command == "run":
            return cmd_run(args)
        if args.command == "ls":
            return cmd_ls(args, parser)
        if args.command == "validate":
            return validate_command.run(args)
        if args.command == "data":
            return cmd_data(args, parser)
        if args.command == "compare":
            return compare_command.run(args)
        if args.command == "check":
            return check_command.run(args)
        if args.command in cluster_commands.COMMANDS:
            return cluster_commands.run(args)
        raise UsageError(f"Unknown command {args.command!r}; see `{PROG} --help`.")
    except UserError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `assay ls tasks | head`: the reader left; stop quietly like other Unix tools.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
