"""When a runner started, began its requests and finished: the cold path of a run, for its status.

The operator knows when the Job started (`status.startTime`); only the runner knows when its
own process started (after the pod was scheduled, its image pulled and its container
started), when the model was loaded and the first requests went to it, and when its scores
were recorded. Rank 0 writes these as `status.timing`, and the operator turns them into
`assay_run_phase_seconds{phase}` (pending, startup, evaluating).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

RUNNER_STARTED = "runnerStarted"
REQUESTS_STARTED = "requestsStarted"
FINISHED = "finished"


def iso(seconds: float) -> str:
    """A Unix time as RFC 3339 in UTC, to the millisecond (what `date-time` in the CRD accepts)."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def process_start_time(proc: Path = Path("/proc")) -> float | None:
    """When this process started, as a Unix time: the kernel's start time of the process, so
    the interpreter's start and the imports before this module count as the runner's start-up.
    None where /proc does not say (not Linux)."""
    try:
        stat = (proc / "self" / "stat").read_text()
        boot = next(line for line in (proc / "stat").read_text().splitlines() if line.startswith("btime "))
        # Field 22 (starttime, in clock ticks since boot) counts after the command name, which
        # is in parentheses and may hold spaces: split after its closing one.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


class RunTiming:
    """The moments a run has reached so far, each marked once, as `status.timing` fields."""

    def __init__(self, *, started: float | None = None) -> None:
        self._marks: dict[str, str] = {}
        if started is not None:
            self._marks[RUNNER_STARTED] = iso(started)

    def mark(self, moment: str, at: float) -> None:
        self._marks.setdefault(moment, iso(at))

    def fields(self) -> dict[str, str]:
        return dict(self._marks)
