"""`assay run`'s flags: lm-eval 0.4.13's names, defaults, YAML precedence and rules.

`resolve_run_config` gives the same configuration lm-eval's `EvaluatorConfig` does for
the same argv (tests/cli/test_cli.py compares them), as a typed `RunFlags` whose values are
checked (batch size parsed, limit vs samples, ...) with the rules every entry point shares;
`RunFlags.run_options` builds the run's one `EvalOptions` record from it.
How argparse reads the flags (names, short forms, help groups) is `assay.run_arguments`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from assay import run_rules
from assay.batch_size import BatchSize, parse_max
from assay.booleans import optional_bool, strict_bool
from assay.errors import UsageError, UserError
from assay.run_options import EvalOptions, SentinelSettings, SequentialSettings

DEFAULT_SEED: list[int | None] = [0, 1234, 1234, 1234]
# Keys lm-eval's config accepts as `k=v` strings or mappings.
DICT_KEYS = (
    "wandb_args",
    "wandb_config_args",
    "hf_hub_log_args",
    "metadata",
    "model_args",
    "gen_kwargs",
    "trackio_args",
)


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
    sentinels: SentinelSettings = dataclasses.field(default_factory=SentinelSettings)
    """Assay's own: the plausibility checks' thresholds (`--sentinels`), not an lm-eval flag."""
    stop_early: bool = False
    """Assay's own (with `baseline`, `max_drop`, `target_ci`): a sequential run (docs/compare.md)."""
    baseline: str | None = None
    max_drop: list[str] | None = None
    target_ci: float | None = None
    sequential: SequentialSettings | None = None
    """What the four flags above make, checked (`sequential_settings`); None without --stop-early."""

    def run_options(self) -> EvalOptions:
        """The run's one options record (the values were checked when the flags were resolved)."""
        seed = self.seed
        return EvalOptions(
            model=self.model,
            model_args=self.model_args,
            parsed_model_args=dict(self.model_args),
            tasks=tuple(self.tasks),
            num_fewshot=self.num_fewshot,
            batch_size=self.batch_size,
            max_batch_size=self.max_batch_size,
            device=self.device,
            use_cache=self.use_cache,
            cache_requests=self.cache_requests.get("cache_requests", False),
            rewrite_requests_cache=self.cache_requests.get("rewrite_requests_cache", False),
            delete_requests_cache=self.cache_requests.get("delete_requests_cache", False),
            limit=self.limit,
            samples=self.samples,
            check_integrity=self.check_integrity,
            write_out=self.write_out,
            log_samples=self.log_samples,
            system_instruction=self.system_instruction,
            apply_chat_template=self.apply_chat_template,
            fewshot_as_multiturn=self.fewshot_as_multiturn,
            gen_kwargs=self.gen_kwargs,
            predict_only=self.predict_only,
            random_seed=seed[0] if seed else None,
            numpy_random_seed=seed[1] if seed else None,
            torch_random_seed=seed[2] if seed else None,
            fewshot_random_seed=seed[3] if seed else None,
            confirm_run_unsafe_code=self.confirm_run_unsafe_code,
            metadata=self.metadata,
            include_path=self.include_path,
            sentinels=self.sentinels,
            sequential=self.sequential,
        )


_FLAG_NAMES = frozenset(field.name for field in dataclasses.fields(RunFlags))
_SWITCHES = (
    "check_integrity",
    "write_out",
    "log_samples",
    "predict_only",
    "show_config",
    "trust_remote_code",
    "confirm_run_unsafe_code",
)
"""The flags that are plain on/off switches (store_true on the command line)."""


# --- the run configuration --------------------------------------------------------------


def resolve_run_config(args: argparse.Namespace) -> RunFlags:
    """Merge defaults < YAML (--config) < command line, then validate, as lm-eval does."""
    config = _merged(args)
    from assay.runner.models.model_args import parse_model_args

    # A --config YAML may hold text: "no" is false and "on" a refusal, as in model_args.
    for key in _SWITCHES:
        config[key] = bool(optional_bool(config[key], name=f"--{key}", error=UsageError))
    if config["fewshot_as_multiturn"] is not None:
        config["fewshot_as_multiturn"] = strict_bool(
            config["fewshot_as_multiturn"], name="--fewshot_as_multiturn", error=UsageError
        )

    for key in DICT_KEYS:
        if isinstance(config[key], str):
            config[key] = parse_model_args(config[key], flag=f"--{key}")
        elif config[key] is None:
            config[key] = {}
    if isinstance(config["tasks"], str):
        config["tasks"] = config["tasks"].split(",")
    config["tasks"] = [part for task in (config["tasks"] or []) for part in str(task).split(",") if part]

    config["log_samples"] = run_rules.log_samples(
        log_samples=config["log_samples"], predict_only=config["predict_only"]
    )
    if config["log_samples"] and not config["output_path"]:
        raise UsageError("Specify --output_path if providing --log_samples or --predict_only.")
    config["fewshot_as_multiturn"] = run_rules.fewshot_as_multiturn(
        config["fewshot_as_multiturn"],
        apply_chat_template=config["apply_chat_template"],
        refusal="--fewshot_as_multiturn needs --apply_chat_template; add it or pass --fewshot_as_multiturn false.",
    )
    _check_counts(config)
    config["samples"] = _load_samples(config["samples"])
    config["seed"] = _normalize_seed(config["seed"])
    config["metadata"] = {**config["model_args"], **config["metadata"]}
    if not isinstance(config["sentinels"], SentinelSettings):
        config["sentinels"] = SentinelSettings.parse(str(config["sentinels"]))
    if config["trust_remote_code"]:
        os.environ["HF_DATASETS_TRUST_REMOTE_CODE"] = "1"
        config["model_args"]["trust_remote_code"] = True
    if config["trackio_args"]:
        raise UsageError(
            "--trackio_args is not supported by Assay; remove it (use --wandb_args or --output_path instead)."
        )
    if isinstance(config["model"], str):
        _check_model_name(config["model"])
    if not config["tasks"]:
        raise UsageError("No tasks given; pass --tasks with at least one task name (see `assay ls tasks`).")
    run_rules.check_limit_or_samples(config["limit"], config["samples"])
    config["sequential"] = sequential_settings(config)
    return RunFlags(**config)


def sequential_settings(config: Mapping[str, Any]) -> SequentialSettings | None:
    """--stop-early and the flags that go with it, checked; None without --stop-early."""
    from assay.compare import verdicts

    baseline, target, drops = config["baseline"], config["target_ci"], config["max_drop"] or []
    if not optional_bool(config["stop_early"], name="--stop-early", error=UsageError):
        given = [
            name for name, value in (("--baseline", baseline), ("--target-ci", target), ("--max-drop", drops)) if value
        ]
        if given:
            raise UsageError(f"{given[0]} is used only with --stop-early; add --stop-early or leave it out.")
        return None
    if baseline is None and target is None:
        raise UsageError(
            "--stop-early needs --baseline <path> (a finished run to compare with) or --target-ci <half-width>."
        )
    if drops and baseline is None:
        raise UsageError("--max-drop needs --baseline <path>: it is the drop tolerated against the baseline.")
    if target is not None and not (isinstance(target, (int, float)) and 0 < float(target) < 1):
        raise UsageError(f"--target-ci must be a half-width above 0 and below 1, not {target!r}.")
    if baseline is not None and not Path(baseline).exists():
        raise UsageError(f"--baseline {baseline} does not exist; give a finished run's output folder or results JSON.")
    if config["predict_only"]:
        raise UsageError("--stop-early decides on scores; --predict_only computes none. Leave one out.")
    tolerances = [verdicts.parse_max_drop(str(drop)) for drop in drops]
    general = [t.value for t in tolerances if t.task is None]
    seed = config["seed"]
    return SequentialSettings(
        baseline=baseline,
        max_drop=general[-1] if general else 0.0,
        max_drop_for={
            f"{t.task}{':' + t.metric if t.metric else ''}": t.value for t in tolerances if t.task is not None
        },
        target_half_width=None if target is None else float(target),
        seed=seed[0] if seed and seed[0] is not None else 0,
    )


def _check_model_name(model: str) -> None:
    """An unknown --model is a mistake on the command line, like any other flag's: exit 2."""
    from assay.runner import models

    try:
        models.check_model_name(model)
    except UsageError:
        raise
    except UserError as error:
        raise UsageError(str(error)) from None


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
        raise UsageError(
            f"--config {yaml_path} has unknown key(s) {', '.join(unknown)}; use the `assay run` flag names."
        )
    return config


def _check_counts(config: dict[str, Any]) -> None:
    """Refuse what lm-eval runs silently (see `run_rules`): no documents, or a negative count of examples."""
    limit, shots = config["limit"], config["num_fewshot"]
    if limit is not None and not run_rules.limit_is_valid(limit):
        raise UsageError(
            f"--limit {_shown(limit)} is not above 0; pass a count of documents per task (e.g. 10) or a "
            "fraction below 1 (e.g. 0.5), or leave it out to evaluate every document."
        )
    if limit is not None and not run_rules.limit_is_count_or_fraction(limit):
        raise UsageError(
            f"--limit {_shown(limit)} is neither a whole count of documents nor a fraction below 1 (lm-eval would "
            f"run {int(limit)} per task); pass e.g. {int(limit)} or 0.5."
        )
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
    raise UsageError(
        f"--samples {samples!r} is neither a JSON object nor a JSON file; pass e.g. '{{\"task\": [0, 1]}}'."
    )


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
