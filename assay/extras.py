"""The sentence a command says when an optional package it needs is missing.

Assay's core installs without torch, datasets or the Kubernetes client; each command that needs
more names its extra (pyproject's [project.optional-dependencies]) in one sentence and exits
non-zero, instead of a ModuleNotFoundError traceback from deep inside the import.
"""

import contextlib
import functools
import importlib.util
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from assay.errors import UserError


def install_sentence(what: str, extra: str) -> str:
    """ "--model hf needs the 'hf' extra: pip install -e '/path/to/assay[hf]'." The package index has
    no `assay` distribution (and other projects own `assay-*` names), so the command installs the
    extra from the checkout: by its path when this code runs from one (an editable install, or
    `python -m assay` in the checkout), otherwise from the checkout's folder by `.`."""
    return f"{what} needs the '{extra}' extra: {install_command(extra)}."


def install_command(extra: str) -> str:
    """The shell command that installs `extra`, quoted so that bash and zsh read the brackets literally."""
    root = checkout()
    if root is None:
        return f"from the Assay checkout, pip install -e '.[{extra}]'"
    return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"


@functools.cache
def checkout() -> Path | None:
    """The Assay checkout this package is imported from, or None for an installed wheel (whose
    parent folder is site-packages, with no Assay pyproject.toml)."""
    root = Path(__file__).resolve().parent.parent
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(r'^name = "assay"$', pyproject, re.MULTILINE) else None


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
