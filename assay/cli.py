"""`assay`: lm-eval's command line (run, ls, validate) plus Assay's own subcommands.

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
import json
import logging
import os
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from assay import run_rules
from assay.errors import UsageError, UserError

if TYPE_CHECKING:
    from assay.runner.options import EvalOptions

PROG = "assay"
DEFAULT_SEED = [0, 1234, 1234, 1234]
# Subcommands handed to another module's main(argv) untouched.
DELEGATED = {
    "apply": ("assay.operator.local", "run an Evaluation manifest on this machine (assay apply -f eval.yaml --local)"),
    "operator": ("assay.operator.main", "run the Kubernetes operator"),
    "runner": ("assay.runner.job", "the runner Job's entry point (used inside pods)"),
}
# Keys lm-eval's config accepts as `k=v` strings or mappings.
DICT_KEYS = ("wandb_args", "wandb_config_args", "hf_hub_log_args", "metadata", "model_args", "gen_kwargs", "trackio_args")
# lm-eval's EvaluatorConfig defaults, except `device`: lm-eval defaults it to "cuda:0" and
# its HF backend silently falls back to CPU; Assay leaves it unset so the backend chooses
# (a GPU when there is one) and an explicit `--device cuda:0` on a CPU machine is an error.
RUN_DEFAULTS: dict[str, Any] = {
    "config": None,
    "model": "hf",
    "model_args": {},
    "tasks": [],
    "num_fewshot": None,
    "batch_size": 1,
    "max_batch_size": None,
    "device": None,
    "limit": None,
    "samples": None,
    "use_cache": None,
    "cache_requests": {},
    "check_integrity": False,
    "write_out": False,
    "log_samples": False,
    "output_path": None,
    "predict_only": False,
    "system_instruction": None,
    "apply_chat_template": False,
    "fewshot_as_multiturn": None,
    "show_config": False,
    "include_path": None,
    "gen_kwargs": {},
    "verbosity": None,
    "wandb_args": {},
    "wandb_config_args": {},
    "hf_hub_log_args": {},
    "trackio_args": {},
    "seed": list(DEFAULT_SEED),
    "trust_remote_code": False,
    "confirm_run_unsafe_code": False,
    "metadata": {},
}


# --- argparse pieces --------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and a UsageError (exit 2)."""

    def error(self, message: str) -> Any:
        raise UsageError(f"{message} (see `{self.prog} --help`).")


class MergeDict(argparse.Action):
    """`k=v,k2=v2`, separate `k=v` tokens or one JSON object; repeated flags merge."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        from assay.runner.models.model_args import parse_model_args

        current = dict(getattr(namespace, self.dest, None) or {})
        values = list(values or [])
        if values and values[0].lstrip().startswith("{"):
            values = values[:1]  # lm-eval reads only the JSON object and ignores what follows
        current.update(parse_model_args(values, flag=option_string or f"--{self.dest}"))
        setattr(namespace, self.dest, current)


class SplitCommas(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        for value in values:
            items.extend(value.split(","))
        setattr(namespace, self.dest, items)


def parse_json_arg(value: str) -> Any:
    """`--samples`: a JSON object, else kept as text (a file path); broken JSON is an error."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        if "{" in value:
            raise argparse.ArgumentTypeError(f"invalid JSON {value!r}; use double quotes for JSON strings") from None
        return value


def parse_seed(value: str) -> list[int | None]:
    """One value for all four seeds, or 3-4 comma-separated ints/None (missing → defaults)."""
    items: list[int | None] = []
    for part in value.split(","):
        part = part.strip().lower()
        if part == "none":
            items.append(None)
            continue
        try:
            items.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not an integer or None") from None
    if len(items) == 1:
        return items * 4
    if len(items) not in (3, 4):
        raise argparse.ArgumentTypeError("--seed takes 1 or 4 values (python,numpy,torch,fewshot), comma-separated")
    return items + DEFAULT_SEED[len(items):]


def parse_cache_requests(value: str) -> dict[str, bool]:
    if value not in ("true", "refresh", "delete"):
        raise argparse.ArgumentTypeError(f"invalid value {value!r} (choose from true, refresh, delete)")
    return {
        "cache_requests": value in ("true", "refresh"),
        "rewrite_requests_cache": value == "refresh",
        "delete_requests_cache": value == "delete",
    }


def parse_bool_word(value: str) -> bool:
    return value.lower() in ("true", "1", "yes")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `lm-eval run` flag, with lm-eval's names, short forms and defaults."""
    add = parser.add_argument_group("configuration").add_argument
    add("--config", "-C", default=None, type=str, metavar="<path>", help="Set initial arguments from a YAML file (flags given on the command line win)")

    add = parser.add_argument_group("model and tasks").add_argument
    add("--tasks", "-t", default=None, nargs="+", metavar="<task>", action=SplitCommas,
        help="Task, group or tag names, globs, YAML files or a folder; space or comma separated (see `assay ls tasks`)")
    add("--model", "-M", type=str, default=None, metavar="<model>", help="Model backend name (default: hf)")
    add("--model_args", "-a", default=None, nargs="+", action=MergeDict, metavar="<arg>",
        help="Model arguments as 'key=val,key2=val2', separate key=val tokens, or a JSON object")
    add("--apply_chat_template", type=str, nargs="?", const=True, default=argparse.SUPPRESS, metavar="<template>",
        help="Apply the tokenizer's chat template to prompts (optionally name the template)")
    add("--limit", "-L", type=float, default=None, metavar="<limit>",
        help="Evaluate only the first N documents per task, or this fraction of them if below 1 (for testing only)")
    add("--use_cache", "-c", type=str, default=None, metavar="<path>",
        help="sqlite path prefix caching model responses, so reruns skip finished requests")

    add = parser.add_argument_group("evaluation settings").add_argument
    add("--num_fewshot", "-f", type=int, default=None, metavar="<n>", help="Number of few-shot examples in each prompt")
    add("--batch_size", "-b", type=str, default=argparse.SUPPRESS, metavar="<size>",
        help="Batch size: an integer, 'auto', or 'auto:N' to re-tune N times (default: 1)")
    add("--max_batch_size", type=int, default=None, metavar="<n>", help="Largest batch size tried by --batch_size auto")
    add("--device", type=str, default=None, metavar="<device>", help="Device to use, e.g. cuda, cuda:0, cpu, mps (default: a GPU if there is one, else cpu)")
    add("--gen_kwargs", default=None, nargs="+", action=MergeDict, metavar="<arg>",
        help="Generation arguments for generate_until tasks, e.g. temperature=0,top_p=0.9 (values parsed as Python literals)")

    add = parser.add_argument_group("data and output (see also: --limit)").add_argument
    add("--output_path", "-o", default=None, type=str, metavar="<path>", help="Folder, or .json file, for the results (and samples)")
    add("--log_samples", "-s", action="store_true", default=argparse.SUPPRESS, help="Also save every document's prompt, responses and scores (needs --output_path)")
    add("--samples", "-E", default=None, type=parse_json_arg, metavar="<json>",
        help="JSON object (or JSON file) mapping task names to document indices, e.g. '{\"task1\": [0,1,2]}'; not with --limit")

    add = parser.add_argument_group("caching and performance (see also: --use_cache)").add_argument
    add("--cache_requests", type=parse_cache_requests, nargs="?", const="true", default=None, metavar="true|refresh|delete",
        help="Cache built prompts between runs; bare flag means 'true'")
    add("--check_integrity", action="store_true", default=argparse.SUPPRESS, help="Check each task's configuration before running")

    add = parser.add_argument_group("instruct formatting (see also: --apply_chat_template)").add_argument
    add("--system_instruction", type=str, default=None, metavar="<text>", help="System instruction put before every prompt")
    add("--fewshot_as_multiturn", type=parse_bool_word, nargs="?", const=True, default=argparse.SUPPRESS, metavar="<bool>",
        help="Few-shot examples as chat turns; on by default with --apply_chat_template ('false' turns it off)")

    add = parser.add_argument_group("task management").add_argument
    add("--include_path", type=str, default=None, metavar="<path>", help="Extra folder of task YAMLs")

    add = parser.add_argument_group("logging and tracking").add_argument
    add("--verbosity", "-v", type=str.upper, default=None, metavar="<level>", help="(Deprecated) log level; prefer the LMEVAL_LOG_LEVEL variable")
    add("--write_out", "-w", action="store_true", default=argparse.SUPPRESS, help="Print the prompts of the first documents")
    add("--show_config", action="store_true", default=argparse.SUPPRESS, help="Print the full results JSON, task configurations included, after the run")
    add("--wandb_args", default=None, nargs="+", action=MergeDict, metavar="<args>", help="wandb.init arguments, e.g. project=evals mode=offline")
    add("--wandb_config_args", default=None, nargs="+", action=MergeDict, metavar="<args>", help="Extra W&B run config entries key=val")
    add("--trackio_args", default=None, nargs="+", action=MergeDict, metavar="<args>", help="Trackio init arguments (not supported by Assay)")
    add("--hf_hub_log_args", default=None, nargs="+", action=MergeDict, metavar="<args>",
        help="Hugging Face Hub push settings, e.g. hub_results_org=me,push_results_to_hub=True")

    add = parser.add_argument_group("advanced options").add_argument
    add("--predict_only", "-x", action="store_true", default=argparse.SUPPRESS, help="Save model outputs only, skip metrics (implies --log_samples)")
    add("--seed", type=parse_seed, default=None, metavar="<python,numpy,torch,fewshot>",
        help="Random seeds (default: 0,1234,1234,1234); one integer sets all four, 'None' leaves a seed unset")
    add("--trust_remote_code", action="store_true", default=argparse.SUPPRESS, help="Allow code from the Hugging Face Hub (model and datasets)")
    add("--confirm_run_unsafe_code", action="store_true", default=argparse.SUPPRESS, help="Allow tasks that execute model-written code")
    add("--metadata", default=None, nargs="+", action=MergeDict, metavar="<args>",
        help="Task metadata as key=val tokens or a JSON object, merged over --model_args")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Assay: lm-evaluation-harness compatible evaluation, distributed and Kubernetes-native.",
        epilog=textwrap.dedent("""
            examples:
              assay run --model hf --model_args pretrained=gpt2 --tasks hellaswag
              assay ls tasks
              assay validate --tasks hellaswag,arc_easy
              assay apply -f eval.yaml --local

            As with lm-eval, `assay --model hf --tasks hellaswag` means `assay run ...`.
        """),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="Available commands", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="Evaluate a model on tasks (lm-eval's `run`)",
        description="Evaluate a language model on tasks, with lm-eval 0.4.13's flags.",
        usage=f"{PROG} run --model <model> --tasks <task> <task> --model_args <arg=value> <arg=value> [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_arguments(run)

    ls = sub.add_parser("ls", help="List tasks, groups, subtasks or tags", description="List the task library as Markdown tables.")
    ls.add_argument("what", choices=["tasks", "groups", "subtasks", "tags"], nargs="?", help="What to list: tasks (all), groups, subtasks or tags")
    ls.add_argument("--include_path", type=str, default=None, metavar="DIR", help="Extra folder of task YAMLs")

    validate = sub.add_parser("validate", help="Check that task names resolve", description="Check that task names resolve; exit 1 if some do not.")
    validate.add_argument("--tasks", "-t", required=True, type=str, metavar="TASK1,TASK2", help="Comma-separated task names")
    validate.add_argument("--include_path", type=str, default=None, metavar="DIR", help="Extra folder of task YAMLs")

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)

    data = sub.add_parser("data", help="Manage offline benchmark data", description="Manage offline benchmark data.")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=_Parser)
    imp = data_sub.add_parser("import", help="Convert public benchmark files into an ASSAY_DATASETS_DIR folder")
    imp.add_argument("--from", dest="src", required=True, type=Path, help="Folder with the raw benchmark files")
    imp.add_argument("--to", dest="dst", required=True, type=Path, help="ASSAY_DATASETS_DIR folder to write")
    imp.add_argument("--only", default=None, help="Comma-separated subset of the benchmarks")
    return parser


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


# --- the run configuration --------------------------------------------------------------


def resolve_run_config(args: argparse.Namespace) -> dict[str, Any]:
    """Merge defaults < YAML (--config) < command line, then validate, as lm-eval does."""
    config: dict[str, Any] = {key: (list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value)
              for key, value in RUN_DEFAULTS.items()}
    yaml_path = getattr(args, "config", None)
    if yaml_path:
        config.update(load_yaml_config(yaml_path))
    cli = {k: v for k, v in vars(args).items() if (v or v == 0) and k not in ("command", "func")}
    config.update(cli)
    unknown = sorted(set(config) - set(RUN_DEFAULTS))
    if unknown:
        raise UsageError(f"--config {yaml_path} has unknown key(s) {', '.join(unknown)}; use the `assay run` flag names.")

    from assay.runner.models.model_args import parse_model_args

    for key in DICT_KEYS:
        if isinstance(config[key], str):
            config[key] = parse_model_args(config[key], flag=f"--{key}")
        elif config[key] is None:
            config[key] = {}
    if isinstance(config["tasks"], str):
        config["tasks"] = config["tasks"].split(",")
    config["tasks"] = [part for task in (config["tasks"] or []) for part in str(task).split(",") if part]

    config["log_samples"] = run_rules.log_samples(log_samples=config["log_samples"], predict_only=config["predict_only"])
    if config["log_samples"] and not config["output_path"]:
        raise UsageError("Specify --output_path if providing --log_samples or --predict_only.")
    if config["fewshot_as_multiturn"] is None and config["apply_chat_template"]:
        config["fewshot_as_multiturn"] = True
    elif config["fewshot_as_multiturn"] is True and not config["apply_chat_template"]:
        raise UsageError("--fewshot_as_multiturn needs --apply_chat_template; add it or pass --fewshot_as_multiturn false.")
    config["samples"] = _load_samples(config["samples"])
    config["seed"] = _normalize_seed(config["seed"])
    config["metadata"] = {**config["model_args"], **config["metadata"]}
    if config["trust_remote_code"]:
        os.environ["HF_DATASETS_TRUST_REMOTE_CODE"] = "1"
        config["model_args"]["trust_remote_code"] = True
    if config["trackio_args"]:
        raise UsageError("--trackio_args is not supported by Assay; remove it (use --wandb_args or --output_path instead).")
    if not config["tasks"]:
        raise UsageError("No tasks given; pass --tasks with at least one task name (see `assay ls tasks`).")
    return config


def load_yaml_config(path: str) -> dict[str, Any]:
    import yaml

    file = Path(path)
    if not file.is_file():
        raise UsageError(f"--config {path} does not exist; pass the path of a YAML file of run options.")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"--config {path} is not valid YAML{where}; fix the file.") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path} must hold a mapping of option names to values, not {type(data).__name__}.")
    return data


def _load_samples(samples: Any) -> Any:
    if not samples or isinstance(samples, dict):
        return samples or None
    if isinstance(samples, str):
        try:
            return json.loads(samples)
        except json.JSONDecodeError:
            path = Path(samples)
            if path.is_file():
                try:
                    return json.loads(path.read_text())
                except json.JSONDecodeError as err:
                    raise UsageError(f"--samples file {path} is not valid JSON ({err.msg}).") from None
    raise UsageError(f"--samples {samples!r} is neither a JSON object nor a JSON file; pass e.g. '{{\"task\": [0, 1]}}'.")


def _normalize_seed(seed: Any) -> list[int | None] | None:
    if seed is None:
        return None
    values = list(seed) if isinstance(seed, (list, tuple)) else [seed]
    if len(values) == 1:
        values = values * 4
    elif len(values) == 3:
        values = values + DEFAULT_SEED[3:]
    if len(values) != 4:
        raise UsageError(f"seed takes one value or four (python, numpy, torch, fewshot), not {seed!r}.")
    parsed: list[int | None] = []
    for value in values:
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            parsed.append(None)
            continue
        try:
            parsed.append(int(value))
        except (TypeError, ValueError):
            raise UsageError(f"seed values must be integers or None, not {value!r}.") from None
    return parsed


def summary_line(config: dict[str, Any], batch_sizes: Sequence[Any]) -> str:
    """lm-eval's line above the tables (model_args shown without trust_remote_code)."""
    model_args = {k: v for k, v in config["model_args"].items() if k != "trust_remote_code"}
    sizes = ",".join(map(str, batch_sizes))
    return (
        f"{config['model']} ({model_args}), gen_kwargs: ({config['gen_kwargs']}), "
        f"limit: {config['limit']}, num_fewshot: {config['num_fewshot']}, "
        f"batch_size: {config['batch_size']}{f' ({sizes})' if sizes else ''}"
    )


# --- subcommands ------------------------------------------------------------------------


def run_options(config: dict[str, Any]) -> EvalOptions:
    """The resolved flags as the run's one options record (checked here, before any task loads)."""
    from assay.runner.options import EvalOptions

    cache = config["cache_requests"] or {}
    seed = config["seed"]
    return EvalOptions.build(
        model=config["model"],
        model_args=config["model_args"],
        tasks=config["tasks"],
        num_fewshot=config["num_fewshot"],
        batch_size=config["batch_size"],
        max_batch_size=config["max_batch_size"],
        device=config["device"],
        use_cache=config["use_cache"],
        cache_requests=cache.get("cache_requests", False),
        rewrite_requests_cache=cache.get("rewrite_requests_cache", False),
        delete_requests_cache=cache.get("delete_requests_cache", False),
        limit=config["limit"],
        samples=config["samples"],
        check_integrity=config["check_integrity"],
        write_out=config["write_out"],
        log_samples=config["log_samples"],
        system_instruction=config["system_instruction"],
        apply_chat_template=config["apply_chat_template"],
        fewshot_as_multiturn=config["fewshot_as_multiturn"],
        gen_kwargs=config["gen_kwargs"],
        predict_only=config["predict_only"],
        random_seed=seed[0] if seed else None,
        numpy_random_seed=seed[1] if seed else None,
        torch_random_seed=seed[2] if seed else None,
        fewshot_random_seed=seed[3] if seed else None,
        confirm_run_unsafe_code=config["confirm_run_unsafe_code"],
        metadata=config["metadata"],
        include_path=config["include_path"],
    )


def cmd_run(args: argparse.Namespace) -> int:
    config = resolve_run_config(args)
    options = run_options(config)
    _set_verbosity(config["verbosity"])
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    from assay.runner import distributed

    # Under torchrun every rank joins one process group: each runs its share of the
    # requests and rank 0 alone aggregates, writes files and prints the table.
    with distributed.process_group():
        return _run_on_this_rank(config, options, is_rank0=distributed.rank_and_world()[0] == 0)


def _run_on_this_rank(config: dict[str, Any], options: EvalOptions, *, is_rank0: bool) -> int:
    from assay.runner.results import output
    from assay.runner.results.loggers import HubLogger, WandbLogger

    wandb_logger = WandbLogger(config["wandb_args"], config["wandb_config_args"]) if config["wandb_args"] and is_rank0 else None
    hub_logger = HubLogger(config["hf_hub_log_args"]) if config["hf_hub_log_args"] and is_rank0 else None
    tracker = output.EvaluationTracker(config["output_path"])

    from assay.runner import evaluator
    from assay.runner.tasks.index import TaskManager

    task_manager = TaskManager(include_path=config["include_path"], metadata=config["metadata"])
    tasks = task_manager.match_tasks(config["tasks"])
    results = evaluator.run(dataclasses.replace(options, tasks=tuple(tasks), task_manager=task_manager), evaluation_tracker=tracker)
    if results is None:  # not rank 0
        return 0
    samples = results.pop("samples", None) if config["log_samples"] else None
    if config["show_config"]:
        print(output.dumps(results))
    batch_sizes = results.get("config", {}).get("batch_sizes", [])
    if wandb_logger is not None:
        try:
            wandb_logger.post_init(results)
            wandb_logger.log_eval_result()
            if samples:
                wandb_logger.log_eval_samples(samples)
        except Exception as err:  # like lm-eval: a logging failure does not fail the run
            logging.getLogger(__name__).warning("Logging to W&B failed: %s", err)
    saved = tracker.save(
        results,
        samples,
        model_source=config["model"],
        model_args=config["model_args"],
        system_instruction=config["system_instruction"],
        chat_template=None,
        fewshot_as_multiturn=config["fewshot_as_multiturn"],
    )

    from assay.runner.results.table import make_table

    print(summary_line(config, batch_sizes))
    print(make_table(results))
    if "groups" in results:
        print(make_table(results, "groups"))
    if wandb_logger is not None:
        wandb_logger.finish()
    if hub_logger is not None:
        hub_logger.push(saved)
    return 0


def _set_verbosity(level: str | None) -> None:
    level = level or os.environ.get("LMEVAL_LOG_LEVEL")
    if not level:
        return
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise UsageError(f"--verbosity {level!r} is not a log level; use DEBUG, INFO, WARNING, ERROR or CRITICAL.")
    logging.basicConfig(level=numeric, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
    logging.getLogger().setLevel(numeric)


def list_tables(task_manager: Any, *, groups: bool = True, tags: bool = True, subtasks: bool = True) -> str:
    """lm-eval's `ls` output: Markdown tables of groups, tags and tasks."""
    from assay.runner.results.table import render_markdown

    out = "\n"
    if groups:
        rows = [[name, _config_location(task_manager.describe(name).path)] for name in task_manager.all_groups]
        out += render_markdown(["Group", "Config Location"], rows) + "\n\n"
    if tags:
        out += render_markdown(["Tag"], [[name] for name in task_manager.all_tags]) + "\n\n"
    if subtasks:
        rows = []
        for name in task_manager.all_subtasks:
            entry = task_manager.describe(name)
            rows.append([name, _config_location(entry.path), entry.output_type or ""])
        out += render_markdown(["Task", "Config Location", "Output Type"], rows) + "\n\n"
    return out


def _config_location(path: Path | None) -> str:
    if path is None:
        return "---"
    from assay.runner.tasks.index import builtin_tasks_dir

    try:
        return "tasks/" + Path(path).resolve().relative_to(builtin_tasks_dir().resolve()).as_posix()
    except ValueError:
        return str(path)


def cmd_ls(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.what is None:
        _subcommands(parser)["ls"].print_help()
        return 0
    from assay.runner.tasks.index import TaskManager

    manager = TaskManager(include_path=args.include_path)
    flags = {
        "tasks": {},
        "groups": {"subtasks": False, "tags": False},
        "subtasks": {"groups": False, "tags": False},
        "tags": {"groups": False, "subtasks": False},
    }[args.what]
    print(list_tables(manager, **flags))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from assay.runner.tasks.index import TaskManager

    manager = TaskManager(include_path=args.include_path)
    names = args.tasks.split(",")
    print(f"Validating tasks: {names}")
    missing = []
    for name in names:
        try:
            manager.match_tasks([name])
        except UserError:
            missing.append(name)
    if missing:
        print(f"Tasks not found: {', '.join(missing)}")
        return 1
    print("All tasks found and valid")
    return 0


def cmd_data(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.data_command != "import":
        _subcommands(parser)["data"].print_help()
        return 0
    from assay.runner.data.importer import import_benchmarks

    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
    names = import_benchmarks(args.src, args.dst, only)
    print(f"imported {', '.join(names)} into {args.dst}; set ASSAY_DATASETS_DIR={args.dst}")
    return 0


def _delegate(name: str, argv: list[str]) -> int:
    import importlib

    module_name = DELEGATED[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise UserError(f"`{PROG} {name}` is not available in this installation ({module_name} is missing).") from None
        raise
    main_fn: Callable[[list[str]], int | None] = module.main
    return int(main_fn(argv) or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
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
            return cmd_validate(args)
        if args.command == "data":
            return cmd_data(args, parser)
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
