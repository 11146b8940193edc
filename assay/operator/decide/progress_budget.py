"""How often a runner may write its progress: the API server's budget for progress, shared by the runs in flight.

Each progress write is a status patch the API server decodes, validates against the CRD's
schema, stores in etcd and sends to every watcher (the operator, dashboards): about 7 ms of
its CPU. 300 runs writing every 5 s were 60 writes a second. The budget is
`WRITES_PER_SECOND` progress writes a second for all the runs this operator watches: a
run's interval is the number of runs in flight divided by the budget, and never under
`MIN_INTERVAL_SECONDS` (what a person watching one run wants):

    interval = max(5 s, runs in flight / 20 per second)

100 runs in flight: 5 s each; 300: 15 s; 1,000: 50 s. The runner writes at most once per
interval and only when what a reader sees changes (a whole percent, or the first and the last
step: `assay.runner.results.status_sink`), so a run writes at most ~100 times in all and a slow
one far less often than its interval allows. The interval is fixed when the run's Job is made,
counting the runs in flight then and the decisions queued (a burst's later Evaluations), so the
budget holds within a burst; a run made while few were in flight keeps its shorter interval
until it ends, which bounds its share at 100 writes whatever the interval.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from assay import spec as spec_module

MIN_INTERVAL_SECONDS = 5.0
WRITES_PER_SECOND = 20.0
"""Progress writes a second for all the runs in flight together (about 0.14 s of API-server CPU a second)."""


def interval_seconds(in_flight: int) -> float:
    """Seconds between one run's progress writes when `in_flight` runs (this one included) write them."""
    return max(MIN_INTERVAL_SECONDS, math.ceil(max(in_flight, 0) / WRITES_PER_SECOND))


def with_interval(manifests: Iterable[dict[str, Any]], seconds: float) -> tuple[dict[str, Any], ...]:
    """`manifests` with the interval in the environment of each Job's containers (a copy of each
    Job changed; the other manifests as they are)."""
    return tuple(_job_with_interval(m, seconds) if m.get("kind") == "Job" else m for m in manifests)


def _job_with_interval(job: dict[str, Any], seconds: float) -> dict[str, Any]:
    template = job["spec"]["template"]
    pod = dict(template["spec"])
    entry = {"name": spec_module.ENV_PROGRESS_INTERVAL, "value": f"{seconds:g}"}
    for field in ("initContainers", "containers"):
        if field in pod:
            pod[field] = [
                {**c, "env": [*(e for e in c.get("env") or () if e.get("name") != entry["name"]), entry]}
                for c in pod[field]
            ]
    return {**job, "spec": {**job["spec"], "template": {**template, "spec": pod}}}
