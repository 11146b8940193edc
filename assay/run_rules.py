"""lm-eval's rules between run options, written once.

They hold wherever a run is described: `assay run`'s flags, an Evaluation's spec, and
`simple_evaluate`'s keywords. Each of those applies them to its own input and words the
error with its own names; this module sits below the spec and the runner so that all
of them apply the same rule. The batch size's forms are `assay.batch_size`'s.
"""

from __future__ import annotations

import math
from typing import Any

from assay.errors import UsageError, UserError

MIN_NUM_FEWSHOT = 0


def log_samples(*, log_samples: bool, predict_only: bool) -> bool:
    """--predict_only implies --log_samples: the predictions are the output."""
    return bool(log_samples or predict_only)


def check_limit_or_samples(
    limit: Any, samples: Any, *, names: tuple[str, str] = ("--limit", "--samples"), error: type[UserError] = UsageError
) -> None:
    """--limit and --samples both choose documents: only one of them may be given."""
    if limit is not None and samples is not None:
        raise error(f"{names[0]} and {names[1]} exclude each other: keep one of them.")


def fewshot_as_multiturn(
    given: bool | None, *, apply_chat_template: bool | str, refusal: str, error: type[UserError] = UsageError
) -> bool | None:
    """Few-shot examples as chat turns need a chat template; left unset, they are on exactly
    when one is applied (lm-eval's EvaluatorConfig). `refusal` is the entry point's sentence."""
    if given and not apply_chat_template:
        raise error(refusal)
    if given is None and apply_chat_template:
        return True
    return given


def limit_is_valid(limit: Any) -> bool:
    """A count of documents per task, or a fraction below 1: above 0 and finite.

    lm-eval runs `--limit 0` (or below) silently: it evaluates nothing and prints an empty table.
    """
    return is_number(limit) and 0 < limit < math.inf


def limit_is_count_or_fraction(limit: Any) -> bool:
    """A valid limit that is a whole count or a fraction below 1. lm-eval runs `--limit 1.5` as
    int(1.5), one document per task, without a word; the CRD's CEL rule on spec.limit says the same."""
    return limit_is_valid(limit) and (limit < 1 or int(limit) == limit)


def num_fewshot_is_valid(shots: Any) -> bool:
    """A whole number of examples from 0: lm-eval builds prompts nobody asked for below that."""
    return is_number(shots) and int(shots) == shots and shots >= MIN_NUM_FEWSHOT


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
