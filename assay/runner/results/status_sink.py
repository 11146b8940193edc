"""Where rank 0 reports a run's progress and outcome.

In a cluster the runner patches its Evaluation's `status` subresource (its Role allows
`get`/`patch` on that one object only), so `kubectl get evaluation -o yaml` shows
progress while it runs and the scores when it ends. Status lives in etcd beside every
other object, so what goes there is condensed and bounded: per task the metric values
and their stderr, groups, sample counts and task versions, never samples; full results
stay on the output volume. A progress write that fails is logged and dropped (the next one
follows in seconds); the last write, the scores or the failure, is tried again for up to
`FINAL_WRITE_PATIENCE` while the API server is unreachable or overloaded (a restart of the
API server must not lose a run's scores), and is then logged and dropped: a status write
never fails a finished evaluation (the results are already on disk).

This module imports `kubernetes` lazily and nothing from `assay.operator` or kopf.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from assay import scores
from assay import spec as spec_module

logger = logging.getLogger(__name__)

MAX_STATUS_BYTES = 256 * 1024
"""Bound on the condensed results in status; etcd's object limit is 1.5 MiB."""
DEFAULT_PROGRESS_INTERVAL = 5.0
MAX_MESSAGE_CHARS = 1024
FINAL_WRITE_PATIENCE = 300.0
"""Seconds the last status write is retried while the API server is unreachable, overloaded or restarting."""
_RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0)
"""Waits between tries of the last write; the last one repeats until the patience is spent."""
_TRANSIENT_STATUSES = {429, 500, 502, 503, 504}
_SKIPPED_KEYS = {"alias", "name", "sample_len", "samples", " ", ""}


class StatusSink(Protocol):
    def progress(self, done: int, total: int) -> None: ...

    def finished(self, results: Mapping[str, Any]) -> None: ...

    def failed(self, message: str) -> None: ...


class NullSink:
    """Reports nowhere: `assay run` on a laptop, or a rank other than 0."""

    def progress(self, done: int, total: int) -> None:
        pass

    def finished(self, results: Mapping[str, Any]) -> None:
        pass

    def failed(self, message: str) -> None:
        pass


# --- condensing ------------------------------------------------------------------------


def condense_results(results: Mapping[str, Any], *, max_bytes: int = MAX_STATUS_BYTES) -> dict[str, Any]:
    """lm-eval's results dict → the `status` fields results, groups, nSamples, versions, message.

    Each task becomes `{"metric,filter": {"value": v, "stderr": s}}` (stderr None where
    lm-eval says "N/A"). When the whole is over `max_bytes`, only each task's headline
    (its first metric,filter) is kept, then only groups, and `message` says so.
    """
    tasks = {name: _condense_task(values) for name, values in (results.get("results") or {}).items()}
    groups = {name: _condense_task(values) for name, values in (results.get("groups") or {}).items()}
    n_samples = {
        name: {k: int(v) for k, v in counts.items() if k in ("original", "effective") and _is_number(v)}
        for name, counts in (results.get("n-samples") or {}).items()
        if isinstance(counts, Mapping)
    }
    versions = {name: str(v) for name, v in (results.get("versions") or {}).items() if v is not None}
    status: dict[str, Any] = {"results": tasks, "groups": groups, "nSamples": n_samples, "versions": versions}
    total = sum(len(metrics) for metrics in tasks.values())
    if _size(status) <= max_bytes:
        status["message"] = f"Evaluated {len(tasks)} tasks."
        return status
    status["results"] = {name: _headline(metrics) for name, metrics in tasks.items()}
    status["groups"] = {name: _headline(metrics) for name, metrics in groups.items()}
    kept = len(status["results"])
    note = f"Results truncated to headline metrics ({kept} of {total} values) to fit status; full results are on the output volume."
    if _size(status) > max_bytes:
        status["results"] = {}
        status["nSamples"] = {}
        note = (
            f"Results of {len(tasks)} tasks are too large for status; kept group headlines only; "
            "full results are on the output volume."
        )
    status["message"] = note
    return status


def _condense_task(values: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    return {
        score.key: {"value": _number_or_none(score.value), "stderr": _number_or_none(score.stderr)}
        for score in scores.read_row(values, skip=_SKIPPED_KEYS, comma_keys_only=True)
        if _is_number(score.value)
    }


def _headline(metrics: Mapping[str, Any]) -> dict[str, Any]:
    first = next(iter(metrics.items()), None)
    return dict([first]) if first else {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_or_none(value: Any) -> float | None:
    # JSON has no NaN/inf, and lm-eval writes "N/A" for a missing stderr.
    if not _is_number(value) or not math.isfinite(value):
        return None
    return float(value)


def _size(data: Any) -> int:
    return len(json.dumps(data, separators=(",", ":")).encode())


def progress_status(done: int, total: int, *, eta_seconds: float | None = None) -> dict[str, Any]:
    """status.progress; `summary` is what `kubectl get evals` shows (Progress column)."""
    percent = int(100 * done / total) if total > 0 else 0
    status: dict[str, Any] = {"requestsDone": int(done), "requestsTotal": int(total)}
    summary = f"{int(done)}/{int(total)} ({percent}%)"
    if eta_seconds is not None and done < total:
        status["etaSeconds"] = int(eta_seconds)
        summary += f" ETA {_duration(int(eta_seconds))}"
    status["summary"] = summary
    return status


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


# --- sinks ----------------------------------------------------------------------------


class _ThrottledSink:
    """Progress at most once per `min_interval` seconds, and always the last step."""

    def __init__(self, *, min_interval: float, clock: Callable[[], float]) -> None:
        self.min_interval = min_interval
        self.clock = clock
        self._last: float | None = None
        self._first: tuple[float, int] | None = None
        """(time, requests done) of the first report: the rate since then gives the ETA."""

    def _due(self, done: int, total: int) -> bool:
        now = self.clock()
        if done < total and self._last is not None and now - self._last < self.min_interval:
            return False
        self._last = now
        return True

    def _write(self, status: dict[str, Any], *, final: bool) -> None:
        raise NotImplementedError

    def progress(self, done: int, total: int) -> None:
        if not self._due(done, total):
            return
        now = self.clock()
        eta = None
        if self._first is None:
            self._first = (now, done)
        elif done > self._first[1] and now > self._first[0]:
            # The mean rate since the first report: model loading is over by then, and the
            # length-sorted batches make later requests shorter, so this errs on the long side.
            eta = (now - self._first[0]) / (done - self._first[1]) * (total - done)
        self._write({"progress": progress_status(done, total, eta_seconds=eta)}, final=False)

    def finished(self, results: Mapping[str, Any]) -> None:
        status = condense_results(results)
        self._write({**status, "runnerMessage": status["message"]}, final=True)

    def failed(self, message: str) -> None:
        # `message` for `kubectl get`; `runnerMessage` survives the operator's updates of
        # `message`, which may be computed from a read taken just before this write.
        note = message[:MAX_MESSAGE_CHARS]
        self._write({"message": note, "runnerMessage": note}, final=True)


class FileStatusSink(_ThrottledSink):
    """Writes the status fields as JSON to a file: `assay apply --local` under torchrun."""

    def __init__(self, path: str | Path, *, min_interval: float = DEFAULT_PROGRESS_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        super().__init__(min_interval=min_interval, clock=clock)
        self.path = Path(path)
        self.status: dict[str, Any] = {}

    def _write(self, status: dict[str, Any], *, final: bool) -> None:
        self.status.update(status)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.status, indent=2))
        tmp.replace(self.path)


class KubernetesStatusSink(_ThrottledSink):
    """Merge-patches `status` of one Evaluation through its status subresource."""

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        generation: int | None = None,
        job_name: str | None = None,
        api: Any = None,
        min_interval: float = DEFAULT_PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        final_patience: float = FINAL_WRITE_PATIENCE,
    ) -> None:
        super().__init__(min_interval=min_interval, clock=clock)
        self.sleep, self.final_patience = sleep, final_patience
        self.name = name
        self.namespace = namespace
        self.generation = generation
        self.job_name = job_name
        self.api = api if api is not None else _custom_objects_api()

    def _write(self, status: dict[str, Any], *, final: bool) -> None:
        waited = 0.0
        for attempt in itertools.count():
            try:
                if final and self._superseded():
                    logger.warning("Evaluation %s/%s has a newer generation; not reporting this run's outcome.",
                                   self.namespace, self.name)  # fmt: skip
                    return
                self.api.patch_namespaced_custom_object_status(
                    spec_module.GROUP, spec_module.VERSION, self.namespace, spec_module.PLURAL, self.name,
                    {"status": status},
                )  # fmt: skip
                return
            except Exception as error:  # noqa: BLE001 - a status write must never end the run
                delay = _RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)]
                if not final or not _transient(error) or waited + delay > self.final_patience:
                    logger.warning("Could not patch status of Evaluation %s/%s: %s", self.namespace, self.name, error)
                    return
                logger.warning("Could not patch status of Evaluation %s/%s (%s); trying again in %.0f s.",
                               self.namespace, self.name, _first_line(error), delay)  # fmt: skip
                self.sleep(delay)
                waited += delay


    def _superseded(self) -> bool:
        """Whether the Evaluation now runs another Job. By the run's Job name when known: a
        suspend/resume changes the generation but keeps the run, whose outcome must count."""
        if self.generation is None and self.job_name is None:
            return False
        current = self.api.get_namespaced_custom_object(
            spec_module.GROUP, spec_module.VERSION, self.namespace, spec_module.PLURAL, self.name
        )
        current_job = (current.get("status") or {}).get("jobName")
        if self.job_name is not None and current_job:
            return bool(current_job != self.job_name)
        if self.generation is None:
            return False
        return int(current.get("metadata", {}).get("generation", self.generation)) != self.generation


def _transient(error: Exception) -> bool:
    """Worth another try: no answer at all (connection refused or reset, a timeout), or an
    overloaded or restarting server; not a refusal (403, 404, 422) nor a bug of ours, which a
    retry would only repeat."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status > 0:
        return status in _TRANSIENT_STATUSES
    # urllib3's errors (MaxRetryError, ProtocolError) are not OSErrors.
    return isinstance(error, OSError) or type(error).__module__.startswith("urllib3")


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _custom_objects_api() -> Any:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


def sink_from_env(env: Mapping[str, str] | None = None) -> StatusSink:
    """The sink the runner pod's environment asks for (see the contract in assay.spec)."""
    env = os.environ if env is None else env
    interval = float(env.get("ASSAY_PROGRESS_INTERVAL", DEFAULT_PROGRESS_INTERVAL))
    if env.get(spec_module.ENV_STATUS_FILE):
        return FileStatusSink(env[spec_module.ENV_STATUS_FILE], min_interval=interval)
    name, namespace = env.get(spec_module.ENV_NAME), env.get(spec_module.ENV_NAMESPACE)
    if name and namespace:
        generation = env.get(spec_module.ENV_GENERATION)
        try:
            return KubernetesStatusSink(
                name=name, namespace=namespace, min_interval=interval,
                generation=int(generation) if generation else None, job_name=env.get(spec_module.ENV_JOB_NAME) or None,
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 - no credentials: run anyway, results go to disk
            logger.warning("No Kubernetes credentials to report status of %s/%s (%s); reporting nowhere.",
                           namespace, name, error)  # fmt: skip
    return NullSink()
