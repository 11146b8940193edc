"""nodes: 2 runs an Indexed Job of two pods under torchrun (c10d rendezvous through the
headless Service, resolved by CoreDNS), and the scores equal a single-process run's.

Both pods run on the one real node: two kubelets on one machine would each need their own
containerd, cgroup root and loopback address, and show nothing more about Assay."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import condensed, hf_spec

pytestmark = pytest.mark.e2e


def test_two_nodes_give_the_results_of_one(cluster: Cluster, local_results: dict[str, Any]) -> None:
    cluster.apply(evaluation_manifest("two-nodes", **hf_spec(resources={"nodes": 2, "gpusPerNode": 0})))
    status = cluster.wait("two-nodes", "Succeeded", timeout=300)["status"]

    (job,) = cluster.items("jobs")
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    pods = cluster.items("pods")
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1"]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    (service,) = cluster.items("services")
    assert service["metadata"]["name"] == "two-nodes-g1" and service["spec"]["clusterIP"] == "None"
    # Both ranks ran the model and the status is rank 0's gathered result.
    # Rendezvous went through cluster DNS: pod 1 found `two-nodes-g1-0.two-nodes-g1`.
    logs = cluster.runner_logs()
    assert "rank 0 of 2: evaluating" in logs and "rank 1 of 2: evaluating" in logs
    assert {k: status.get(k) for k in ("results", "nSamples", "versions")} == condensed(local_results)
