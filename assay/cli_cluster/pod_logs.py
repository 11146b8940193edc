"""`assay logs`: the runner pods' logs, rank 0 first.

The runner pods of the current run carry the label `assay.dev/job=<status.jobName>`
(`builders.LABEL_JOB`); an Indexed Job (several nodes) numbers them with the completion
index, which is the node's rank, and a retry makes a new pod of the same rank. Rank 0
aggregates and writes the scores, so its log is the one people read: by default only its
pods, every attempt oldest first; `--all-ranks` adds the others in rank order. A pod whose
`check` init container failed never ran the runner, so its log is the check's.

Several pods are printed one after another under `==> pod (rank, phase) <==` headers, as
`tail` prints several files; `-f` on several ranks follows them at once, each line
prefixed with its pod's name, as `kubectl logs -f --prefix` does.
"""

from __future__ import annotations

import codecs
import dataclasses
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from assay.cli_cluster import cluster_api
from assay.operator.build import builders
from assay.operator.decide.peer_failures import COMPLETION_INDEX


@dataclasses.dataclass(frozen=True)
class RunnerPod:
    name: str
    rank: int
    phase: str
    container: str
    """The runner's container, or the check init container when that one failed."""


def selector(job_name: str) -> str:
    return f"{builders.LABEL_JOB}={job_name}"


def runner_pods(pods: Iterable[Mapping[str, Any]], *, all_ranks: bool) -> list[RunnerPod]:
    """Rank 0's pods, or every rank's, rank by rank; each rank's attempts oldest first."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        index = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or (meta.get("labels") or {}).get(
            COMPLETION_INDEX
        )
        rank = int(str(index)) if str(index or "").isdigit() else 0  # a NonIndexed Job's one pod is rank 0
        if rank == 0 or all_ranks:
            found.append(
                (
                    rank,
                    str(meta.get("creationTimestamp") or ""),
                    RunnerPod(
                        str(meta.get("name")),
                        rank,
                        str((pod.get("status") or {}).get("phase") or "Unknown"),
                        _container(pod),
                    ),
                )
            )
    return [runner for _, _, runner in sorted(found, key=lambda entry: (entry[0], entry[1], entry[2].name))]


def _container(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("initContainerStatuses") or ():
        ended = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == builders.CHECK_CONTAINER and ended.get("exitCode") not in (None, 0):
            return builders.CHECK_CONTAINER
    return builders.RUNNER_CONTAINER


def show(
    cluster: cluster_api.Cluster,
    evaluation: Mapping[str, Any],
    *,
    all_ranks: bool,
    follow: bool,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the logs; 1 when some pod's log could not be read (each said on `err`), else 0."""
    out, err = out or sys.stdout, err or sys.stderr
    meta, status = evaluation["metadata"], evaluation.get("status") or {}
    name, namespace, job = meta["name"], meta["namespace"], status.get("jobName")
    if not job:
        raise cluster_api.ClusterError(
            f'Evaluation "{name}" has no runner Job yet (phase {status.get("phase") or "Pending"}'
            f"{': ' + str(status['message']) if status.get('message') else ''})."
        )
    pods = runner_pods(cluster.pods(namespace=namespace, selector=selector(job)), all_ranks=all_ranks)
    if not pods:
        raise cluster_api.ClusterError(
            f'No runner pods of Job {job} (Evaluation "{name}") exist: they are not created '
            "yet, or were removed with the Job."
        )
    printer = _Printer(cluster, namespace=namespace, out=out, err=err, follow=follow)
    ranks = sorted({pod.rank for pod in pods})
    if follow and len(ranks) > 1:
        printer.concurrently([[pod for pod in pods if pod.rank == rank] for rank in ranks])
    else:
        printer.one_after_another(pods, headers=len(pods) > 1)
    return 1 if printer.failures else 0


class _Printer:
    def __init__(self, cluster: cluster_api.Cluster, *, namespace: str, out: TextIO, err: TextIO, follow: bool) -> None:
        self.cluster, self.namespace, self.out, self.err, self.follow = cluster, namespace, out, err, follow
        self.failures = 0
        self._lock = threading.Lock()

    def one_after_another(self, pods: Sequence[RunnerPod], *, headers: bool) -> None:
        for index, pod in enumerate(pods):
            if headers:
                container = f", container {pod.container}" if pod.container != builders.RUNNER_CONTAINER else ""
                gap = "\n" if index else ""  # tail's blank line between files
                self._write(f"{gap}==> {pod.name} (rank {pod.rank}, {pod.phase}{container}) <==\n")
            self._copy(pod, prefix="")

    def concurrently(self, ranks: Sequence[Sequence[RunnerPod]]) -> None:
        threads = [threading.Thread(target=self._follow_rank, args=(pods,), daemon=True) for pods in ranks]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # short waits: Ctrl-C reaches the main thread

    def _follow_rank(self, pods: Sequence[RunnerPod]) -> None:
        for pod in pods:
            self._copy(pod, prefix=f"[{pod.name}] ")

    def _copy(self, pod: RunnerPod, *, prefix: str) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        try:
            for chunk in self.cluster.log(
                namespace=self.namespace, pod=pod.name, container=pod.container, follow=self.follow
            ):
                pending += decoder.decode(chunk)
                if prefix:
                    pending = self._lines(pending, prefix)
                else:
                    self._write(pending)
                    pending = ""
        except cluster_api.ClusterError as error:
            with self._lock:
                self.failures += 1
                print(f"assay: error: pod {pod.name}: {error}", file=self.err)
        rest = pending + decoder.decode(b"", final=True)
        if rest:
            self._write(f"{prefix}{rest}\n" if prefix else rest)

    def _lines(self, text: str, prefix: str) -> str:
        """Write the whole lines of `text`, each prefixed; return the unfinished rest."""
        *lines, rest = text.split("\n")
        if lines:
            self._write("".join(f"{prefix}{line}\n" for line in lines))
        return rest

    def _write(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()
