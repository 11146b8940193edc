"""lm-eval's rules between run options, written once.

They hold wherever a run is described: `assay run`'s flags, an Evaluation's spec, and
`simple_evaluate`'s keywords. Each of those applies them to its own input and words the
error with its own names; this module sits below the spec and the runner so that all
of them apply the same rule.
"""

from __future__ import annotations

from typing import Any

from assay.errors import UsageError, UserError


def log_samples(*, log_samples: bool, predict_only: bool) -> bool:
    """--predict_only implies --log_samples: the predictions are the output."""
    return bool(log_samples or predict_only)


def check_limit_or_samples(
    limit: Any, samples: Any, *, names: tuple[str, str] = ("--limit", "--samples"), error: type[UserError] = UsageError
) -> None:
    """--limit and --samples both choose documents: only one of them may be given."""
    if limit is not None and samples is not None:
        raise error(f"{names[0]} and {names[1]} exclude each other: keep one of them.")
