"""nodes: 2 runs an Indexed Job of two pods under torchrun (c10d rendezvous through the
headless Service, resolved by CoreDNS), and the scores equal a single-process run's.

Both pods run on the one real node: two kubelets on one machine would each need their own
containerd, cgroup root and loopback address, and show nothing more about Assay."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import LONG_RUN, condensed, hf_spec

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
    name = cluster.job_name("two-nodes")
    assert service["metadata"]["name"] == name and service["spec"]["clusterIP"] == "None"
    # The run's NetworkPolicy selects both of its pods and lets in those pods alone (every
    # port: the c10d store's, gloo's): no pod of another run or namespace reaches rank 0's store.
    policy = cluster.get("networkpolicy", name)
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert all(selector.items() <= p["metadata"]["labels"].items() for p in pods)
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    # The chart's network policies are on by default: its egress is those pods and the admin's rules.
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"][0] == {"to": [{"podSelector": {"matchLabels": selector}}]}
    # Both ranks ran the model and the status is rank 0's gathered result.
    # Rendezvous went through cluster DNS: pod 1 found `<job>-0.<job>`.
    logs = cluster.runner_logs()
    assert "rank 0 of 2: evaluating" in logs and "rank 1 of 2: evaluating" in logs
    assert {k: status.get(k) for k in ("results", "nSamples", "versions")} == condensed(local_results)


def _worker_pid(evaluation: str, rank: int) -> int | None:
    """The runner worker of `rank` in `evaluation`'s pods, as the host sees it (containers share its PID space)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = dict(
                item.split("=", 1)
                for item in (entry / "environ").read_bytes().decode(errors="replace").split("\0")
                if "=" in item
            )
        except OSError:
            continue
        if environ.get("ASSAY_EVALUATION_NAME") == evaluation and environ.get("RANK") == str(rank):
            return int(entry.name)
    return None


def test_one_ranks_failure_costs_one_retry_not_one_per_rank(cluster: Cluster) -> None:
    """Rank 1 fails (interrupted: it reports its failure to the others, as a CUDA OOM or a data
    error would); rank 0 stops for it with exit 75, which the Job's podFailurePolicy ignores.
    With backoffLimit 1 the Job so has a retry left, and the run resumes and succeeds; were
    rank 0's exit counted too, two failures would exceed the limit and fail the run."""
    cluster.apply(
        evaluation_manifest(
            "one-fault", **hf_spec(**LONG_RUN, resources={"nodes": 2, "gpusPerNode": 0}, backoffLimit=1)
        )
    )
    # Progress is reported as the model's batches finish; a slow machine may still take minutes to start.
    cluster.wait_for(
        "the run to report progress",
        lambda: ((cluster.evaluation("one-fault").get("status") or {}).get("progress") or {}).get("requestsDone"),
        timeout=420,
    )
    pid = cluster.wait_for("rank 1's worker process", lambda: _worker_pid("one-fault", 1), timeout=30)
    os.kill(pid, signal.SIGINT)

    status = cluster.wait("one-fault", "Succeeded", timeout=420)["status"]
    assert status["results"], status
    pods = cluster.items("pods")
    exits = sorted(
        (
            p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"],
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        )
        for p in pods
    )
    # The first attempt: rank 0 stopped for its peer (75), rank 1 interrupted (130); then both succeeded.
    assert exits == [("0", 0), ("0", 75), ("1", 0), ("1", 130)], exits
    (job,) = cluster.items("jobs")
    assert job["status"].get("failed", 0) == 1, job["status"]  # rank 1's failure alone counted
    logs = "\n".join(cluster.pod_logs(p["metadata"]["name"], "runner") for p in pods)
    assert "rank 1 failed: KeyboardInterrupt" in logs, logs[-3000:]
