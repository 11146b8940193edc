"""The operator's /metrics names every namespace's Evaluations, models and scores: on a real API
server it answers only a caller whose token the API server authenticates (TokenReview) and
allows to get /metrics (SubjectAccessReview, the chart's metrics-reader ClusterRole), and only
over HTTPS, with the certificate the operator made itself at start (the chart's default). The
pod's IP on the node's bridge is reachable from this host, as from a pod of the cluster (the e2e
network plugin enforces no NetworkPolicy: the chart's are only checked to be accepted)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    OPERATOR_NAMESPACE,
    RELEASE,
    Cluster,
    evaluation_manifest,
    metrics_reader_token,
    self_signed_ok,
)
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=self_signed_ok()) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_answer_only_the_metrics_reader_over_https(cluster: Cluster, tmp_path: Path) -> None:
    cluster.apply(evaluation_manifest("tenant-scored", **dummy_spec()))
    cluster.wait("tenant-scored", "Succeeded", timeout=180)
    pod = cluster.operator.pod()
    address = (pod["status"]["podIP"], cluster.operator.metrics_port)
    url = f"https://{address[0]}:{address[1]}/metrics"
    # The certificate is the operator's own, made at its start for its pod's name: self-signed.
    pem = tmp_path / "served.crt"
    pem.write_text(ssl.get_server_certificate(address, timeout=10))
    certificate = ssl._ssl._test_decode_cert(str(pem))  # type: ignore[attr-defined]
    assert certificate["subject"] == certificate["issuer"], certificate
    assert ("DNS", pod["metadata"]["name"]) in certificate["subjectAltName"], certificate
    with pytest.raises(OSError):  # plain HTTP gets no answer
        urllib.request.urlopen(url.replace("https:", "http:"), timeout=10)

    status, body = _get(url)
    assert status == 401, body
    assert _get(url, "not-a-token-the-api-server-knows")[0] == 401
    # A tenant's own account: the API server knows it, RBAC does not let it read /metrics.
    cluster.kubectl("create", "serviceaccount", "tenant")
    tenant = cluster.kubectl("create", "token", "tenant", "--duration=10m").stdout.strip()
    status, body = _get(url, tenant)
    assert status == 403, body
    assert "assay_evaluation" not in body

    status, body = _get(url, metrics_reader_token(cluster.plane))
    assert status == 200, body
    score = [
        line
        for line in body.splitlines()
        if line.startswith("assay_evaluation_score{")
        and f'namespace="{cluster.namespace}"' in line
        and 'evaluation="tenant-scored"' in line
    ]
    assert score, body[-2000:]
    # The operator's own series: the chart's replica leads, and its decisions were timed.
    assert "assay_leader 1.0" in body.splitlines()
    assert any(
        line.startswith('assay_reconcile_duration_seconds_count{kind="Evaluation"}') for line in body.splitlines()
    )
    assert "assay_workqueue_depth" in body and "assay_metric_series_dropped" in body


def test_the_api_server_accepts_the_charts_network_policy(cluster: Cluster) -> None:
    fullname = RELEASE if "assay" in RELEASE else f"{RELEASE}-assay"
    policy = cluster.plane.kubectl(
        "-n", OPERATOR_NAMESPACE, "get", "networkpolicy", f"{fullname}-operator", "-o", "jsonpath={.spec.policyTypes}"
    )
    assert policy.stdout.strip() == '["Ingress","Egress"]'
