"""When an Evaluation's run must be decided: a level, read from the newest body the watches showed.

Why not kopf's create/update/resume handlers: kopf keeps each object's last handled spec
and its handler progress in annotations. Under a burst that was one more PATCH per
Evaluation (and one more watch event to process), and on every watch event of every
Evaluation a deep copy of its whole body to compare with: a fifth of the operator's CPU
(py-spy, 300 Evaluations in one burst). The status already records what was decided —
`observedGeneration` and `rerunToken` name the spec and the token of the current run — so
a run must be decided when

- its generation differs from `status.observedGeneration` (new, or its spec changed), or
- its `evaluations.assay.dev/rerun` annotation differs from `status.rerunToken`, or
- the operator sees it for the first time since it started and its run is unfinished (what
  kopf's resume handler was for: a child lost while no operator ran is made again).

`runtime.decisions` asks these questions of every watch event and runs the decisions.
"""

from __future__ import annotations

from assay.operator import objects
from assay.operator.build import builders
from assay.operator.decide import conditions

Body = objects.Evaluation
Key = tuple[str, str]


def key_of(body: Body) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def finished(body: Body) -> bool:
    """Whether the run its spec and token ask for has ended (succeeded, failed, or was refused)."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    return (
        status.get("observedGeneration") == int(meta.get("generation", 1))
        and status.get("phase") in conditions.TERMINAL_PHASES
        and status.get("rerunToken") == builders.rerun_token(body)
    )


def needs_decision(body: Body, *, first_sight: bool) -> bool:
    """Whether the newest `body` asks for a run decision (see the module's docstring)."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    status = body.get("status") or {}
    if status.get("observedGeneration") != int(meta.get("generation", 1)):
        return True
    # rerun_token falls back to the status's token: a removed annotation asks for nothing.
    if builders.rerun_token(body) != status.get("rerunToken"):
        return True
    return first_sight and not finished(body)


def unfinished(body: Body) -> bool:
    """Whether a failed decision is still worth retrying: its run has not ended and the Evaluation stays."""
    return not (body.get("metadata") or {}).get("deletionTimestamp") and not finished(body)
