"""The bound on ranks that stop because a peer reported its failure (exit 75).

The Job's podFailurePolicy ignores exit 75 (`assay.spec.PEER_FAILED_EXIT_CODE`), so that
one fault costs one retry, not one per rank. Kubernetes has no rule that ignores an exit
code only N times (Ignore is unbounded, Count would charge every rank of one fault to
backoffLimit), so a rank that ends 75 again and again (a peer preempted over and over, an
image that always exits 75) would be retried for ever. The operator counts instead, from
the pods the Job keeps (an ignored pod stays, Failed, until the Job goes): per completion
index, less the failures the Job counted (`status.failed`), since each counted failure of
one rank makes every other rank end 75 once. Past the admin's
`policy.maxPeerFailureRetries` the run fails (`diagnosis.PEER_FAILURES_EXCEEDED`, fatal:
the operator ends the Job). The Job's count may trail the pods by one sync, so a bound of
at least 1 absorbs a real failure seen before the Job counted it.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from assay.operator import objects
from assay.operator.decide.diagnosis import PEER_FAILURES_EXCEEDED, Problem
from assay.spec import PEER_FAILED_EXIT_CODE

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The Job controller's annotation (and, since Kubernetes 1.28, label) of an Indexed pod's rank."""


def _stopped_for_peer(pod: objects.Pod) -> bool:
    status = pod.get("status") or {}
    return any(
        ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == PEER_FAILED_EXIT_CODE
        for s in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    )


def _index(pod: objects.Pod) -> str:
    """A pod's completion index; "0" for the one pod of a NonIndexed Job."""
    meta = pod.get("metadata") or {}
    index = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or (meta.get("labels") or {}).get(COMPLETION_INDEX)
    return str(index or 0)


def exceeded(job: objects.Job, pods: Sequence[objects.Pod], *, max_retries: int) -> Problem | None:
    """A rank that stopped for a peer's failure more often than the admin allows; `max_retries` 0: no bound."""
    if max_retries <= 0:
        return None
    stopped = collections.Counter(_index(pod) for pod in pods if _stopped_for_peer(pod))
    if not stopped:
        return None
    index, times = stopped.most_common(1)[0]
    counted = int((job.get("status") or {}).get("failed") or 0)
    if times - counted <= max_retries:
        return None
    name = (job.get("metadata") or {}).get("name", "?")
    return Problem(
        PEER_FAILURES_EXCEEDED,
        f"Rank {index} of Job {name} stopped {times} times for a peer's reported "
        f"failure, more than the Job's {counted} counted failures and "
        f"policy.maxPeerFailureRetries ({max_retries}) allow; see kubectl logs of "
        "its other pods for the failure behind it.",
        fatal=True,
    )
