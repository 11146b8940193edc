"""Runs in flight for bench/operator_scale.py: Evaluations whose runs the operator has decided,
and a writer that reports their progress as their runners would.

A runner patches its Evaluation's status at most once per interval, which the operator gives
its Job from the runs in flight (`assay.operator.decide.progress_budget`: 15 s for 300), and
only when the share done moves by a whole percent (`assay.runner.results.progress_gate`);
each patch is a watch event the operator receives and must not take for a reason to decide
the run again. The writer sends the runner's own writes in the worst case, a run fast enough
to move a percent every interval: a `KubernetesStatusSink` per Evaluation, as the runner
builds it from its environment (the run's Job name, which the JSON patch tests first), whose
`progress(done, total)` sends `status.progress` and `status.timing` with the runner's
content-type. The writes of one interval are spread evenly over it and sent from a small
thread pool, under the admin's user, so the audit log of the operator's user does not count them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.decide.progress_budget import interval_seconds as progress_interval
from assay.runner.results.status_sink import KubernetesStatusSink

__all__ = ["ProgressWriter", "progress_interval", "start", "wait_for_runs"]

REQUESTS_TOTAL = 100_000
"""Each run's requestsTotal: large enough that no run reaches it (its last write is not progress)."""
REQUESTS_PER_WRITE = 1_000
"""A percent each write: every write shows a change, so the runner's gate lets each through."""


def start(
    admin_kubeconfig: Path,
    namespace: str,
    m: int,
    interval: float,
    create: Callable[[Any, list[str]], object],
    *,
    before_writes: Callable[[], None] = lambda: None,
) -> ProgressWriter:
    """M Evaluations (`create(custom_objects_api, names)`) through to their Jobs, `before_writes()`,
    then their runners' progress writes, at full rate for one interval before returning: the
    burst meets them steady."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(admin_kubeconfig))
    custom, batch = client.CustomObjectsApi(api_client), client.BatchV1Api(api_client)
    names = [f"run-{i:04d}" for i in range(m)]
    create(custom, names)
    runs = wait_for_runs(custom, batch, namespace, names)
    time.sleep(2 if m else 0)  # their status writes and Events settle
    if m:
        before_writes()
    sinks_client = kube_client.ApiClient(api_session.Session(credentials.load(str(admin_kubeconfig))))
    writer = ProgressWriter(sinks_client, namespace, runs, interval=interval)
    writer.start()
    time.sleep(interval if m else 0)
    return writer


def wait_for_runs(custom: Any, batch: Any, namespace: str, names: list[str], timeout: float = 300) -> dict[str, str]:
    """Name → status.jobName of each Evaluation in `names`, once each has its Job."""
    wanted, deadline = set(names), time.monotonic() + timeout
    while True:
        listed = custom.list_namespaced_custom_object("assay.dev", "v1alpha1", namespace, "evaluations")["items"]
        jobs = {item["metadata"]["name"]: (item.get("status") or {}).get("jobName") for item in listed}
        made = {
            (job.metadata.labels or {}).get("assay.dev/evaluation")
            for job in batch.list_namespaced_job(namespace).items
        }
        ready = {name: str(jobs[name]) for name in wanted if jobs.get(name) and name in made}
        if len(ready) == len(wanted):
            return ready
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(ready)} of {len(wanted)} in-flight Evaluations have their Job")
        time.sleep(0.5)


class _CountingApi:
    """The client (assay.kube, the runner's) the sinks write through, counting the status patches that land."""

    def __init__(self, api: kube_client.ApiClient) -> None:
        self._api, self._lock = api, threading.Lock()
        self.written = self.tried = 0

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        # A GET: the sink reads its Evaluation after a refused write.
        patch = method == "PATCH"
        if patch:
            with self._lock:
                self.tried += 1
        result = self._api.request(method, url, **kwargs)
        if patch:
            with self._lock:
                self.written += 1
        return result


class ProgressWriter:
    """Patches each run's status progress once every `interval` seconds, spread over the interval."""

    def __init__(
        self, api: kube_client.ApiClient, namespace: str, runs: dict[str, str], *, interval: float, threads: int = 4
    ) -> None:
        self.api, self.interval, self.threads = _CountingApi(api), interval, threads
        self.sinks = [
            KubernetesStatusSink(name=name, namespace=namespace, job_name=job, api=self.api, min_interval=0.0)
            for name, job in sorted(runs.items())
        ]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = self._stopped = 0.0
        self.late = 0.0
        """The most seconds a write was sent after its moment: the pool falling behind."""

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._stopped = time.monotonic()

    @property
    def writes_per_s(self) -> float:
        return self.api.written / max(self._stopped - self._started, 1e-9)

    @property
    def target_per_s(self) -> float:
        return len(self.sinks) / self.interval

    def summary(self) -> str:
        seconds = self._stopped - self._started
        return (
            f"{self.api.written} of {self.api.tried} progress writes landed over {seconds:.1f} s: "
            f"{self.writes_per_s:.1f}/s (target {self.target_per_s:.1f}/s, {len(self.sinks)} runs every "
            f"{self.interval:g} s); the latest sent {self.late:.2f} s after its moment"
        )

    def _run(self) -> None:
        if not self.sinks:
            return
        step = self.interval / len(self.sinks)
        with ThreadPoolExecutor(self.threads) as pool:
            for k in range(1_000_000):
                due = self._started + k * step
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return
                sink = self.sinks[k % len(self.sinks)]
                done = min(REQUESTS_TOTAL - 1, (k // len(self.sinks)) * REQUESTS_PER_WRITE)
                pool.submit(self._write, sink.progress, done, due)

    def _write(self, progress: Callable[[int, int], None], done: int, due: float) -> None:
        self.late = max(self.late, time.monotonic() - due)
        progress(done, REQUESTS_TOTAL)  # logs and drops a refused write, as the runner does
