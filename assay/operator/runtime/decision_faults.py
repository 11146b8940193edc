"""A decision that raised: tried again when the API was the trouble, refused once when it was not.

`decisions` tries a failed decision again after a back-off, which is right for what passes:
an API server that timed out, refused a connection or answered 5xx or 409. An error that
comes from the Evaluation itself (a RecursionError in deciding a deeply nested spec, any
exception a tenant's input drives the operator's own code into) would be raised again by
every retry, for ever, and again at every operator start. Such a fault ends the run once,
as InvalidSpec with a fixed sentence (never the exception's text: it may quote the
tenant's input), a Failed condition and a Warning Event; the log keeps the traceback.
"""

from __future__ import annotations

import datetime
import logging

from assay.kube import api_errors, api_session
from assay.operator import objects
from assay.operator.decide import reconcile
from assay.operator.kube import kube
from assay.operator.runtime import observe
from assay.operator.runtime.state import OperatorState

logger = logging.getLogger(__name__)

TRANSIENT = (api_errors.ApiError, *api_session.UNREACHABLE)
"""What the API client raises when the API server (or the way to it) is the trouble."""


def transient(error: BaseException) -> bool:
    """Whether a retry of the decision may go otherwise."""
    return isinstance(error, TRANSIENT)


def message(error: BaseException) -> str:
    """The fixed sentence for a decision that raised `error`: its type only, never its text."""
    return (
        f"The operator could not decide this run: checking it raised an internal error ({type(error).__name__}) "
        "that a retry would raise again; make the spec and its task sources smaller and less nested, "
        "or ask the cluster admin to read the operator's log."
    )


def record(evaluation: objects.Evaluation, error: BaseException, *, state: OperatorState) -> None:
    """End the run of `evaluation` as refused with `message(error)` (in a handler thread; raises what the API raises)."""
    meta = evaluation["metadata"]
    text = message(error)
    status = reconcile.rejection(evaluation, text, now=datetime.datetime.now(datetime.timezone.utc))
    if status:
        written = kube.patch_evaluation_status(namespace=meta["namespace"], name=meta["name"], status=status)
        observe.seen(state, "evaluations", written)
        observe.emitter(state)(evaluation, type="Warning", reason="InvalidSpec", message=text)
    logger.error(
        "Deciding %s/%s raised %s; refused it rather than retry.",
        meta.get("namespace"),
        meta.get("name"),
        type(error).__name__,
        exc_info=error,
    )
