"""`assay run`'s flags: lm-eval 0.4.13's names, defaults, YAML precedence and rules.

`resolve_run_config` gives the same configuration lm-eval's `EvaluatorConfig` does for
the same argv (tests/cli/test_cli.py compares them), as a typed `RunFlags`: each value given
(by the --config YAML, then the command line) is read by its flag's reader into the type the
record declares (`_READERS`: batch size parsed, switches and seeds read, ...), then the rules
between flags are applied (`_checked`, with the rules every entry point shares). The record's
`run_options` is the one place the command line becomes the run's `EvalOptions`, as
`Evaluation.run_options` is for a spec (tests/cli/test_run_options_record.py holds every
field of the record to it).
How argparse reads the flags (names, short forms, help groups) is `assay.run_arguments`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
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
    """Defaults < YAML (--config) < command line, as lm-eval merges them: each given value read
    by its flag's reader into `RunFlags`' type, then the rules between flags."""
    given = _given(args)
    values = {name: read(given[name]) for name, read in _READERS.items() if name in given}
    values.update({name: value for name, value in given.items() if name not in _READERS})
    return _checked(RunFlags(**values))


def _checked(flags: RunFlags) -> RunFlags:
    """The rules between flags (lm-eval's, and `run_rules`' refusals), on flags already read."""
    log_samples = run_rules.log_samples(log_samples=flags.log_samples, predict_only=flags.predict_only)
    if log_samples and not flags.output_path:
        raise UsageError("Specify --output_path if providing --log_samples or --predict_only.")
    fewshot_as_multiturn = run_rules.fewshot_as_multiturn(
        flags.fewshot_as_multiturn,
        apply_chat_template=flags.apply_chat_template,
        refusal="--fewshot_as_multiturn needs --apply_chat_template; add it or pass --fewshot_as_multiturn false.",
    )
    metadata = {**flags.model_args, **flags.metadata}
    model_args = flags.model_args
    if flags.trust_remote_code:
        os.environ["HF_DATASETS_TRUST_REMOTE_CODE"] = "1"
        model_args = {**model_args, "trust_remote_code": True}
    if flags.trackio_args:
        raise UsageError(
            "--trackio_args is not supported by Assay; remove it (use --wandb_args or --output_path instead)."
        )
    if isinstance(flags.model, str):
        _check_model_name(flags.model)
    if not flags.tasks:
        raise UsageError("No tasks given; pass --tasks with at least one task name (see `assay ls tasks`).")
    run_rules.check_limit_or_samples(flags.limit, flags.samples)
    return dataclasses.replace(
        flags,
        log_samples=log_samples,
        fewshot_as_multiturn=fewshot_as_multiturn,
        metadata=metadata,
        model_args=model_args,
        sequential=sequential_settings(flags),
    )


def sequential_settings(flags: RunFlags) -> SequentialSettings | None:
    """--stop-early and the flags that go with it, checked; None without --stop-early."""
    from assay.compare import verdicts

    baseline, target, drops = flags.baseline, flags.target_ci, flags.max_drop or []
    if not optional_bool(flags.stop_early, name="--stop-early", error=UsageError):
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
    if flags.predict_only:
        raise UsageError("--stop-early decides on scores; --predict_only computes none. Leave one out.")
    tolerances = [verdicts.parse_max_drop(str(drop)) for drop in drops]
    general = [t.value for t in tolerances if t.task is None]
    seed = flags.seed
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


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """What the --config YAML and then the command line give, by flag name, as written."""
    yaml_path = getattr(args, "config", None)
    given = load_yaml_config(yaml_path) if yaml_path else {}
    # `--batch_size ""` is kept (its default is SUPPRESS, so it is here only when given), so that
    # it is refused as spec.batchSize: "" is, not replaced by the default 1.
    given.update(
        {k: v for k, v in vars(args).items() if (v or v == 0 or k == "batch_size") and k not in ("command", "func")}
    )
    unknown = sorted(set(given) - _FLAG_NAMES)
    if unknown:
        raise UsageError(
            f"--config {yaml_path} has unknown key(s) {', '.join(unknown)}; use the `assay run` flag names."
        )
    return given


# --- reading one flag's value: from the command line (argparse typed some) or a --config YAML
# (any YAML value: "no" for a switch, "k=v" text for a mapping), into `RunFlags`' type.


def _switch(name: str) -> Callable[[Any], bool]:
    """A --config YAML may hold text: "no" is false and "on" a refusal, as in model_args."""
    return lambda value: bool(optional_bool(value, name=f"--{name}", error=UsageError))


def _key_values(name: str) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        from assay.runner.models.model_args import parse_model_args

        if isinstance(value, str):
            return parse_model_args(value, flag=f"--{name}")
        return {} if value is None else value

    return read


def _task_names(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    return [part for task in (value or []) for part in str(task).split(",") if part]


def _multiturn(value: Any) -> bool | None:
    return None if value is None else strict_bool(value, name="--fewshot_as_multiturn", error=UsageError)


def _limit(limit: Any) -> Any:
    """Refuse what lm-eval runs silently (see `run_rules`): no documents, or a count cut to a whole one."""
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
    return limit


def _num_fewshot(shots: Any) -> Any:
    if shots is not None and not run_rules.num_fewshot_is_valid(shots):
        raise UsageError(f"--num_fewshot {_shown(shots)} is not a count; pass 0 or more examples per prompt.")
    return shots


_READERS: dict[str, Callable[[Any], Any]] = {
    **{name: _switch(name) for name in _SWITCHES},
    "fewshot_as_multiturn": _multiturn,
    **{name: _key_values(name) for name in DICT_KEYS},
    "tasks": _task_names,
    "limit": _limit,
    "num_fewshot": _num_fewshot,
    # The same parser as spec.batchSize and every backend's model_args batch_size, so a value
    # the CRD refuses (`08`, `auto:01`) is refused here too; a --config YAML value included.
    # Parsed here, once: the record carries the BatchSize to the model.
    "batch_size": lambda value: BatchSize.parse(value, source="--batch_size", error=UsageError),
    "max_batch_size": lambda value: parse_max(value, source="--max_batch_size", error=UsageError),
    "samples": lambda value: _load_samples(value),
    "seed": lambda value: _normalize_seed(value),
    "sentinels": lambda value: value if isinstance(value, SentinelSettings) else SentinelSettings.parse(str(value)),
}
"""Each flag whose given value is not already its type, and its reader; the other flags are kept as given."""


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
