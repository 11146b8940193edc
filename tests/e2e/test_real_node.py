"""What only a real node shows: the pods' security settings enforced by runc, logs through the
kubelet, image pulls that fail, the memory limit, and volumes that outlive the pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import OPERATOR_NAMESPACE, Cluster, evaluation_manifest
from tests.e2e.helpers import condensed, dummy_spec, hf_spec

pytestmark = pytest.mark.e2e

# What the operator and the chart ask of every pod, as the container runtime applied it.
PROBE = """
import json, os
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
try:
    open("/probe", "w")
    root = "writable"
except OSError as error:
    root = error.strerror
print(json.dumps({"uid": os.getuid(), "root": root, "CapEff": status["CapEff"].strip(),
                  "Seccomp": status["Seccomp"].strip(), "NoNewPrivs": status["NoNewPrivs"].strip()}))
"""


def _container_spec(cluster: Cluster, pod: dict[str, Any], container: str) -> dict[str, Any]:
    """The OCI runtime spec containerd gave one container of `pod` (it stays until the pod goes)."""
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    container_id = status["containerID"].removeprefix("containerd://")
    return dict(json.loads(cluster.node.ctr("containers", "info", container_id).stdout)["Spec"])


def test_runner_and_operator_run_unprivileged_on_a_read_only_root(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("locked-down", **dummy_spec()))
    cluster.wait("locked-down", "Succeeded", timeout=180)
    (pod,) = cluster.items("pods")
    spec = _container_spec(cluster, pod, "runner")
    assert spec["process"]["user"]["uid"] == 1000 and spec["process"]["user"]["gid"] == 1000
    assert spec["root"]["readonly"] is True
    assert spec["process"]["noNewPrivileges"] is True
    assert all(not spec["process"]["capabilities"].get(kind) for kind in ("bounding", "effective", "permitted"))
    assert spec["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"  # RuntimeDefault, not unconfined

    operator_pod = cluster.operator.pod()["metadata"]["name"]
    probe = cluster.plane.kubectl("exec", "-n", OPERATOR_NAMESPACE, operator_pod, "--", "python", "-c", PROBE)
    seen = json.loads(probe.stdout)
    assert seen == {
        "uid": 1000,
        "root": "Read-only file system",
        "CapEff": "0000000000000000",
        "Seccomp": "2",
        "NoNewPrivs": "1",
    }, seen


def test_kubectl_logs_shows_the_runs_progress(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("talkative", **hf_spec()))
    cluster.wait("talkative", "Succeeded", timeout=300)
    (pod,) = cluster.items("pods")
    logs = cluster.pod_logs(pod["metadata"]["name"], "runner")
    assert "rank 0 of 1: evaluating /cache/models/tiny-gpt2 on arc_easy, lambada_openai" in logs, logs[-3000:]
    assert "progress: 40 of 40 requests" in logs, logs[-3000:]
    assert "arc_easy" in logs and "lambada_openai" in logs  # the results table


def test_results_stay_on_the_output_volume_after_the_pods_are_gone(
    cluster: Cluster, local_results: dict[str, Any]
) -> None:
    cluster.apply(evaluation_manifest("kept", **hf_spec()))
    status = cluster.wait("kept", "Succeeded", timeout=300)["status"]
    cluster.kubectl("delete", "evaluation", "kept", "--timeout=60s")
    cluster.wait_for("the pods to go", lambda: not cluster.items("pods"), timeout=90)
    (saved,) = sorted((cluster.output_dir / "kept" / "g1").rglob("results_*.json"))
    results = json.loads(saved.read_text())
    assert condensed(results) == condensed(local_results) == {k: status[k] for k in ("results", "nSamples", "versions")}
    assert saved.stat().st_uid == 1000  # written by the runner, not by the test


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


def test_an_image_that_does_not_exist_is_reported_instead_of_waiting(cluster: Cluster, images: dict[str, str]) -> None:
    # A tag of the chart's runner repository: by default spec.image may name no other repository.
    image = images["runner"].rsplit(":", 1)[0] + ":does-not-exist"
    cluster.apply(evaluation_manifest("no-image", **dummy_spec(image=image)))

    def reported() -> dict[str, Any] | None:
        status = cluster.evaluation("no-image").get("status") or {}
        for condition in status.get("conditions") or ():
            if condition["reason"] in ("ErrImagePull", "ImagePullBackOff", "ImagePullFailed"):
                return dict(condition)
        return None

    condition = cluster.wait_for("the image pull failure in status", reported, timeout=120)
    assert image in condition["message"], condition
    table = cluster.kubectl("get", "evals", "no-image").stdout
    assert "Pending" in table or "Failed" in table, table


def test_a_runner_over_its_memory_limit_is_oom_killed_and_says_so(cluster: Cluster) -> None:
    # 64 MiB: importing torch alone needs several times that.
    cluster.apply(evaluation_manifest("tight", **hf_spec(resources={"nodes": 1, "gpusPerNode": 0, "memory": "64Mi"})))
    status = cluster.wait("tight", "Failed", timeout=240)["status"]
    (pod,) = cluster.items("pods")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137, terminated
    failed = _condition(status, "Failed")
    assert "OOMKilled" in (failed["reason"] + failed["message"]), failed
    assert "64Mi" in failed["message"], failed


def test_the_operator_pod_serves_metrics_on_its_pod_ip(cluster: Cluster, tmp_path: Path) -> None:
    cluster.apply(evaluation_manifest("scraped", **dummy_spec()))
    status = cluster.wait("scraped", "Succeeded", timeout=180)["status"]
    value = status["results"]["arc_easy"]["acc,none"]["value"]
    text = cluster.operator.metrics()
    line = next(
        row
        for row in text.splitlines()
        if row.startswith("assay_evaluation_score{")
        and f'namespace="{cluster.namespace}"' in row
        and 'evaluation="scraped"' in row
        and 'metric="acc"' in row
    )
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(value, abs=1e-12)
