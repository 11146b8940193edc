"""Phase and conditions of an Evaluation, as pure functions of what was observed.

Status follows Kubernetes API conventions so that standard tools work on it:
`kubectl wait --for=condition=Succeeded evaluation/x`, Argo CD health checks and
`kubectl get` all read `conditions` (type/status/reason/message/lastTransitionTime/
observedGeneration). The condition types are always present once accepted, so a
wait on `Failed`, `Succeeded` or `Ready` never hangs on a missing condition.

`Ready`, `Reconciling` and `Stalled` summarise the phase by kstatus conventions (the
library Flux's health checks and `kubectl wait` users rely on): Ready is "normal-true"
(True once the scores are in), Reconciling and Stalled "abnormal-true" (True while the
run is under way, True once it failed for good); Ready == not Reconciling and not Stalled.

    (new spec) --valid--> Pending/Accepted --pods ready--> Running --Job Complete--> Succeeded
         \\--invalid--> Failed(InvalidSpec)   |               \\--Job Failed (BackoffLimitExceeded,
                                              |                 DeadlineExceeded, PodFailurePolicy, OOMKilled)--> Failed
                                              \\--pods stuck: Pending with the reason (ImagePullBackOff,
                                                 Unschedulable, FailedCreate, ...); InvalidImageName, or a
                                                 pull failing past the timeout (ImagePullFailed)--> Failed

`status.reason` repeats the reason of the latest change (printer column Reason), so that
`kubectl get evals` says why an Evaluation is Pending or Failed.

No Succeeded without scores: a Complete Job without `status.results` is Failed with reason
ResultsNotRecorded (see `outcome`), and OutputWritten tells whether the files were written.

Each function returns a merge patch for `status` (only what changes), never touches
the API, and takes `now` so tests need no clock. The patch mirroring the runner Job
(phase, reason, the runner's last word) is `job_status`'s, built from these conditions.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from assay.operator.decide import outcome, regression, trust

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL_PHASES = (SUCCEEDED, FAILED)

ACCEPTED = "Accepted"
READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
CONDITION_TYPES = (ACCEPTED, RUNNING, SUCCEEDED, FAILED, READY, RECONCILING, STALLED)
RESULTS_NOT_RECORDED, OUTPUT_WRITTEN = outcome.RESULTS_NOT_RECORDED, outcome.OUTPUT_WRITTEN

Condition = dict[str, Any]


def timestamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Condition] | None,
    *,
    type: str,
    status: bool | None,
    reason: str,
    message: str,
    now: datetime.datetime,
    generation: int,
) -> list[Condition]:
    """A copy of `conditions` with one set (status None: Unknown); lastTransitionTime moves only when status flips."""
    value = "Unknown" if status is None else "True" if status else "False"
    out: list[Condition] = []
    found = False
    for condition in conditions or ():
        if condition.get("type") != type:
            out.append(dict(condition))
            continue
        found = True
        since = condition.get("lastTransitionTime") if condition.get("status") == value else None
        out.append(_condition(type, value, reason, message, since or timestamp(now), generation))
    if not found:
        out.append(_condition(type, value, reason, message, timestamp(now), generation))
    order = {name: i for i, name in enumerate(CONDITION_TYPES)}
    return sorted(out, key=lambda c: order.get(c["type"], len(order)))


def _condition(type: str, status: str, reason: str, message: str, since: str, generation: int) -> Condition:
    return {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    }


def get_condition(status: Mapping[str, Any] | None, type: str) -> Condition | None:
    for condition in (status or {}).get("conditions") or ():
        if condition.get("type") == type:
            return dict(condition)
    return None


def with_all(
    status: Mapping[str, Any] | None,
    *,
    now: datetime.datetime,
    generation: int,
    values: Mapping[str, tuple[bool | None, str, str]],
) -> list[Condition]:
    """`status`'s conditions with each of `values` (type: status, reason, message) set."""
    conditions = list((status or {}).get("conditions") or ())
    for type, (value, reason, message) in values.items():
        conditions = set_condition(
            conditions, type=type, status=value, reason=reason, message=message, now=now, generation=generation
        )
    return conditions


def summary(phase: str, *, reason: str, message: str) -> dict[str, tuple[bool, str, str]]:
    """The kstatus conditions (Ready, Reconciling, Stalled) for a phase, its reason and message."""
    if phase == SUCCEEDED:
        return {
            READY: (True, reason, message),
            RECONCILING: (False, reason, "Finished."),
            STALLED: (False, reason, "Finished."),
        }
    if phase == FAILED:
        return {
            READY: (False, reason, message),
            RECONCILING: (False, reason, "Finished."),
            STALLED: (True, reason, message),
        }
    return {
        READY: (False, reason, message),
        RECONCILING: (True, reason, message),
        STALLED: (False, reason, "Not failed."),
    }


def rejected(
    status: Mapping[str, Any] | None, *, message: str, generation: int, now: datetime.datetime
) -> dict[str, Any]:
    """The spec cannot run (schema-valid but unknown task, unknown model, ...)."""
    return {
        "phase": FAILED,
        "observedGeneration": generation,
        "reason": "InvalidSpec",
        "message": message,
        "conditions": with_all(
            status,
            now=now,
            generation=generation,
            values={
                ACCEPTED: (False, "InvalidSpec", message),
                RUNNING: (False, "InvalidSpec", "Not started: the spec is invalid."),
                SUCCEEDED: (False, "InvalidSpec", "Not started: the spec is invalid."),
                FAILED: (True, "InvalidSpec", message),
                **summary(FAILED, reason="InvalidSpec", message=message),
            },
        ),
    }


def accepted(
    status: Mapping[str, Any] | None,
    *,
    job_name: str,
    generation: int,
    now: datetime.datetime,
    new_run: bool,
) -> dict[str, Any]:
    """A valid spec whose Job exists; a new run clears the previous run's outcome."""
    message = f"Job {job_name} created." if new_run else f"Job {job_name} adopted."
    patch: dict[str, Any] = {"observedGeneration": generation, "jobName": job_name}
    if new_run:
        patch.update(
            {
                "phase": PENDING,
                "reason": PODS_PENDING,
                "message": message,
                "startTime": None,
                "completionTime": None,
                "progress": None,
                "results": None,
                "groups": None,
                "nSamples": None,
                "versions": None,
                "runnerMessage": None,
                "outputFiles": None,
                "comparison": None,
                "sentinels": None,
                "timing": None,
            }
        )
        # The previous run's files and comparison are not this run's.
        status = {
            **(status or {}),
            "conditions": [
                c
                for c in (status or {}).get("conditions") or ()
                if c.get("type") not in (OUTPUT_WRITTEN, regression.REGRESSED, trust.SCORES_TRUSTED)
            ],
        }
        values = {
            ACCEPTED: (True, "SpecValid", message),
            # What `job_status.from_job` says of the new Job, so that its first events change nothing.
            RUNNING: (False, PODS_PENDING, waiting_for_pods(job_name)),
            SUCCEEDED: (False, PODS_PENDING, "Not finished."),
            FAILED: (False, PODS_PENDING, "Not failed."),
            **summary(PENDING, reason=PODS_PENDING, message=waiting_for_pods(job_name)),
        }
    else:
        # Same run (operator restart, suspend toggled): keep the original acceptance note.
        previous = get_condition(status, ACCEPTED)
        if previous and previous.get("status") == "True":
            message = str(previous.get("message") or message)
        values = {ACCEPTED: (True, "SpecValid", message)}
    patch["conditions"] = with_all(status, now=now, generation=generation, values=values)
    return patch


PODS_PENDING = "PodsPending"
"""An unfinished run whose pods are not running, with no problem known (yet)."""


def waiting_for_pods(job_name: str) -> str:
    return f"Waiting for the runner pods of {job_name} to start."


def finished_now(old: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> str | None:
    """The terminal phase this patch enters, if it enters one (for counters and Events)."""
    new_phase = patch.get("phase")
    if new_phase in TERMINAL_PHASES and (old or {}).get("phase") != new_phase:
        return str(new_phase)
    return None


def duration_seconds(status: Mapping[str, Any] | None) -> float | None:
    status = status or {}
    start, end = status.get("startTime"), status.get("completionTime")
    if not start or not end:
        return None
    return (_parse(end) - _parse(start)).total_seconds()


def _parse(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
