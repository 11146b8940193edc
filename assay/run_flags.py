"""`assay run`'s flags: lm-eval 0.4.13's names, defaults, YAML precedence and rules.

`resolve_run_config` gives the same configuration lm-eval's `EvaluatorConfig` does for
the same argv (tests/test_cli.py compares them), as a typed `RunFlags` whose values are
checked (batch size parsed, limit vs samples, ...) with the rules every entry point shares;
`RunFlags.run_options` builds the run's one `EvalOptions` record from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from assay import run_rules
from assay.batch_size import BatchSize, parse_max
from assay.errors import UsageError
from assay.run_options import EvalOptions

DEFAULT_SEED: list[int | None] = [0, 1234, 1234, 1234]
# Keys lm-eval's config accepts as `k=v` strings or mappings.
DICT_KEYS = ("wandb_args", "wandb_config_args", "hf_hub_log_args", "metadata", "model_args", "gen_kwargs", "trackio_args")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunFlags:
    """`assay run`'s flags after defaults < --config YAML < command line, checked.

    Names and defaults are lm-eval's EvaluatorConfig's, except `device`: lm-eval defaults it
    to "cuda:0" and its HF backend silently falls back to CPU; Assay leaves it unset so the
    backend chooses (a GPU when there is one) and an explicit `--device cuda:0` on a CPU
    machine is an error. Values lm-eval keeps as lists and dicts stay so, to compare equal.
    """

    config: str | None = None
    """The --config YAML file the rest was read from, if any."""
    model: str = "hf"
    model_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    tasks: list[str] = dataclasses.field(default_factory=list)
    num_fewshot: int | None = None
    batch_size: BatchSize = BatchSize(1)
    max_batch_size: int | None = None
    device: str | None = None
    limit: int | float | None = None
    samples: dict[str, list[int]] | None = None
    use_cache: str | None = None
    cache_requests: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    """`parse_cache_requests`' three switches; empty when the flag is not given."""
    check_integrity: bool = False
    write_out: bool = False
    log_samples: bool = False
    output_path: str | None = None
    predict_only: bool = False
    system_instruction: str | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool | None = None
    show_config: bool = False
    include_path: str | None = None
    gen_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    verbosity: str | None = None
    wandb_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    wandb_config_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    hf_hub_log_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    trackio_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: list[int | None] | None = dataclasses.field(default_factory=lambda: list(DEFAULT_SEED))
    trust_remote_code: bool = False
    confirm_run_unsafe_code: bool = False
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def run_options(self) -> EvalOptions:
        """The run's one options record (the values were checked when the flags were resolved)."""
        seed = self.seed
        return EvalOptions(
            model=self.model, model_args=self.model_args, parsed_model_args=dict(self.model_args), tasks=tuple(self.tasks),
            num_fewshot=self.num_fewshot, batch_size=self.batch_size, max_batch_size=self.max_batch_size,
            device=self.device, use_cache=self.use_cache,
            cache_requests=self.cache_requests.get("cache_requests", False),
            rewrite_requests_cache=self.cache_requests.get("rewrite_requests_cache", False),
            delete_requests_cache=self.cache_requests.get("delete_requests_cache", False),
            limit=self.limit, samples=self.samples, check_integrity=self.check_integrity, write_out=self.write_out,
            log_samples=self.log_samples, system_instruction=self.system_instruction,
            apply_chat_template=self.apply_chat_template, fewshot_as_multiturn=self.fewshot_as_multiturn,
            gen_kwargs=self.gen_kwargs, predict_only=self.predict_only,
            random_seed=seed[0] if seed else None, numpy_random_seed=seed[1] if seed else None,
            torch_random_seed=seed[2] if seed else None, fewshot_random_seed=seed[3] if seed else None,
            confirm_run_unsafe_code=self.confirm_run_unsafe_code, metadata=self.metadata, include_path=self.include_path,
        )  # fmt: skip


_FLAG_NAMES = frozenset(field.name for field in dataclasses.fields(RunFlags))


# --- argparse pieces --------------------------------------------------------------------


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
    """Every `lm-eval run` flag, with lm-eval's names, short forms, defaults and help groups."""
    _add_model_and_evaluation_flags(parser)
    _add_output_and_logging_flags(parser)


def _add_model_and_evaluation_flags(parser: argparse.ArgumentParser) -> None:
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


def _add_output_and_logging_flags(parser: argparse.ArgumentParser) -> None:
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


# --- the run configuration --------------------------------------------------------------


def resolve_run_config(args: argparse.Namespace) -> RunFlags:
    """Merge defaults < YAML (--config) < command line, then validate, as lm-eval does."""
    config = _merged(args)
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
    config["fewshot_as_multiturn"] = run_rules.fewshot_as_multiturn(
        config["fewshot_as_multiturn"], apply_chat_template=config["apply_chat_template"],
        refusal="--fewshot_as_multiturn needs --apply_chat_template; add it or pass --fewshot_as_multiturn false.",
    )  # fmt: skip
    _check_counts(config)
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
    run_rules.check_limit_or_samples(config["limit"], config["samples"])
    return RunFlags(**config)


def _merged(args: argparse.Namespace) -> dict[str, Any]:
    """Defaults < YAML (--config) < command line, by flag name, before any check."""
    defaults = RunFlags()
    config: dict[str, Any] = {name: getattr(defaults, name) for name in _FLAG_NAMES}
    yaml_path = getattr(args, "config", None)
    if yaml_path:
        config.update(load_yaml_config(yaml_path))
    # `--batch_size ""` is kept (its default is SUPPRESS, so it is here only when given), so that
    # it is refused as spec.batchSize: "" is, not replaced by the default 1.
    cli = {k: v for k, v in vars(args).items() if (v or v == 0 or k == "batch_size") and k not in ("command", "func")}
    config.update(cli)
    unknown = sorted(set(config) - _FLAG_NAMES)
    if unknown:
        raise UsageError(f"--config {yaml_path} has unknown key(s) {', '.join(unknown)}; use the `assay run` flag names.")
    return config


def _check_counts(config: dict[str, Any]) -> None:
    """Refuse what lm-eval runs silently (see `run_rules`): no documents, or a negative count of examples."""
    limit, shots = config["limit"], config["num_fewshot"]
    if limit is not None and not run_rules.limit_is_valid(limit):
        raise UsageError(f"--limit {_shown(limit)} is not above 0; pass a count of documents per task (e.g. 10) or a "
                         "fraction below 1 (e.g. 0.5), or leave it out to evaluate every document.")  # fmt: skip
    if shots is not None and not run_rules.num_fewshot_is_valid(shots):
        raise UsageError(f"--num_fewshot {_shown(shots)} is not a count; pass 0 or more examples per prompt.")
    # The same parser as spec.batchSize and every backend's model_args batch_size, so a value
    # the CRD refuses (`08`, `auto:01`) is refused here too; a --config YAML value included.
    # Parsed here, once: the record carries the BatchSize to the model.
    config["batch_size"] = BatchSize.parse(config["batch_size"], source="--batch_size", error=UsageError)
    config["max_batch_size"] = parse_max(config["max_batch_size"], source="--max_batch_size", error=UsageError)


def _shown(value: Any) -> str:
    return f"{value:g}" if run_rules.is_number(value) else repr(value)


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


def summary_line(flags: RunFlags, batch_sizes: Sequence[Any]) -> str:
    """lm-eval's line above the tables (model_args shown without trust_remote_code)."""
    model_args = {k: v for k, v in flags.model_args.items() if k != "trust_remote_code"}
    sizes = ",".join(map(str, batch_sizes))
    return (
        f"{flags.model} ({model_args}), gen_kwargs: ({flags.gen_kwargs}), "
        f"limit: {flags.limit}, num_fewshot: {flags.num_fewshot}, "
        f"batch_size: {flags.batch_size}{f' ({sizes})' if sizes else ''}"
    )
