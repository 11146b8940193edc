"""Errors a user can cause.

Anything raised as `UserError` reaches the terminal as one sentence (no traceback) and
exit code 1; `UsageError` (a bad flag or flag combination) exits with 2 like argparse.
Both live below the runner and the operator so that every layer can raise them, and so
does `suggest`, the "did you mean" every unknown-name message ends with.
"""

import difflib
from collections.abc import Collection


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
