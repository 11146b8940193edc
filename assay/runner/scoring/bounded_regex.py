"""A regex from a task file runs within a time bound.

Task files keep Python `re` semantics (lm-eval's filters and metrics use `re`, and the scores
must match), so the engine cannot be swapped for a linear-time one; a pattern such as
`(a+)+$` then backtracks exponentially on a response of 40 `a`s and a `b`. Each match a task
file's pattern drives runs under `assay.runner.deadline` instead: past `REGEX_SECONDS` on one
text, the run stops with one sentence naming the pattern (the tenant's own text, never the
response's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from assay.errors import UserError
from assay.runner.deadline import DeadlineExceeded, deadline

REGEX_SECONDS = 2.0
"""Per match of one pattern on one text: lm-eval's patterns take microseconds on a response."""


class RegexTooSlow(UserError):
    """A task file's regex ran past its bound; `pattern` is the task's own text."""

    def __init__(self, pattern: str, where: str = "") -> None:
        shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        super().__init__(
            f"{where}The regex {shown!r} ran past {REGEX_SECONDS:g} s on one text (nested repetition, like `(a+)+$`, "
            "backtracks without end): rewrite it so that each character can be matched one way only."
        )
        self.pattern = pattern


@contextlib.contextmanager
def regex_bound(pattern: str) -> Iterator[None]:
    """Run the block's matching of `pattern` within REGEX_SECONDS; RegexTooSlow past it."""
    try:
        with deadline(REGEX_SECONDS):
            yield
    except DeadlineExceeded:
        raise RegexTooSlow(pattern) from None
