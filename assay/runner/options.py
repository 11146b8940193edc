"""Everything one evaluation run is told, as one frozen record, checked once.

The command line (`assay run`), an Evaluation's spec (the runner Job) and lm-eval's
`simple_evaluate(...)` keywords each build one with `EvalOptions.build`; the evaluator
and the model backends read it and never re-parse a value: the batch size arrives as a
`BatchSize`, model_args and gen_kwargs as mappings.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from assay import run_rules
from assay.batch_size import BatchSize
from assay.errors import UsageError

if TYPE_CHECKING:
    from assay import spec as spec_module

DEFAULT_RANDOM_SEED = 0
DEFAULT_OTHER_SEED = 1234
DEFAULT_BOOTSTRAP_ITERS = 100000

ProgressFn = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalOptions:
    model: Any = "hf"
    """A registered model name, or an already built LM instance."""
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
    system_instruction: str | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool = True
    gen_kwargs: Mapping[str, Any] | None = None
    predict_only: bool = False
    random_seed: int | None = DEFAULT_RANDOM_SEED
    numpy_random_seed: int | None = DEFAULT_OTHER_SEED
    torch_random_seed: int | None = DEFAULT_OTHER_SEED
    fewshot_random_seed: int | None = DEFAULT_OTHER_SEED
    confirm_run_unsafe_code: bool = False
    metadata: Mapping[str, Any] | None = None
    include_path: Sequence[str] | str | None = None
    task_manager: Any = None
    """A TaskManager to reuse; built from include_path when None."""
    progress: ProgressFn | None = None
    """Called with (done, total) requests for status reporting (rank 0 only)."""

    @classmethod
    def build(
        cls,
        *,
        model_args: Mapping[str, Any] | str | None = None,
        batch_size: int | str | BatchSize | None = None,
        gen_kwargs: Mapping[str, Any] | str | None = None,
        log_samples: bool = True,
        predict_only: bool = False,
        limit: int | float | None = None,
        samples: Mapping[str, Sequence[int]] | None = None,
        tasks: Sequence[Any] | None = (),
        **rest: Any,
    ) -> "EvalOptions":
        """Check and normalise once; errors name lm-eval's flags (UsageError, exit 2)."""
        from assay.runner.models.model_args import parse_model_args

        run_rules.check_limit_or_samples(limit, samples)
        parsed_gen_kwargs = parse_model_args(gen_kwargs, flag="--gen_kwargs") or None if isinstance(gen_kwargs, str) else gen_kwargs
        return cls(
            model_args=model_args,
            parsed_model_args=parse_model_args(model_args) if isinstance(model_args, str) else dict(model_args or {}),
            batch_size=None if batch_size is None else BatchSize.parse(batch_size, source="--batch_size", error=UsageError),
            gen_kwargs=parsed_gen_kwargs,
            log_samples=run_rules.log_samples(log_samples=log_samples, predict_only=predict_only),
            predict_only=predict_only,
            limit=limit,
            samples=samples,
            tasks=tuple(tasks or ()),
            **rest,
        )

    @classmethod
    def from_spec(cls, spec: spec_module.Evaluation, **runtime: Any) -> "EvalOptions":
        """The runner Job's options: the spec's run settings plus what the pod adds (cache, progress)."""
        return cls.build(**spec.to_run_kwargs(), **runtime)
