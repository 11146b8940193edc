"""`assay describe`: one Evaluation in plain words — what happened, why, what to do — then
its conditions and the recent Events about it, its Job and its runner pods.

`kubectl describe evaluation` prints the raw status and only the Events about the
Evaluation itself; the scheduler's and the kubelet's words (FailedScheduling, a failed pull)
are on the pods, so those are gathered here too. Text from the cluster is shown as one
bounded line each (`echoed_text`): a runner's or a server's message may carry anything.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from assay import echoed_text
from assay.cli_cluster import advice, ages, columns, listing
from assay.cli_cluster.pod_logs import runner_pods
from assay.operator.decide import progress_eta
from assay.spec import status as schema

RECENT_EVENTS = 15
MESSAGE_CHARS = 400
_PHASE_WORDS = {
    "Pending": "The run has not started yet",
    "Running": "The run is under way",
    "Succeeded": "The run succeeded",
    "Failed": "The run failed",
}


def render(
    evaluation: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]] | None,
    now: datetime.datetime,
    unread: str = "",
) -> str:
    """`events` None: they could not be read, for the reason `unread` gives (RBAC may allow
    reading Evaluations but not Events)."""
    meta, status = evaluation.get("metadata") or {}, schema.of(evaluation)
    name = str(meta.get("name"))
    parts = [_summary(evaluation, pods=pods, now=now), _story(status, name=name)]
    comparison = _comparison(status)
    if comparison:
        parts.append(comparison)
    parts.append(_conditions(status, now=now))
    if events is None:
        parts.append(f"Events: not read ({unread})\n")
    else:
        parts.append(_events(_about(evaluation, pods, events), now=now))
    return "\n".join(parts)


def _text(value: Any, limit: int = MESSAGE_CHARS) -> str:
    return echoed_text.bounded(str(value), limit)


def _summary(evaluation: Mapping[str, Any], *, pods: Sequence[Mapping[str, Any]], now: datetime.datetime) -> str:
    meta, spec, status = evaluation.get("metadata") or {}, evaluation.get("spec") or {}, schema.of(evaluation)
    fields = [
        ("Name", meta.get("name")),
        ("Namespace", meta.get("namespace")),
        ("Model", f"{listing.model_name(evaluation)} ({spec.get('model')})"),
        ("Tasks", ", ".join(map(str, spec.get("tasks") or ()))),
        (
            "Phase",
            " ".join(
                filter(
                    None,
                    [str(status.get("phase") or "Pending"), f"({status['reason']})" if status.get("reason") else ""],
                )
            ),
        ),
        ("Created", _ago(meta.get("creationTimestamp"), now)),
        ("Started", _ago(status.get("startTime"), now)),
        ("Finished", _ago(status.get("completionTime"), now)),
        ("Progress", progress_eta.summary(status, now=now)),
        ("Job", status.get("jobName")),
        ("Pods", ", ".join(f"{p.name} (rank {p.rank}, {p.phase})" for p in runner_pods(pods, all_ranks=True))),
    ]
    return "".join(f"{label + ':':<11}{_text(value)}\n" for label, value in fields if value)


def _ago(value: Any, now: datetime.datetime) -> str:
    return f"{value} ({ages.since(value, now=now)} ago)" if ages.parse(value) else ""


def _story(status: Mapping[str, Any], *, name: str) -> str:
    phase, reason = str(status.get("phase") or "Pending"), str(status.get("reason") or "")
    lines = [f"What happened: {_PHASE_WORDS.get(phase, f'Phase {phase}')}{f' ({reason})' if reason else ''}."]
    if status.get("message"):
        lines.append(f"Why: {_text(status['message'])}")
    runner_said = status.get("runnerMessage")
    if runner_said and runner_said != status.get("message"):
        lines.append(f"The runner said: {_text(runner_said)}")
    step = advice.next_step(reason, name=name) if reason else None
    if step is None and phase == "Pending" and not reason:
        step = "Nothing yet: the operator has not accepted it; if that lasts, check that the operator runs."
    if step:
        lines.append(f"What to do: {step}")
    return "\n".join(lines) + "\n"


def _comparison(status: Mapping[str, Any]) -> str:
    condition = listing.regression_condition(status)
    if condition is None:
        return ""
    reason = str(condition.get("reason") or "")
    lines = [
        f"Against the baseline: Regressed is {condition.get('status')} ({reason}): {_text(condition.get('message') or '')}"
    ]
    step = advice.regression_step(reason)
    if step:
        lines.append(f"What to do: {step}")
    return "\n".join(lines) + "\n"


def _conditions(status: Mapping[str, Any], *, now: datetime.datetime) -> str:
    rows = [
        [
            _text(c.get("type"), 80),
            _text(c.get("status"), 10),
            _text(c.get("reason") or "", 80),
            ages.since(c.get("lastTransitionTime"), now=now),
            _text(c.get("message") or ""),
        ]
        for c in status.get("conditions") or ()
    ]
    if not rows:
        return "Conditions: none yet.\n"
    return "Conditions:\n" + _indent(columns.render(["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"], rows))


def _about(
    evaluation: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The Events about the Evaluation, its current Job and that Job's pods, oldest first."""
    meta, status = evaluation.get("metadata") or {}, schema.of(evaluation)
    ours = {("Evaluation", meta.get("name")), ("Job", status.get("jobName"))}
    ours |= {("Pod", (pod.get("metadata") or {}).get("name")) for pod in pods}
    found = [
        e
        for e in events
        if ((e.get("involvedObject") or {}).get("kind"), (e.get("involvedObject") or {}).get("name")) in ours
    ]
    return sorted(
        found, key=lambda e: ages.parse(_last_seen(e)) or datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    )


def _last_seen(event: Mapping[str, Any]) -> Any:
    return (
        (event.get("series") or {}).get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _events(events: Sequence[Mapping[str, Any]], *, now: datetime.datetime) -> str:
    if not events:
        return "Events: none (the API server keeps Events for an hour by default).\n"
    recent = events[-RECENT_EVENTS:]
    rows = []
    for event in recent:
        involved = event.get("involvedObject") or {}
        count = int(event.get("count") or (event.get("series") or {}).get("count") or 1)
        rows.append(
            [
                ages.since(_last_seen(event), now=now) + (f" (x{count})" if count > 1 else ""),
                _text(event.get("type") or "", 20),
                _text(event.get("reason") or "", 80),
                _text(f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}", 120),
                _text(event.get("message") or ""),
            ]
        )
    older = f", {len(events) - len(recent)} older left out" if len(events) > len(recent) else ""
    return f"Events (oldest first{older}):\n" + _indent(
        columns.render(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows)
    )


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())
