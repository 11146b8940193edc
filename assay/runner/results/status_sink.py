"""Where rank 0 reports a run's progress and outcome.

In a cluster the runner patches its Evaluation's `status` subresource (its Role allows
`get`/`patch` on that one object only), so `kubectl get evaluation -o yaml` shows
progress while it runs and the scores when it ends (as `assay.runner.results.condensed`
condenses them). A progress write that fails is logged and dropped (the next percent's is
written); the last write, the scores or the failure, is tried again for up to
`FINAL_WRITE_PATIENCE` while the API server is unreachable or overloaded (a restart of the
API server must not lose a run's scores).

The scores go to status before the files go to disk: an emptyDir output dies with the
pod, so status is where a cluster run's scores live. Scores that cannot be written there
(refused, or the API server away past the patience) raise `ResultsNotRecorded`, which
fails the run (`assay.spec.RESULTS_NOT_RECORDED_EXIT_CODE`): the operator never calls a
run Succeeded without its scores. After the files, `output` reports whether they were
written (`status.outputFiles`, which the operator shows as the condition OutputWritten).

Each write is a JSON patch whose first operation tests the run's identity
(`status.jobName`, which the operator sets when it accepts a run; the generation when the
Job name is unknown), so a run that was superseded between its last read and its write
never lands in the newer run's status: the API server refuses the whole patch (422).

The requests go through `assay.kube` (the product's one client) as the runner's
service account, whose projected token it reads again as it rotates; its errors are read
by type (`assay.kube.api_errors.ApiError`, `api_session.UNREACHABLE`). Nothing here imports
`assay.operator` or kopf.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from assay import echoed_text
from assay import spec as spec_module
from assay.kube import api_errors, api_session, credentials
from assay.kube import client as kube_client
from assay.run_results import RunResults
from assay.runner.results import progress_gate, run_timing
from assay.runner.results.condensed import MAX_STATUS_BYTES, condense_results, progress_status
from assay.runner.results.progress_gate import DEFAULT_PROGRESS_INTERVAL

__all__ = [
    "MAX_STATUS_BYTES",
    "condense_results",
    "progress_status",
    "StatusSink",
    "NullSink",
    "UnreachableSink",
    "FileStatusSink",
    "KubernetesStatusSink",
    "ResultsNotRecorded",
    "sink_from_env",
]

logger = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 1024
FINAL_WRITE_PATIENCE = 300.0
"""Seconds the last status write is retried while the API server is unreachable, overloaded or restarting."""
_RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0)
"""Waits between tries of the last write; the last one repeats until the patience is spent."""
_TRANSIENT_STATUSES = {409, 429, 500, 502, 503, 504}
USER_AGENT = "assay-runner"

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
WRITTEN, SUPERSEDED, DROPPED = "written", "superseded", "dropped"
"""What became of one status write: it landed; a newer run owns the status now; it was lost."""


class StatusClient(Protocol):
    """What the sink asks of its client: `assay.kube.client.ApiClient`'s `request`."""

    def request(self, method: str, url: str, *, body: Any = None, content_type: str = "application/json") -> Any: ...


class ResultsNotRecorded(Exception):
    """The run's scores did not reach its Evaluation's status; the run has failed."""


class StatusSink(Protocol):
    def progress(self, done: int, total: int) -> None: ...

    def finished(self, results: RunResults, *, comparison: Mapping[str, Any] | None = None) -> bool:
        """True once the scores (and the `comparison` with the baseline) are in status; False
        when there is no status to hold them (`assay run`) or a newer run owns it; raises
        ResultsNotRecorded when they are lost."""

    def output(self, *, written: bool, message: str) -> None:
        """Whether the full results files were written (after `finished`), and where or why not."""

    def failed(self, message: str) -> None: ...


class NullSink:
    """Reports nowhere: `assay run` on a laptop, or a rank other than 0."""

    def progress(self, done: int, total: int) -> None:
        pass

    def finished(self, results: RunResults, *, comparison: Mapping[str, Any] | None = None) -> bool:
        return False

    def output(self, *, written: bool, message: str) -> None:
        pass

    def failed(self, message: str) -> None:
        pass


class UnreachableSink(NullSink):
    """A runner told to report to an Evaluation but without credentials: the run goes on
    (its files are written) but cannot succeed, as the operator will find no scores."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def finished(self, results: RunResults, *, comparison: Mapping[str, Any] | None = None) -> bool:
        raise ResultsNotRecorded(f"The scores could not be written to the Evaluation's status: {self.reason}.")


# --- sinks ----------------------------------------------------------------------------


class _ThrottledSink:
    """Progress when `progress_gate` lets it through (a visible change, at most once per
    `min_interval`: the operator's share of the API server's budget), and always the last step."""

    def __init__(self, *, min_interval: float, clock: Callable[[], float]) -> None:
        self.gate = progress_gate.ProgressGate(min_interval=min_interval, clock=clock)
        self.wall: Callable[[], float] = time.time
        self.timing = run_timing.RunTiming(started=run_timing.process_start_time())
        """`status.timing`: sent whole with every write (each write replaces the field)."""

    last_error: str = "no status write was tried"

    def _write(self, status: dict[str, Any], *, final: bool) -> str:
        """WRITTEN, SUPERSEDED or DROPPED (then `last_error` says why)."""
        raise NotImplementedError

    def progress(self, done: int, total: int) -> None:
        at = self.wall()
        if done == 0:  # reported once, as the first requests go to the model
            self.timing.mark(run_timing.REQUESTS_STARTED, at)
        if not self.gate.due(done, total):
            return
        updated = run_timing.iso(at)
        self._write(
            {"progress": progress_status(done, total, updated=updated), "timing": self.timing.fields()}, final=False
        )

    def finished(self, results: RunResults, *, comparison: Mapping[str, Any] | None = None) -> bool:
        status = condense_results(results)
        self.timing.mark(run_timing.FINISHED, self.wall())
        extra = {"comparison": dict(comparison)} if comparison is not None else {}
        extra["timing"] = self.timing.fields()
        outcome = self._write({**status, "runnerMessage": status["message"], **extra}, final=True)
        if outcome == DROPPED:
            raise ResultsNotRecorded(f"The scores could not be written to the Evaluation's status ({self.last_error}).")
        return outcome == WRITTEN

    def output(self, *, written: bool, message: str) -> None:
        # Best effort: the scores are in status already; the operator shows this as OutputWritten.
        self._write(
            {"outputFiles": {"written": written, "message": echoed_text.bounded(message, MAX_MESSAGE_CHARS)}},
            final=True,
        )

    def failed(self, message: str) -> None:
        # `message` for `kubectl get`; `runnerMessage` survives the operator's updates of
        # `message`, which may be computed from a read taken just before this write.
        # One line, bounded: it may quote a server's answer or a traceback's text.
        note = echoed_text.bounded(message, MAX_MESSAGE_CHARS)
        self._write({"message": note, "runnerMessage": note}, final=True)


class FileStatusSink(_ThrottledSink):
    """Writes the status fields as JSON to a file: `assay apply --local` under torchrun."""

    def __init__(
        self,
        path: str | Path,
        *,
        min_interval: float = DEFAULT_PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(min_interval=min_interval, clock=clock)
        self.path = Path(path)
        self.status: dict[str, Any] = {}

    def _write(self, status: dict[str, Any], *, final: bool) -> str:
        self.status.update(status)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.status, indent=2))
            tmp.replace(self.path)
        except OSError as error:
            self.last_error = f"{self.path}: {error.strerror or error}"
            logger.warning("Could not write the status file %s: %s", self.path, error)
            return DROPPED
        return WRITTEN


class KubernetesStatusSink(_ThrottledSink):
    """Patches `status` of one Evaluation through its status subresource, on `api` (an
    `assay.kube` client: the pod's service account unless one is given)."""

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        generation: int | None = None,
        job_name: str | None = None,
        api: StatusClient | None = None,
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
        self.api: StatusClient = api if api is not None else _cluster_client()
        self._path = f"/apis/{spec_module.API_VERSION}/namespaces/{namespace}/{spec_module.PLURAL}/{name}"

    def _write(self, status: dict[str, Any], *, final: bool) -> str:
        waited = 0.0
        for attempt in itertools.count():
            try:
                body = self._patch(status)
                kind = JSON_PATCH if isinstance(body, list) else MERGE_PATCH
                self.api.request("PATCH", f"{self._path}/status", body=body, content_type=kind)
                return WRITTEN
            except Exception as error:
                # 422: the identity test failed (or the status was invalid); 409: a conflict.
                if isinstance(error, api_errors.ApiError) and error.code in (409, 422) and self._superseded():
                    logger.warning(
                        "Evaluation %s/%s runs another Job now; this run's report is dropped.",
                        self.namespace,
                        self.name,
                    )
                    return SUPERSEDED
                delay = _RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)]
                if not final or not _transient(error) or waited + delay > self.final_patience:
                    self.last_error = _first_line(error)
                    logger.warning(
                        "Could not patch status of Evaluation %s/%s: %s", self.namespace, self.name, self.last_error
                    )
                    return DROPPED
                logger.warning(
                    "Could not patch status of Evaluation %s/%s (%s); trying again in %.0f s.",
                    self.namespace,
                    self.name,
                    _first_line(error),
                    delay,
                )
                self.sleep(delay)
                waited += delay
        raise AssertionError("unreachable")

    def _patch(self, status: Mapping[str, Any]) -> Any:
        """A JSON patch that lands only while the status is still this run's; a merge patch
        when the run's identity is unknown (a runner started by hand)."""
        test: dict[str, Any]
        if self.job_name is not None:
            test = {"op": "test", "path": "/status/jobName", "value": self.job_name}
        elif self.generation is not None:
            test = {"op": "test", "path": "/metadata/generation", "value": self.generation}
        else:
            return {"status": status}
        # `add` replaces a member that exists; the operator wrote /status (jobName) first.
        return [
            test,
            *(
                {"op": "add", "path": f"/status/{_pointer(key)}", "value": value}
                for key, value in status.items()
                if value is not None
            ),
        ]

    def read_evaluation(self, name: str) -> Mapping[str, Any]:
        """Another Evaluation of this namespace (the baseline), as the runner's Role lets it read."""
        path = f"/apis/{spec_module.API_VERSION}/namespaces/{self.namespace}/{spec_module.PLURAL}/{name}"
        body: dict[str, Any] = self.api.request("GET", path)
        return body

    def _superseded(self) -> bool:
        """Whether the Evaluation now runs another Job. By the run's Job name when known: a
        suspend/resume changes the generation but keeps the run, whose outcome must count."""
        try:
            current: dict[str, Any] = self.api.request("GET", self._path)
        except Exception as error:
            logger.warning("Could not read Evaluation %s/%s: %s", self.namespace, self.name, _first_line(error))
            return False
        if self.job_name is not None:
            return bool((current.get("status") or {}).get("jobName") != self.job_name)
        if self.generation is None:
            return False
        return int((current.get("metadata") or {}).get("generation", self.generation)) != self.generation


def _pointer(key: str) -> str:
    """A status key as one JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _transient(error: Exception) -> bool:
    """Worth another try: no answer at all (connection refused or reset, a timeout, the token
    file between two rotations), or an overloaded or restarting server; not a refusal (403,
    404, 422) nor a bug of ours, which a retry would only repeat."""
    if isinstance(error, api_errors.ApiError):
        return error.code in _TRANSIENT_STATUSES
    return isinstance(error, api_session.UNREACHABLE)


def _first_line(error: Exception) -> str:
    """One line on a failed call: the API server's own words for an HTTP error."""
    if isinstance(error, api_errors.ApiError):
        said = error.message or error.body
        text = f"HTTP {error.code} {error.reason}".rstrip() + (f": {said}" if said else "")
        return echoed_text.bounded(text, MAX_MESSAGE_CHARS // 2)
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _cluster_client() -> kube_client.ApiClient:
    """A client as the pod's service account (else a kubeconfig, for a runner started by hand)."""
    return kube_client.ApiClient(api_session.Session(credentials.load()), user_agent=USER_AGENT)


def sink_from_env(env: Mapping[str, str] | None = None) -> StatusSink:
    """The sink the runner pod's environment asks for (see the contract in assay.spec)."""
    env = os.environ if env is None else env
    interval = progress_gate.interval_from_env(env)
    if env.get(spec_module.ENV_STATUS_FILE):
        return FileStatusSink(env[spec_module.ENV_STATUS_FILE], min_interval=interval)
    name, namespace = env.get(spec_module.ENV_NAME), env.get(spec_module.ENV_NAMESPACE)
    if name and namespace:
        generation = env.get(spec_module.ENV_GENERATION)
        try:
            return KubernetesStatusSink(
                name=name,
                namespace=namespace,
                min_interval=interval,
                generation=int(generation) if generation else None,
                job_name=env.get(spec_module.ENV_JOB_NAME) or None,
            )
        except Exception as error:
            logger.warning(
                "No Kubernetes credentials to report status of %s/%s (%s); the run will write its files "
                "but fail, as its scores cannot reach status.",
                namespace,
                name,
                error,
            )
            return UnreachableSink(f"no Kubernetes credentials ({_first_line(error)})")
    return NullSink()
