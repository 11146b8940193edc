"""`batch_size`: a positive integer, `auto`, or `auto:N`, parsed once wherever it enters.

It enters from the command line, from an Evaluation's `spec.batchSize`, from
`simple_evaluate` and from a model's own model_args. Each used to check it its own way
(`0` and `auto:0` passed the command line's check and failed in the model). This module
sits below the spec and the runner so that all of them use this one parser; what comes
out travels typed to the model backend.
"""

from __future__ import annotations

import dataclasses
import re

from assay.errors import UserError

_AUTO = re.compile(r"^auto(?::([0-9]+))?$")


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
    def parse(cls, value: "int | str | BatchSize", *, source: str = "batch_size", error: type[UserError] = UserError) -> "BatchSize":
        """`value` as a BatchSize; `error` names `source` (a flag, a spec field, a model_arg)."""
        if isinstance(value, BatchSize):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(value, 1, value)
        text = value.strip() if isinstance(value, str) else ""
        if text.isdigit() and int(text) >= 1:
            return cls(int(text), 1, value)
        auto = _AUTO.match(text)
        if auto is not None and (auto.group(1) is None or int(auto.group(1)) >= 1):
            return cls(None, int(auto.group(1) or 1), value)
        raise error(f"{source} must be a positive integer, \"auto\" or \"auto:N\" with N ≥ 1, not {value!r}.")
