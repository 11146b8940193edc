"""`batch_size`: a positive integer, `auto`, or `auto:N`, parsed once wherever it enters.

It enters from the command line, from an Evaluation's `spec.batchSize`, from
`simple_evaluate` and from a model's own model_args. Each used to check it its own way
(`0` and `auto:0` passed the command line's check and failed in the model). This module
sits below the spec and the runner so that all of them use this one parser; what comes
out travels typed to the model backend. The forms are exactly those the Evaluation CRD
accepts, so no entry point takes a value the API server refuses (tests/cli/test_validator_corpus.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TypeGuard

from assay.errors import UserError

# The accepted forms are exactly the CRD's (deploy/crds/evaluations.assay.dev.yaml,
# spec.batchSize): an int-or-string, at most 32 characters, whose CEL rule is
#   type(self) == int ? self >= 1 : self.matches('^(auto(:[1-9][0-9]*)?|[1-9][0-9]*)$')
# so "08", " 8", "auto:01" and "auto:0" are refused everywhere, not only by the API server.
# fullmatch, not `$`: Python's `$` also matches before a final newline, RE2's does not.
_FORM = re.compile(r"auto(?::([1-9][0-9]*))?|([1-9][0-9]*)")
_MAX_LENGTH = 32
_INT64_MAX = 2**63 - 1  # a larger JSON number is no Kubernetes integer
FORMS = 'a positive integer without leading zeros (e.g. 8), "auto", or "auto:N" with N such an integer (e.g. "auto:4")'


@dataclasses.dataclass(frozen=True)
class BatchSize:
    fixed: int | None
    """Every batch's size; None for auto (the largest size that fits, found by trial)."""
    schedule: int = 1
    """auto:N: the size is found again N times over the run (lm-eval's batch_schedule)."""
    given: int | str = 1
    """As the user wrote it: lm-eval echoes that into the results' `config.batch_size`."""

    @property
    def auto(self) -> bool:
        return self.fixed is None

    def __str__(self) -> str:
        return str(self.given)

    @classmethod
    def parse(cls, value: object, *, source: str = "batch_size", error: type[UserError] = UserError) -> BatchSize:
        """`value` as a BatchSize; `error` names `source` (a flag, a spec field, a model_arg)."""
        if isinstance(value, BatchSize):
            return value
        if _is_int(value) and 1 <= value <= _INT64_MAX:
            return cls(value, 1, value)
        text = value if isinstance(value, str) and len(value) <= _MAX_LENGTH else ""
        form = _FORM.fullmatch(text)
        if form is None:
            raise error(f"{source} {value!r} is not a batch size; use {FORMS}.")
        if form.group(2) is not None:
            return cls(int(form.group(2)), 1, text)
        return cls(None, int(form.group(1) or 1), text)


def parse_max(value: object, *, source: str = "max_batch_size", error: type[UserError] = UserError) -> int | None:
    """`max_batch_size`: None, or an integer from 1 (the CRD's spec.maxBatchSize: integer, minimum 1).

    0 used to mean "the default 64" to the hf backend and -3 reached vLLM's engine as is.
    """
    if value is None:
        return None
    if not (_is_int(value) and 1 <= value <= _INT64_MAX):
        raise error(f"{source} {value!r} is not a batch size limit; use a positive integer (e.g. 64), or leave it out.")
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
