"""Runs that cannot go on say why, on the real node: the scheduler's refusal, a quota that
refuses the runner pod, a run past its deadline; and an Evaluation name no child could
carry as it is (dots, 253 characters) still runs on two nodes.

The other stuck-run reasons have theirs elsewhere: image pulls and OOMKilled in
test_real_node.py, a runner that keeps failing (BackoffLimitExceeded) and a configuration
error (PodFailurePolicy) in test_evaluation_lifecycle.py. CrashLoopBackOff cannot happen to
a runner: its pods have restartPolicy Never, so each retry is a new pod of the Job.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import LONG_RUN, dummy_spec, hf_spec

pytestmark = pytest.mark.e2e

DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _reason(cluster: Cluster, name: str, reason: str) -> dict[str, Any] | None:
    status = cluster.evaluation(name).get("status") or {}
    return status if status.get("reason") == reason else None


def _shown_by_kubectl(cluster: Cluster, name: str, reason: str) -> None:
    """`kubectl get evals` shows the reason; `kubectl describe` the Warning Event with its sentence."""
    table = cluster.kubectl("get", "evals", name).stdout
    assert reason in table, table
    described = cluster.wait_for(
        f"a {reason} Event in kubectl describe",
        lambda: (lambda text: text if re.search(rf"Warning\s+{reason}\b", text) else None)(
            cluster.kubectl("describe", "evaluation", name).stdout
        ),
        timeout=30,
    )
    assert "Warning" in described


def test_a_run_no_node_can_take_is_unschedulable_in_the_schedulers_words(cluster: Cluster) -> None:
    # The node has no GPUs: the scheduler parks the pod and says why on its PodScheduled condition.
    cluster.apply(evaluation_manifest("wants-gpu", **dummy_spec(resources={"nodes": 1, "gpusPerNode": 1})))
    status = cluster.wait_for(
        "reason Unschedulable", lambda: _reason(cluster, "wants-gpu", "Unschedulable"), timeout=120
    )
    assert status["phase"] == "Pending"
    assert "cannot be scheduled" in status["message"] and "Insufficient nvidia.com/gpu" in status["message"], status
    running = {c["type"]: c for c in status["conditions"]}["Running"]
    assert running["status"] == "False" and running["reason"] == "Unschedulable"
    _shown_by_kubectl(cluster, "wants-gpu", "Unschedulable")


def test_a_quota_that_refuses_the_runner_pod_shows_failed_create(cluster: Cluster) -> None:
    cluster.apply(
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    )
    # Admission enforces a quota once its controller has counted what it covers.
    cluster.wait_for(
        "the quota counted",
        lambda: (cluster.get("resourcequota", "no-pods").get("status") or {}).get("hard", {}).get("pods") == "0",
        timeout=60,
    )
    cluster.apply(evaluation_manifest("over-quota", **dummy_spec()))
    # The Job controller's FailedCreate Events are read once the Job has lacked its pod for a
    # while (15 s), by the next look at Pending runs (every 20 s).
    status = cluster.wait_for(
        "reason FailedCreate", lambda: _reason(cluster, "over-quota", "FailedCreate"), timeout=120
    )
    assert status["phase"] == "Pending" and not cluster.items("pods")
    assert "cannot create runner pods" in status["message"] and "exceeded quota: no-pods" in status["message"], status
    _shown_by_kubectl(cluster, "over-quota", "FailedCreate")


def test_a_run_past_its_deadline_fails_with_deadline_exceeded(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("too-slow", **hf_spec(**LONG_RUN, activeDeadlineSeconds=8)))
    status = cluster.wait("too-slow", "Failed", timeout=180)["status"]
    assert status["reason"] == "DeadlineExceeded", status
    assert "took longer than spec.activeDeadlineSeconds (8 s)" in status["message"], status
    (job,) = cluster.items("jobs")
    assert job["spec"]["activeDeadlineSeconds"] == 8
    assert any(c["type"] == "Failed" and c["reason"] == "DeadlineExceeded" for c in job["status"]["conditions"])


def _dotted_name(length: int) -> str:
    """`llama-3.1-8b.mmlu` and more dotted parts, to exactly `length` characters."""
    name, part = "llama-3.1-8b.mmlu", 0
    while len(name) + 10 <= length - 2:
        part += 1
        name += f".shard-{part:03d}"
    return name + "." + "x" * (length - len(name) - 1)


def test_a_dotted_name_of_253_characters_runs_on_two_nodes_with_valid_children(cluster: Cluster) -> None:
    name = _dotted_name(253)
    assert len(name) == 253
    cluster.apply(evaluation_manifest(name, **hf_spec(resources={"nodes": 2, "gpusPerNode": 0})))
    status = cluster.wait(name, "Succeeded", timeout=300)["status"]

    (job,) = cluster.items("jobs")
    (service,) = cluster.items("services")
    assert status["jobName"] == job["metadata"]["name"]
    for child in (
        job,
        service,
        *cluster.items("serviceaccounts"),
        *cluster.items("roles"),
        *cluster.items("rolebindings"),
    ):
        child_name = child["metadata"]["name"]
        assert DNS1035_LABEL.fullmatch(child_name) and len(child_name) <= 63, child_name
        assert all(len(value) <= 63 for value in (child["metadata"].get("labels") or {}).values()), child["metadata"]
    # The ranks found each other through the Service: pod 1 resolved `<job>-0.<service>`.
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    logs = cluster.runner_logs()
    assert "rank 0 of 2: evaluating" in logs and "rank 1 of 2: evaluating" in logs
    assert status["results"], status
