"""Errors a user can cause.

Anything raised as `UserError` reaches the terminal as one sentence (no traceback) and
exit code 1; `UsageError` (a bad flag or flag combination) exits with 2 like argparse.
Both live below the runner and the operator so that every layer can raise them, and so
does `suggest`, the "did you mean" every unknown-name message ends with, and `Problem`, an
error that a check (`assay validate`) records and goes on past so that one run shows them all
(`raise_first` for a caller that stops at the first).
"""

import dataclasses
import difflib
from collections.abc import Collection, Sequence


def suggest(name: str, known: Collection[str]) -> str:
    """' Did you mean x, y?' or '' — appended to unknown-name errors."""
    close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(close)}?" if close else ""


class UserError(Exception):
    """A problem with the user's input: the message names the input and the fix."""

    exit_code = 1


class UsageError(UserError):
    """A bad command-line flag or combination of flags."""

    exit_code = 2


class DataError(UserError):
    """A dataset that cannot be reached or read: the user fixes it, but a runner Job
    reports it as a data failure (retryable) rather than a configuration error."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """A user's error found by a check that goes on looking: the sentence, and where it is when known."""

    message: str
    file: str | None = None
    line: int | None = None
    """1-based, in `file`."""
    field: str | None = None
    """The spec field it concerns (`model`, `modelArgs`, `tasks`), when a spec was checked."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file and self.line else self.file
        return f"{where}: {self.message}" if where else self.message


def raise_first(problems: Sequence[Problem]) -> None:
    """For a caller that stops at an error (`assay run`, the runner pod): the first problem, and how many more there are."""
    if problems:
        more = len(problems) - 1
        more_text = (
            f" ({more} more {'problem' if more == 1 else 'problems'}: `assay validate` lists them all.)" if more else ""
        )
        raise UserError(f"{problems[0]}{more_text}")
