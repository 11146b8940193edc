"""The operator's own health as Prometheus series: what controller-runtime operators export.

- `assay_reconcile_duration_seconds{kind}`: how long one handler run took, by the kind of
  object it reconciled (Evaluation decisions; Job and Pod mirroring);
- `assay_reconcile_errors_total{kind}`: handler runs that raised, by the same kinds;
- `assay_workqueue_depth`: Evaluations whose run decision is asked for and not yet done
  (waiting for a thread, being decided, or waiting to be retried);
- `assay_leader`: 1 on the replica that holds the leader Lease (or runs alone), else 0;
- `assay_operator_rate_limit_wait_seconds_total`: the seconds the operator's requests waited
  on its own token bucket (`kube.rate_limit`): above zero, a burst met the operator's limit
  rather than the API server's (or a loop did, which is what the limit is for).

They live in the registry of the Evaluations' series, so one scrape carries both.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

HANDLER_KINDS = {
    "reconcile": "Evaluation",
    "sweep": "Evaluation",
    "mirror_job": "Job",
    "recreate_job": "Job",
    "lost_job_sweep": "Job",
    "mirror_pod": "Pod",
}
"""The kind of object each handler (the `handler` label of assay_operator_reconcile_errors) works on."""
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""A status mirror takes milliseconds; a decision a few API round trips; a slow API server up to
api_session.TIMEOUT."""


def kind_of(handler: str) -> str:
    return HANDLER_KINDS.get(handler, handler)


class ControllerMetrics:
    """Reconcile timings and errors, the decision queue's depth and the leader flag, in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.duration = Histogram(
            "assay_reconcile_duration_seconds",
            "Time one handler run took, by kind of object.",
            ("kind",),
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.errors = Counter(
            "assay_reconcile_errors", "Handler runs that raised, by kind of object.", ("kind",), registry=registry
        )
        self.queue_depth = Gauge(
            "assay_workqueue_depth",
            "Evaluations whose run decision is waiting, running or due for a retry.",
            registry=registry,
        )
        self.leader = Gauge(
            "assay_leader", "1 on the replica that leads (holds the Lease, or runs alone), else 0.", registry=registry
        )
        self.rate_limit_wait = _ReadCounter(
            RATE_LIMIT_WAIT, "Seconds the operator's API requests waited on its own rate limit (token bucket)."
        )
        registry.register(self.rate_limit_wait)

    @contextlib.contextmanager
    def timing(self, handler: str) -> Iterator[None]:
        """Observe how long the body took (raised or not) in assay_reconcile_duration_seconds."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.duration.labels(kind_of(handler)).observe(time.perf_counter() - start)

    def record_error(self, handler: str) -> None:
        self.errors.labels(kind_of(handler)).inc()

    def watch_queue(self, depth: Callable[[], int]) -> None:
        """Read the queue's depth at each scrape (`depth` must be cheap and thread-safe to call)."""
        self.queue_depth.set_function(lambda: float(depth()))

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1.0 if leading else 0.0)

    def watch_rate_limit(self, waited_seconds: Callable[[], float]) -> None:
        """Read the rate limit's total wait at each scrape (`waited_seconds`: cheap, thread-safe)."""
        self.rate_limit_wait.read = waited_seconds


RATE_LIMIT_WAIT = "assay_operator_rate_limit_wait_seconds"
"""Without the `_total` the exposition adds to a counter."""


class _ReadCounter(Collector):
    """A counter whose total another object keeps (the token bucket counts under its own lock),
    read at each scrape: no second tally to keep in step. 0 until something is watched."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name, self.documentation = name, documentation
        self.read: Callable[[], float] = lambda: 0.0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.read())
