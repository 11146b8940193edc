"""Everything one evaluation run is told, as one typed object.

lm-eval's `simple_evaluate` takes 31 keyword arguments; Assay keeps that signature at the
edge (`evaluator.simple_evaluate`) for drop-in use, and passes this record inside.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence, Union

DEFAULT_RANDOM_SEED = 0
DEFAULT_OTHER_SEED = 1234
DEFAULT_BOOTSTRAP_ITERS = 100000

BatchSize = Union[int, str]  # an int, "auto" or "auto:N"


@dataclasses.dataclass
class EvalOptions:
    model: Any = "hf"
    """A registered model name, or an already built LM instance."""
    model_args: Mapping[str, Any] | str | None = None
    tasks: Sequence[Any] = ()
    """Task or group names, YAML paths, config dicts, or Task objects."""
    num_fewshot: int | None = None
    batch_size: BatchSize | None = None
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
    system_instruction: str | None = None
    apply_chat_template: bool | str = False
    fewshot_as_multiturn: bool = True
    gen_kwargs: Mapping[str, Any] | str | None = None
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
    progress: Any = None
    """Optional callable(done: int, total: int) for status reporting (rank 0 only)."""
