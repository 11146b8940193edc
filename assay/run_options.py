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
from typing import Any, Mapping, Sequence

from assay.batch_size import BatchSize

DEFAULT_RANDOM_SEED = 0
DEFAULT_OTHER_SEED = 1234
DEFAULT_BOOTSTRAP_ITERS = 100000


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
