"""`assay run`'s argparse flags: lm-eval 0.4.13's names, short forms, help groups and value parsers.

What the flags mean once parsed (defaults < --config YAML < command line, the checks) is
`assay.run_flags`; this module only tells argparse how to read them, so that `assay run --help`
reads as `lm-eval run --help` does.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from assay.booleans import strict_bool
from assay.errors import UserError
from assay.run_flags import DEFAULT_SEED


class MergeDict(argparse.Action):
    """`k=v,k2=v2`, separate `k=v` tokens or one JSON object; repeated flags merge."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from assay.runner.models.model_args import parse_model_args

        current = dict(getattr(namespace, self.dest, None) or {})
        values = list(values or [])
        if values and values[0].lstrip().startswith("{"):
            values = values[:1]  # lm-eval reads only the JSON object and ignores what follows
        current.update(parse_model_args(values, flag=option_string or f"--{self.dest}"))
        setattr(namespace, self.dest, current)


class SplitCommas(argparse.Action):
    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
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
    return items + DEFAULT_SEED[len(items) :]


def parse_cache_requests(value: str) -> dict[str, bool]:
    if value not in ("true", "refresh", "delete"):
        raise argparse.ArgumentTypeError(f"invalid value {value!r} (choose from true, refresh, delete)")
    return {
        "cache_requests": value in ("true", "refresh"),
        "rewrite_requests_cache": value == "refresh",
        "delete_requests_cache": value == "delete",
    }


def parse_bool_word(value: str) -> bool:
    """A flag's boolean word, read as model_args' are (`on` is refused, not false)."""
    try:
        return strict_bool(value, name="the value")
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Every `lm-eval run` flag, with lm-eval's names, short forms, defaults and help groups.

    The flags below are a table, one row per flag in `--help`'s order, kept unformatted
    (`fmt: off`): formatted, each row would span up to ten lines and the groups would no
    longer read as the lists of flags they are.
    """
    _add_model_and_evaluation_flags(parser)
    _add_output_and_logging_flags(parser)


def _add_model_and_evaluation_flags(parser: argparse.ArgumentParser) -> None:
    # fmt: off
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
    # fmt: on


def _add_output_and_logging_flags(parser: argparse.ArgumentParser) -> None:
    # fmt: off
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
    add("--sentinels", type=str, default=argparse.SUPPRESS, metavar="off|<name=value,...>",
        help="Plausibility checks of the scores: 'off', or thresholds such as below_chance_alpha=0.001,"
             "degenerate_fraction=0.5,empty_fraction=0.5,strict=true (see docs/sentinels.md)")

    add = parser.add_argument_group("stopping early (Assay's own; see docs/compare.md)").add_argument
    add("--stop-early", dest="stop_early", action="store_true", default=argparse.SUPPRESS,
        help="Score each task's documents in a seeded random order, in chunks, and stop once an anytime-valid "
             "interval decides (needs --baseline or --target-ci)")
    add("--baseline", type=str, default=None, metavar="<path>",
        help="With --stop-early: a finished run's output folder (or results JSON) to compare with, document by document")
    add("--max-drop", dest="max_drop", action="append", default=None, metavar="[TASK[:METRIC]=]VALUE",
        help="With --baseline: the tolerated drop in the metric's units (default 0); repeatable, TASK may be a glob")
    add("--target-ci", dest="target_ci", type=float, default=None, metavar="<half-width>",
        help="With --stop-early: stop a task once its interval is this narrow (without a baseline)")
    # fmt: on


RUN_EPILOG = textwrap.dedent("""
            environment:
              ASSAY_DATASETS_DIR  folder(s) (separated by :) holding <hub dataset id>/<config>/<split>.jsonl,
                                  used in place of the Hugging Face hub (`assay data import` writes one)
              HF_HUB_OFFLINE, HF_DATASETS_OFFLINE  as in lm-eval: use only what is on this machine

            exit status:
              0    the run finished and printed its table
              1    the run could not be done: an unknown task, a task YAML mistake, missing data or model
                   files, an unwritable --output_path, or a failure while evaluating
              2    the command line is wrong: an unknown flag or --model, a malformed value, flags that
                   conflict
              130  interrupted (Ctrl-C); with --use_cache the same command resumes
        """)
