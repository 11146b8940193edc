"""Nothing lost when a runner pod dies: evicted mid-run (as a node drain or preemption
does), the pod is replaced, the replacement answers what was already computed from the
run's response cache on the output volume, and the scores equal an uninterrupted run's."""

from __future__ import annotations

import calendar
import json
import re
import time
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import LONG_RUN, hf_spec

pytestmark = pytest.mark.e2e

# ~5,000 requests: the run reports progress and is evicted after a few hundred, well before its end.
RUN = {**LONG_RUN, "limit": 1000}
# Requests finished together, at most: a pass holds `batchSize` documents, an arc_easy document
# up to five choices.
PASS = 5 * RUN["batchSize"]
FROM_CACHE = re.compile(r"(\d+) of (\d+) requests answered from the response cache")


def _pods(cluster: Cluster, job: str) -> list[dict[str, Any]]:
    return cluster.items("pods", f"assay.dev/job={job}")


def _evict(cluster: Cluster, pod: str) -> None:
    """POST pods/eviction, what `kubectl drain` does: the pod gets the DisruptionTarget condition."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": cluster.namespace},
    }
    cluster.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{cluster.namespace}/pods/{pod}/eviction",
        "-f",
        "-",
        input=json.dumps(eviction),
    )


def test_an_evicted_runner_resumes_from_its_response_cache_with_the_same_scores(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("whole", **hf_spec(**RUN)))
    cluster.apply(evaluation_manifest("resumed", **hf_spec(**RUN)))
    started = cluster.wait_for(
        "the run to report progress",
        lambda: (
            (p := (cluster.evaluation("resumed").get("status") or {}).get("progress") or {}).get("requestsDone")
            and p["requestsDone"] < p["requestsTotal"]
            and p
        ),
        timeout=300,
        interval=0.5,
    )
    job_name = cluster.job_name("resumed")
    (first,) = _pods(cluster, job_name)
    evicted_at = time.time()
    _evict(cluster, first["metadata"]["name"])

    resumed = cluster.wait("resumed", "Succeeded", timeout=600)
    whole = cluster.wait("whole", "Succeeded", timeout=600)
    # Equal up to float noise: the recomputed requests are batched with other neighbours than
    # in the uninterrupted run, which moves a padded batch's floats in their last bits.
    ours, theirs = resumed["status"]["results"], whole["status"]["results"]
    assert {t: set(m) for t, m in ours.items()} == {t: set(m) for t, m in theirs.items()}
    for task, metrics in theirs.items():
        for key, entry in metrics.items():
            assert ours[task][key]["value"] == pytest.approx(entry["value"], rel=1e-5, abs=1e-9), (task, key)

    pods = _pods(cluster, job_name)
    (replacement,) = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
    job = cluster.get("job", job_name)
    assert job["status"].get("failed", 0) <= 1 and job["status"]["succeeded"] == 1
    # The evicted runner left at once on SIGTERM: the Job replaced it well within the pod's 30 s
    # grace period, which it waited out when the runner (PID 1) ignored the signal.
    created = calendar.timegm(time.strptime(replacement["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ"))
    assert created - evicted_at < 20, (created, evicted_at)
    log = cluster.kubectl("logs", replacement["metadata"]["name"]).stdout
    cached = [(int(a), int(n)) for a, n in FROM_CACHE.findall(log)]
    assert cached, f"the replacement did not report its cache hits:\n{log[-3000:]}"
    # One line per model call: one per request type (the runner sends each type in one call).
    answered, total = sum(a for a, _ in cached), sum(n for _, n in cached)
    print(
        f"the replacement answered {answered} of {total} requests from the cache; the first pod had reported "
        f"{started['requestsDone']} done"
    )
    # What the first pod reported done was committed: at most one pass per rank is recomputed.
    assert answered >= started["requestsDone"] - PASS, (cached, started)
    assert answered < total, cached  # and the rest was computed by the replacement
