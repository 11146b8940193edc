"""The Evaluation's status mirroring its runner Job: pure functions of what was observed.

`job_state` reads a Job's own status (conditions, counters, times) into a phase, reason and
message; `with_problem` lets what keeps its pods from running (`diagnosis`) take over;
`from_job` turns that into the merge patch for `status`, with the conditions, the runner's
last word and the outcome of a finished run (the vocabulary and the condition mechanics:
`conditions`).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from assay import echoed_text
from assay.operator import objects
from assay.operator.build.builders import KUEUE_QUEUE_LABEL
from assay.operator.decide import conditions, outcome, regression, trust
from assay.operator.decide.conditions import (
    FAILED,
    PENDING,
    PODS_PENDING,
    RESULTS_NOT_RECORDED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_PHASES,
)
from assay.operator.decide.diagnosis import REASONS as PROBLEM_REASONS
from assay.operator.decide.diagnosis import Problem

RUNNER_MESSAGE_CHARS = 1024
"""Bound on the runner's last word as the operator repeats it (the runner bounds it too)."""


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
    true_conditions = {c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"}
    if "Failed" in true_conditions:
        c = true_conditions["Failed"]
        reason = c.get("reason") or "JobFailed"
        detail = c.get("message")
        if reason == "DeadlineExceeded" and spec.get("activeDeadlineSeconds"):
            detail = f"{spec['activeDeadlineSeconds']} s"
        if reason == "PodFailurePolicy" and outcome.failed_unrecorded(detail):
            reason, detail = RESULTS_NOT_RECORDED, None
        return JobState(FAILED, reason, _job_message(name, reason, detail), start, c.get("lastTransitionTime"))
    if "Complete" in true_conditions:
        c = true_conditions["Complete"]
        return JobState(
            SUCCEEDED,
            "JobComplete",
            f"{name} completed.",
            start,
            status.get("completionTime") or c.get("lastTransitionTime"),
        )
    if "FailureTarget" in true_conditions:
        c = true_conditions["FailureTarget"]
        return JobState(
            RUNNING, "Terminating", _job_message(name, c.get("reason") or "Failing", c.get("message")), start
        )
    if spec.get("suspend") or "Suspended" in true_conditions:
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
    return JobState(PENDING, PODS_PENDING, conditions.waiting_for_pods(name), start)


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
        return JobState(FAILED, problem.reason, problem.message, state.start_time, conditions.timestamp(now))
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
    note = _runner_message(status)
    message = _shown_message(state, note)
    patch: dict[str, Any] = {
        "phase": state.phase,
        "reason": state.reason,
        "conditions": conditions.with_all(
            status, now=now, generation=generation, values=_condition_values(state, message, status, spec)
        ),
    }
    if state.start_time:
        patch["startTime"] = state.start_time
    if state.phase in TERMINAL_PHASES:
        patch["completionTime"] = state.completion_time or conditions.timestamp(now)
    if _message_follows(state, status, problem, note):
        patch["message"] = message
    changed = {k: v for k, v in patch.items() if status.get(k) != v}
    # The Job's startTime follows its first sync by milliseconds: it rides along with the
    # next real change (pods running, a problem, the end) rather than costing a write.
    return {} if set(changed) <= {"startTime"} else changed


def _shown_message(state: JobState, note: str | None) -> str:
    """The message of a finished run: the runner's last word after a success, appended after a failure."""
    if note and state.phase == SUCCEEDED:
        return note
    if note and state.phase == FAILED:
        return f"{state.message} Runner: {note}"
    return state.message


def _condition_values(
    state: JobState, message: str, status: Mapping[str, Any], spec: Mapping[str, Any] | None
) -> dict[str, tuple[bool | None, str, str]]:
    """Every condition the Job's state sets: the phases', the kstatus summary, and a finished run's outcome."""
    return {
        RUNNING: (state.phase == RUNNING, state.reason, state.message),
        SUCCEEDED: (state.phase == SUCCEEDED, state.reason, message if state.phase == SUCCEEDED else "Not finished."),
        FAILED: (state.phase == FAILED, state.reason, message if state.phase == FAILED else "Not failed."),
        **conditions.summary(state.phase, reason=state.reason, message=message),
        **(outcome.output_written(status) if state.phase == SUCCEEDED else {}),
        **(
            regression.regressed(status, spec, succeeded=state.phase == SUCCEEDED)
            if state.phase in TERMINAL_PHASES
            else {}
        ),
        **(trust.scores_trusted(status) if state.phase in TERMINAL_PHASES else {}),
    }


def _message_follows(state: JobState, status: Mapping[str, Any], problem: Problem | None, note: str | None) -> bool:
    """Whether status.message changes with this patch.

    The message follows a phase change, a problem, and a problem's end; not other reason
    changes (Terminating), which would bury the runner's last word.
    """
    shows_problem = problem is not None and state.reason == problem.reason
    # A runner that fails at once can write its last word before the Job reports its pod
    # ready: the late Pending → Running change must not bury it either.
    keeps_note = note is not None and state.phase == RUNNING and not shows_problem
    return (
        state.phase != status.get("phase") or shows_problem or status.get("reason") in PROBLEM_REASONS
    ) and not keeps_note


def _with_results(state: JobState, status: Mapping[str, Any], spec: Mapping[str, Any] | None) -> JobState:
    """No Succeeded without scores: a Complete Job whose scores are missing is Failed."""
    if state.phase == SUCCEEDED and not outcome.results_recorded(status):
        name = status.get("jobName") or "The Job"
        state = JobState(
            FAILED,
            RESULTS_NOT_RECORDED,
            f"{name} completed, but its scores never reached status.results.",
            state.start_time,
            state.completion_time,
        )
    untrusted = trust.fails_strict_run(status, spec) if state.phase == SUCCEEDED else None
    if untrusted is not None:
        return JobState(FAILED, trust.SCORES_UNTRUSTED, untrusted, state.start_time, state.completion_time)
    if state.reason != RESULTS_NOT_RECORDED:
        return state
    return dataclasses.replace(
        state, message=f"{state.message} Its results files are {outcome.files_location(spec, status)}."
    )


def _runner_message(status: Mapping[str, Any]) -> str | None:
    if status.get("runnerMessage"):
        # Written by the runner's image, not by the operator: one line, bounded, before it becomes an Event.
        return echoed_text.bounded(str(status["runnerMessage"]), RUNNER_MESSAGE_CHARS)
    message = status.get("message")
    if not message or any(c.get("message") == message for c in status.get("conditions") or ()):
        return None
    return echoed_text.bounded(str(message), RUNNER_MESSAGE_CHARS)
