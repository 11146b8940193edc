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
the API, and takes `now` so tests need no clock.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping, Sequence

from assay import echoed_text
from assay.operator import objects
from assay.operator.build.builders import KUEUE_QUEUE_LABEL
from assay.operator.decide import outcome, regression
from assay.operator.decide.diagnosis import REASONS as PROBLEM_REASONS
from assay.operator.decide.diagnosis import Problem

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL_PHASES = (SUCCEEDED, FAILED)

ACCEPTED = "Accepted"
READY, RECONCILING, STALLED = "Ready", "Reconciling", "Stalled"
CONDITION_TYPES = (ACCEPTED, RUNNING, SUCCEEDED, FAILED, READY, RECONCILING, STALLED)
RESULTS_NOT_RECORDED, OUTPUT_WRITTEN = outcome.RESULTS_NOT_RECORDED, outcome.OUTPUT_WRITTEN
RUNNER_MESSAGE_CHARS = 1024
"""Bound on the runner's last word as the operator repeats it (the runner bounds it too)."""

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


def _with_all(
    status: Mapping[str, Any] | None,
    *,
    now: datetime.datetime,
    generation: int,
    values: Mapping[str, tuple[bool | None, str, str]],
) -> list[Condition]:
    conditions = list((status or {}).get("conditions") or ())
    for type, (value, reason, message) in values.items():
        conditions = set_condition(conditions, type=type, status=value, reason=reason, message=message,
                                   now=now, generation=generation)  # fmt: skip
    return conditions


def summary(phase: str, *, reason: str, message: str) -> dict[str, tuple[bool, str, str]]:
    """The kstatus conditions (Ready, Reconciling, Stalled) for a phase, its reason and message."""
    if phase == SUCCEEDED:
        return {READY: (True, reason, message), RECONCILING: (False, reason, "Finished."),
                STALLED: (False, reason, "Finished.")}  # fmt: skip
    if phase == FAILED:
        return {READY: (False, reason, message), RECONCILING: (False, reason, "Finished."),
                STALLED: (True, reason, message)}  # fmt: skip
    return {READY: (False, reason, message), RECONCILING: (True, reason, message),
            STALLED: (False, reason, "Not failed.")}  # fmt: skip


def rejected(status: Mapping[str, Any] | None, *, message: str, generation: int, now: datetime.datetime) -> dict[str, Any]:
    """The spec cannot run (schema-valid but unknown task, unknown model, ...)."""
    return {
        "phase": FAILED,
        "observedGeneration": generation,
        "reason": "InvalidSpec",
        "message": message,
        "conditions": _with_all(status, now=now, generation=generation, values={
            ACCEPTED: (False, "InvalidSpec", message),
            RUNNING: (False, "InvalidSpec", "Not started: the spec is invalid."),
            SUCCEEDED: (False, "InvalidSpec", "Not started: the spec is invalid."),
            FAILED: (True, "InvalidSpec", message),
            **summary(FAILED, reason="InvalidSpec", message=message),
        }),  # fmt: skip
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
        patch.update({
            "phase": PENDING, "reason": PODS_PENDING, "message": message, "startTime": None, "completionTime": None,
            "progress": None, "results": None, "groups": None, "nSamples": None, "versions": None,
            "runnerMessage": None, "outputFiles": None, "comparison": None, "timing": None,
        })  # fmt: skip
        # The previous run's files and comparison are not this run's.
        status = {**(status or {}), "conditions": [c for c in (status or {}).get("conditions") or ()
                                                   if c.get("type") not in (OUTPUT_WRITTEN, regression.REGRESSED)]}  # fmt: skip
        values = {
            ACCEPTED: (True, "SpecValid", message),
            # What `from_job` says of the new Job, so that its first events change nothing.
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
    patch["conditions"] = _with_all(status, now=now, generation=generation, values=values)
    return patch


@dataclasses.dataclass(frozen=True)
class JobState:
    """What one runner Job says about its run."""

    phase: str
    reason: str
    message: str
    start_time: str | None = None
    completion_time: str | None = None


def job_state(job: objects.Job) -> JobState:
    """Read a Job's status (conditions, counters, times) into an Evaluation phase."""
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    name = (job.get("metadata") or {}).get("name", "the Job")
    start = status.get("startTime")
    conditions = {c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"}
    if "Failed" in conditions:
        c = conditions["Failed"]
        reason = c.get("reason") or "JobFailed"
        detail = c.get("message")
        if reason == "DeadlineExceeded" and spec.get("activeDeadlineSeconds"):
            detail = f"{spec['activeDeadlineSeconds']} s"
        if reason == "PodFailurePolicy" and outcome.failed_unrecorded(detail):
            reason, detail = RESULTS_NOT_RECORDED, None
        return JobState(FAILED, reason, _job_message(name, reason, detail), start,
                        c.get("lastTransitionTime"))  # fmt: skip
    if "Complete" in conditions:
        c = conditions["Complete"]
        return JobState(SUCCEEDED, "JobComplete", f"{name} completed.", start,
                        status.get("completionTime") or c.get("lastTransitionTime"))  # fmt: skip
    if "FailureTarget" in conditions:
        c = conditions["FailureTarget"]
        return JobState(RUNNING, "Terminating", _job_message(name, c.get("reason") or "Failing", c.get("message")), start)
    if spec.get("suspend") or "Suspended" in conditions:
        queue = ((job.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        if queue:
            return JobState(PENDING, "Suspended", f"{name} waits for Kueue to admit it from queue {queue}.", start)
        return JobState(PENDING, "Suspended", f"{name} is suspended.", start)
    ready = status.get("ready")
    active = int(status.get("active") or 0)
    running = int(ready) if ready is not None else active
    if running > 0:
        return JobState(RUNNING, "PodsRunning", f"{running} runner pod(s) running.", start)
    # Pods not created yet and pods created but not running read the same: the Job
    # controller's first sync (which creates them) is not news worth a status write.
    return JobState(PENDING, PODS_PENDING, waiting_for_pods(name), start)


PODS_PENDING = "PodsPending"
"""An unfinished run whose pods are not running, with no problem known (yet)."""


def waiting_for_pods(job_name: str) -> str:
    return f"Waiting for the runner pods of {job_name} to start."


def _job_message(name: str, reason: str, detail: str | None) -> str:
    explanations = {
        "BackoffLimitExceeded": "the runner failed more often than backoffLimit allows",
        "DeadlineExceeded": "the run took longer than spec.activeDeadlineSeconds",
        "PodFailurePolicy": "the runner exited with a configuration error (see its log)",
        "MaxFailedIndexesExceeded": "too many runner pods failed",
        RESULTS_NOT_RECORDED: "the runner could not write its scores to status.results (see its log)",
    }
    text = f"{name} failed: {explanations.get(reason, reason)}"
    return f"{text} ({detail})." if detail else f"{text}."


def with_problem(state: JobState, problem: Problem | None, *, now: datetime.datetime) -> JobState:
    """The Job's state as the Evaluation shows it, once its pods' problem is known.

    A failed Job takes the reason of a runner that ended badly (OOMKilled) instead of its
    own (BackoffLimitExceeded); a fatal problem (InvalidImageName, ImagePullFailed) fails
    a live run; any other problem replaces the reason and message of a waiting run, and is
    appended to a running one's (a multi-node run with one pod unschedulable is stuck too).
    """
    if problem is None or state.phase == SUCCEEDED:
        return state
    if state.phase == FAILED:
        if problem.explains_failure or problem.fatal:
            return dataclasses.replace(state, reason=problem.reason, message=problem.message)
        return dataclasses.replace(state, message=f"{state.message} {problem.message}")
    if problem.fatal:
        return JobState(FAILED, problem.reason, problem.message, state.start_time, timestamp(now))
    if state.phase == PENDING and state.reason == "Suspended":
        return state
    if state.phase == PENDING:
        return dataclasses.replace(state, reason=problem.reason, message=problem.message)
    if problem.explains_failure:
        return state  # an earlier attempt's end; a retry is running
    return dataclasses.replace(state, reason=problem.reason, message=f"{state.message} {problem.message}")


def from_job(
    status: objects.EvaluationStatus | None,
    job: objects.Job,
    *,
    generation: int,
    now: datetime.datetime,
    problem: Problem | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status patch mirroring one Job (and its pods' `problem`); {} when nothing changed.

    A finished run is final: once the phase is Succeeded or Failed, later events of the
    same Job change nothing. The runner's own last word (`status.message` that no
    condition carries) is kept: it says which task or file went wrong. A Complete Job
    counts as Succeeded only with its scores in `status.results`; `spec` (the
    Evaluation's) tells where the results files are when they are not.
    """
    status = status or {}
    state = _with_results(with_problem(job_state(job), problem, now=now), status, spec)
    if state.phase in TERMINAL_PHASES and status.get("phase") == state.phase:
        return {}
    message = state.message
    note = _runner_message(status)
    if note and state.phase == SUCCEEDED:
        message = note
    elif note and state.phase == FAILED:
        message = f"{state.message} Runner: {note}"
    values: dict[str, tuple[bool | None, str, str]] = {
        RUNNING: (state.phase == RUNNING, state.reason, state.message),
        SUCCEEDED: (state.phase == SUCCEEDED, state.reason, message if state.phase == SUCCEEDED else "Not finished."),
        FAILED: (state.phase == FAILED, state.reason, message if state.phase == FAILED else "Not failed."),
        **summary(state.phase, reason=state.reason, message=message),
        **(outcome.output_written(status) if state.phase == SUCCEEDED else {}),
        **(regression.regressed(status, spec, succeeded=state.phase == SUCCEEDED) if state.phase in TERMINAL_PHASES else {}),
    }
    patch: dict[str, Any] = {
        "phase": state.phase,
        "reason": state.reason,
        "conditions": _with_all(status, now=now, generation=generation, values=values),
    }
    if state.start_time:
        patch["startTime"] = state.start_time
    if state.phase in TERMINAL_PHASES:
        patch["completionTime"] = state.completion_time or timestamp(now)
    # The message follows a phase change, a problem, and a problem's end; not other
    # reason changes (Terminating), which would bury the runner's last word.
    shows_problem = problem is not None and state.reason == problem.reason
    # A runner that fails at once can write its last word before the Job reports its pod
    # ready: the late Pending → Running change must not bury it either.
    keeps_note = note is not None and state.phase == RUNNING and not shows_problem
    if (state.phase != status.get("phase") or shows_problem or status.get("reason") in PROBLEM_REASONS) \
            and not keeps_note:  # fmt: skip
        patch["message"] = message
    changed = {k: v for k, v in patch.items() if status.get(k) != v}
    # The Job's startTime follows its first sync by milliseconds: it rides along with the
    # next real change (pods running, a problem, the end) rather than costing a write.
    return {} if set(changed) <= {"startTime"} else changed


def _with_results(state: JobState, status: Mapping[str, Any], spec: Mapping[str, Any] | None) -> JobState:
    """No Succeeded without scores: a Complete Job whose scores are missing is Failed."""
    if state.phase == SUCCEEDED and not outcome.results_recorded(status):
        name = status.get("jobName") or "The Job"
        state = JobState(FAILED, RESULTS_NOT_RECORDED, f"{name} completed, but its scores never reached status.results.",
                         state.start_time, state.completion_time)  # fmt: skip
    if state.reason != RESULTS_NOT_RECORDED:
        return state
    return dataclasses.replace(state, message=f"{state.message} Its results files are {outcome.files_location(spec, status)}.")


def _runner_message(status: Mapping[str, Any]) -> str | None:
    if status.get("runnerMessage"):
        # Written by the runner's image, not by the operator: one line, bounded, before it becomes an Event.
        return echoed_text.bounded(str(status["runnerMessage"]), RUNNER_MESSAGE_CHARS)
    message = status.get("message")
    if not message or any(c.get("message") == message for c in status.get("conditions") or ()):
        return None
    return echoed_text.bounded(str(message), RUNNER_MESSAGE_CHARS)


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
