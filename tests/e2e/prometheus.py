"""An own Prometheus for e2e tests: it discovers the operator pod through the real API server,
as the chart's ServiceMonitor tells a Prometheus Operator to, and scrapes it every second,
presenting what the ServiceMonitor says (with `bearerTokenFile`: a real token of a service
account bound to the chart's metrics-reader ClusterRole, as Prometheus's own would be).
It evaluates the chart's alerting rules every second: the PrometheusRule's `spec.groups` as
one rule file, as the Prometheus Operator writes it (`alerts` reads what fires)."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster.control_plane import die_with_parent, free_port
from tests.e2e.conftest import Cluster, metrics_reader_token, render_chart


def _scrape_config(cluster: Cluster, token_file: Path, reader_token_file: Path) -> dict[str, Any]:
    """A Prometheus job that finds the operator pod the way the chart's ServiceMonitor selects it:
    through the API server (endpoints of Services with its labels, in its namespaces, on its port),
    and scrapes it as the ServiceMonitor says (scheme, the scraper's own token)."""
    (monitor,) = [d for d in render_chart("metrics.serviceMonitor.enabled=true") if d["kind"] == "ServiceMonitor"]
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"]
    keep = [
        {
            "source_labels": [f"__meta_kubernetes_service_label_{re.sub(r'[^a-zA-Z0-9]', '_', key)}"],
            "regex": re.escape(value),
            "action": "keep",
        }
        for key, value in spec["selector"]["matchLabels"].items()
    ]
    keep.append(
        {"source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": endpoint["port"], "action": "keep"}
    )
    scrape: dict[str, Any] = {"scheme": endpoint.get("scheme", "http")}
    if endpoint.get("bearerTokenFile"):
        # The Prometheus pod's own account token in a cluster; here the reader account's.
        scrape["authorization"] = {"credentials_file": str(reader_token_file)}
    if scrape["scheme"] == "https":
        # As the ServiceMonitor says: the operator's self-signed certificate, not checked (the
        # chart's default), or a CA from metrics.tls.secretName's Secret, which the e2e install has not.
        assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}, endpoint
        scrape["tls_config"] = {"insecure_skip_verify": True}
    return {
        **scrape,
        "job_name": "assay-operator",
        "honor_labels": bool(endpoint.get("honorLabels")),
        "metrics_path": endpoint["path"],
        "kubernetes_sd_configs": [
            {
                "role": "endpoints",
                "api_server": cluster.plane.server,
                "namespaces": {"names": spec["namespaceSelector"]["matchNames"]},
                "authorization": {"credentials_file": str(token_file)},
                "tls_config": {"ca_file": str(cluster.plane.ca_file)},
            }
        ],
        "relabel_configs": keep,
    }


def _rule_file(path: Path) -> Path:
    """The chart's PrometheusRule (metrics.prometheusRule) as a Prometheus rule file at `path`."""
    (rule,) = [d for d in render_chart("metrics.prometheusRule.enabled=true") if d["kind"] == "PrometheusRule"]
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


@pytest.fixture
def prometheus(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """An own Prometheus on a loopback port, discovering the operator pod through the API server."""
    # Built by build.sh: Debian's package leaves Kubernetes service discovery out.
    binary = cluster.plane.bin_dir / "prometheus"
    assert binary.is_file(), f"{binary} is missing: run tests/e2e/cluster/build.sh"
    token_file = tmp_path / "token"
    token_file.write_text(cluster.plane.admin_token)
    reader_token_file = tmp_path / "reader-token"
    reader_token_file.write_text(metrics_reader_token(cluster.plane))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(_rule_file(tmp_path / "assay-rules.yml"))],
                "scrape_configs": [_scrape_config(cluster, token_file, reader_token_file)],
            }
        )
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        cluster.wait_for("Prometheus ready", lambda: get(f"{url}/-/ready") is not None, timeout=60)
        yield url
    finally:
        process.terminate()
        process.wait(15)
        log.close()


def get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read()
    except Exception:
        return None


def query(base: str, promql: str) -> list[dict[str, Any]]:
    body = get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if body is None:
        return []
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def alerts(base: str, state: str = "firing") -> list[dict[str, Any]]:
    """The `ALERTS` series in `state` (firing or pending): one per alert, its labels in `metric`."""
    return query(base, f'ALERTS{{alertstate="{state}"}}')
