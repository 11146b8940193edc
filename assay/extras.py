"""The sentence a command says when an optional package it needs is missing.

Assay's core installs without torch, datasets or the Kubernetes client; each command that needs
more names its extra (pyproject's [project.optional-dependencies]) in one sentence and exits
non-zero, instead of a ModuleNotFoundError traceback from deep inside the import.
"""

import contextlib
import importlib.util
from collections.abc import Iterator

from assay.errors import UserError


def install_sentence(what: str, extra: str) -> str:
    """'--model hf needs the 'hf' extra: pip install 'assay[hf]'.'"""
    return f"{what} needs the '{extra}' extra: pip install 'assay[{extra}]'."


@contextlib.contextmanager
def needs_extra(what: str, extra: str, *modules: str) -> Iterator[None]:
    """A ModuleNotFoundError for one of `modules` (top-level names) inside the block becomes the
    UserError naming `extra`; any other missing module is a bug and keeps its traceback."""
    try:
        yield
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] not in modules:
            raise
        raise UserError(install_sentence(what, extra)) from None


def require_installed(what: str, extra: str, *modules: str) -> None:
    """The same UserError, found without importing anything (for checks before the slow part of a run)."""
    if any(importlib.util.find_spec(module) is None for module in modules):
        raise UserError(install_sentence(what, extra))
