"""What `assay run` logs to the terminal: by default, as lm-eval does, its own INFO messages.

lm-eval's command line shows its INFO records unless told otherwise: where the results and
samples went, what the response cache answered, ... . `assay run` does the same for the
`assay` logger, so that a plain run says what it did; other libraries keep Python's
default (warnings and up). Under torchrun only rank 0 shows them: every rank runs the same
steps, and one account of them is enough (the others still show warnings). A level given
by --verbosity or LMEVAL_LOG_LEVEL applies to every logger instead, as in lm-eval.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from assay.errors import UsageError

FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def level_from(verbosity: str | None) -> int | None:
    """The log level --verbosity (else LMEVAL_LOG_LEVEL) names; None when neither is set."""
    name = verbosity or os.environ.get("LMEVAL_LOG_LEVEL")
    if not name:
        return None
    level = logging.getLevelName(name.upper())
    if not isinstance(level, int):
        raise UsageError(f"--verbosity {name!r} is not a log level; use DEBUG, INFO, WARNING, ERROR or CRITICAL.")
    return level


@contextlib.contextmanager
def showing(level: int | None, *, rank0: bool) -> Iterator[None]:
    """For one run: every logger at `level` if one was given, else Assay's INFO records on rank 0."""
    if level is not None:
        logging.basicConfig(level=level, format=FORMAT)
        logging.getLogger().setLevel(level)
        yield
        return
    logger = logging.getLogger("assay")
    previous = logger.level
    handler: logging.Handler | None = None
    if rank0 and (previous == logging.NOTSET or previous > logging.INFO):
        logger.setLevel(logging.INFO)
    if rank0 and not logging.getLogger().handlers:
        # A plain command line: no handler would show INFO records (Python's last resort
        # shows warnings only). A program that configured logging keeps its own handlers.
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    try:
        yield
    finally:
        logger.setLevel(previous)
        if handler is not None:
            logger.removeHandler(handler)


def quiet_libraries() -> None:
    """tokenizers' fork warning off (a run forks no tokenizer worker that needs it). Without torch (an API-only install), transformers' import advises "PyTorch was not found.
    Models won't be available ...": an API run counts tokens with its tokenizer and needs no
    models, so the advice is noise there. With torch installed transformers gives none of it,
    and its advisory warnings stay on."""
    import importlib.util

    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if importlib.util.find_spec("torch") is None:
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
