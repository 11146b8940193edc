"""Everything one evaluation run is told, as one frozen record.

Three entry points build it directly, each after checking its own input with the rules
of `run_rules`: `assay run`'s flags (`RunFlags.run_options`), an Evaluation's spec
(`Evaluation.run_options`, the runner Job) and lm-eval's `simple_evaluate(...)` keywords.
The evaluator and the model backends read it and never re-parse a value: the batch size
arrives as a `BatchSize`, model_args and gen_kwargs as mappings. What only a running
process has (a built model, a task index, a progress callback) is not part of it: the
engine's `run` takes those beside the record.

This module sits below the spec and the runner, so that the spec can build the record
without knowing the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from assay.batch_size import BatchSize
from assay.booleans import strict_bool
from assay.errors import UsageError, UserError

DEFAULT_RANDOM_SEED = 0
DEFAULT_OTHER_SEED = 1234
DEFAULT_BOOTSTRAP_ITERS = 100000


@dataclasses.dataclass(frozen=True, kw_only=True)
class SentinelSettings:
    """The thresholds of the plausibility checks every run makes of its own scores.

    The defaults are chosen so that a random model on a small --limit does not trip them
    (a random model is at chance, not significantly below it at α = 0.001), while what a
    broken engine or endpoint produces (every choice scored alike, most answers empty)
    does. `assay run --sentinels` and an Evaluation's `spec.sentinels` set them.
    """

    enabled: bool = True
    """False: no check runs (`--sentinels off`); the results carry no `sentinels` block."""
    strict: bool = False
    """A failed check fails the run (an Evaluation ends Failed; `assay run` exits non-zero)."""
    below_chance_alpha: float = 0.001
    """One-sided exact binomial test of multiple-choice accuracy against 1/K."""
    degenerate_fraction: float = 0.5
    """Documents whose choices all scored alike (or alike across documents) above this fraction."""
    empty_fraction: float = 0.5
    unparsed_fraction: float = 1.0
    """Answers where no extraction filter of the task found anything (lm-eval's "[invalid]").
    Reported, but by default never failed: a random or base model that ignores the answer
    format leaves every answer unparsed (a tiny random model on gsm8k: 100%); set it below 1
    for a model whose answers should parse."""
    truncated_fraction: float = 0.5
    """Answers cut before the end of their reasoning (an unclosed <think>, or a served chat
    model's answer without its think_end_token)."""
    retried_fraction: float = 0.2
    """Requests to a served model that needed a retry."""
    cut_by_length_fraction: float = 1.0
    """A served model's generations stopped by the token budget, not a stop sequence.
    Reported, but by default never failed: a random or rambling model runs to the budget
    on every answer; set it below 1 where answers should end on their own."""

    @classmethod
    def parse(cls, text: str, *, source: str = "--sentinels", error: type[UserError] = UsageError) -> SentinelSettings:
        """`off`, `on`, or `name=value,...` over the defaults (the form of --sentinels)."""
        text = text.strip()
        if text.lower() in ("off", "false", "none"):
            return cls(enabled=False)
        if text.lower() in ("", "on", "true", "default"):
            return cls()
        given: dict[str, Any] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            given[name.strip()] = value.strip() if sep else ""
        return cls.from_mapping(given, source=source, error=error)

    @classmethod
    def from_mapping(
        cls, given: Mapping[str, Any], *, source: str = "--sentinels", error: type[UserError] = UsageError
    ) -> SentinelSettings:
        """The settings from names and values (a parsed flag, or a spec's `sentinels` mapping)."""
        known = {field.name: field for field in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in given.items():
            if name not in known:
                raise error(f"{source}: unknown setting {name!r}; known: {', '.join(known)}.")
            values[name] = _sentinel_value(name, value, known[name].default, source=source, error=error)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _sentinel_value(name: str, value: Any, default: Any, *, source: str, error: type[UserError]) -> Any:
    if isinstance(default, bool):
        return strict_bool(value, name=f"{source}: {name}", error=error)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not 0.0 <= number <= 1.0:
        raise error(f"{source}: {name} must be a number between 0 and 1, not {str(value)[:40]!r}.")
    return number


@dataclasses.dataclass(frozen=True, kw_only=True)
class SequentialSettings:
    """A sequential run (`assay run --stop-early`, `spec.gate.sequential`, `spec.stopAt`).

    Each task's documents are scored in a seeded random order, in chunks; after each chunk an
    anytime-valid gate (`assay.compare.sequential`) decides whether the task's answer is known:
    against the baseline, non-inferior or regressed beyond `max_drop`; without one, an interval
    of half-width `target_half_width` or less. Only per-document metrics of a known range decide.
    """

    baseline: str | None = None
    """The baseline's results folder (or results JSON); None: stop at a precision, or never."""
    max_drop: float = 0.0
    max_drop_for: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """TASK or TASK:METRIC (TASK a glob) → the drop tolerated there, as `spec.gate.maxDropFor`."""
    alpha: float = 0.05
    target_half_width: float | None = None
    seed: int = 0
    """The documents' order; the results record it, so that a run can be repeated."""
    chunk_size: int | None = None
    """Documents per look; None: the default looks (every twentieth of the task, at least 64 documents, and
    after 64, 128, 256, ... documents: `assay.runner.sequential.order.chunk_sizes`)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalOptions:
    model: str | None = "hf"
    """A registered model name; None when the caller hands the engine a model it built."""
    model_args: Mapping[str, Any] | str | None = None
    """As given (a `k=v` string or a mapping): the results' config echoes it."""
    parsed_model_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tasks: Sequence[Any] = ()
    """Task or group names, YAML paths, config dicts, or Task objects."""
    num_fewshot: int | None = None
    batch_size: BatchSize | None = None
    """None: the backend's default."""
    max_batch_size: int | None = None
    device: str | None = None
    use_cache: str | None = None
    """Path prefix of the sqlite response cache; one file per rank."""
    cache_requests: bool = False
    rewrite_requests_cache: bool = False
    delete_requests_cache: bool = False
    limit: int | float | None = None
    samples: Mapping[str, Sequence[int]] | None = None
    """Per task, the doc indices to evaluate (exclusive with limit)."""
    bootstrap_iters: int = DEFAULT_BOOTSTRAP_ITERS
    check_integrity: bool = False
    write_out: bool = False
    log_samples: bool = True
    """Already true when predict_only is (lm-eval's rule, see `run_rules`)."""
    score_records: bool = False
    """Keep each document's identity and metric values without log_samples: the runner Job's
    `scores_` files, which make any finished Evaluation a baseline to compare with."""
    system_instruction: str | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool | None = True
    """None where lm-eval's command line leaves it unset (no chat template): off."""
    gen_kwargs: Mapping[str, Any] | None = None
    predict_only: bool = False
    random_seed: int | None = DEFAULT_RANDOM_SEED
    numpy_random_seed: int | None = DEFAULT_OTHER_SEED
    torch_random_seed: int | None = DEFAULT_OTHER_SEED
    fewshot_random_seed: int | None = DEFAULT_OTHER_SEED
    confirm_run_unsafe_code: bool = False
    metadata: Mapping[str, Any] | None = None
    include_path: Sequence[str] | str | None = None
    """Extra task folders; used only when the engine is given no task index."""
    sentinels: SentinelSettings = dataclasses.field(default_factory=SentinelSettings)
    """The plausibility checks of the run's own scores (`assay.runner.scoring.sentinels`)."""
    sequential: SequentialSettings | None = None
    """Score in chunks and stop a task once its answer is known; None: every document, in order."""
