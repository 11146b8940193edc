"""A finished run's cold path in phases, from the times in its status.

The Job's start (`status.startTime`, the operator's), the runner's own marks
(`status.timing`, written by rank 0: its process started, its first requests went to the
model, its scores were computed) and the run's end (`status.completionTime`) split a run
into four phases that add up to its duration:

- `pending`: the Job started → the runner process started (pod creation, scheduling,
  image pull, container start);
- `startup`: → the first requests went to the model (imports, task and data loading,
  model loading, building the requests);
- `evaluating`: → the scores were computed;
- `finishing`: → the run was complete (scores to status, files to the output volume, the
  Job's completion seen by the operator).

The marks come from two clocks (the node's and the control plane's), so a phase is never
less than zero: skew between them is reported as a zero, not as negative time.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

PHASES = ("pending", "startup", "evaluating", "finishing")


def parse_time(value: Any) -> datetime.datetime | None:
    """An RFC 3339 time of a status field, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def phase_seconds(status: Mapping[str, Any]) -> dict[str, float] | None:
    """Seconds in each of PHASES, or None when the status lacks one of the five moments."""
    timing = status.get("timing")
    if not isinstance(timing, Mapping):
        return None
    moments = [
        parse_time(status.get("startTime")),
        parse_time(timing.get("runnerStarted")),
        parse_time(timing.get("requestsStarted")),
        parse_time(timing.get("finished")),
        parse_time(status.get("completionTime")),
    ]
    known = [moment for moment in moments if moment is not None]
    if len(known) < len(moments):
        return None
    return {
        phase: max(0.0, (end - start).total_seconds())
        for phase, start, end in zip(PHASES, known, known[1:], strict=False)
    }
