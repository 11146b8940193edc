"""`assay_run_phase_seconds{phase}`: where the time of the runs this operator saw finish went.

One observation per phase for each run that succeeds while the operator watches: a run is
known by its Evaluation and Job name, so the many status events of one run count once, and
a run that finished before the operator started (listed again after a restart) counts not
at all, as it was counted by the process that saw it finish.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from assay.operator.decide import run_phases

BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
"""Seconds: a tiny model's start-up takes a few, a large model's download or a long run hours."""


class RunPhaseMetrics:
    def __init__(self, registry: CollectorRegistry, *, since: datetime.datetime | None = None) -> None:
        self.seconds = Histogram(
            "assay_run_phase_seconds",
            "Seconds a finished run spent in each phase of its cold path: pending, startup, evaluating, finishing.",
            ("phase",),
            buckets=BUCKETS,
            registry=registry,
        )
        self.since = since or datetime.datetime.now(datetime.timezone.utc)
        self._counted: set[tuple[str, str, str]] = set()

    def observe(self, key: tuple[str, str], status: Mapping[str, Any], *, succeeded: bool) -> None:
        """Count the run in `status` once, if it succeeded after this operator started."""
        job = status.get("jobName")
        if not succeeded or not isinstance(job, str) or (*key, job) in self._counted:
            return
        end = run_phases.parse_time(status.get("completionTime"))
        phases = run_phases.phase_seconds(status)
        if end is None or end < self.since or phases is None:
            return
        self._counted.add((*key, job))
        for phase, seconds in phases.items():
            self.seconds.labels(phase).observe(seconds)

    def forget(self, key: tuple[str, str]) -> None:
        self._counted = {counted for counted in self._counted if counted[:2] != key}
