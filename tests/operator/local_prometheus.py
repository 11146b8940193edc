"""A real Prometheus on 127.0.0.1 scraping a real /metrics server of `EvaluationMetrics`
every second and evaluating the chart's alerting rules every second.

The binary is the e2e suite's (tests/e2e/cluster/build.sh builds it into the Kubernetes
binaries' cache; neither it nor Debian's package brings promtool): without it, the tests
that use `prometheus` skip. Its rules are what a Prometheus Operator makes of the chart's
PrometheusRule: the object's `spec.groups` as one rule file.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from assay.operator.runtime.metrics import EvaluationMetrics
from tests.e2e.cluster.control_plane import cache_dir, die_with_parent, free_port, k8s_version
from tests.operator.helm_chart import CHART, HELM

BINARY = cache_dir() / k8s_version() / "bin" / "prometheus"
T = TypeVar("T")


def rule_groups() -> list[dict[str, Any]]:
    """The `spec.groups` of the chart's PrometheusRule, rendered with it enabled."""
    assert HELM is not None
    out = subprocess.run(
        [
            HELM,
            "template",
            "ev",
            str(CHART),
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (rule,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, EvaluationMetrics]]:
    """(Prometheus's URL, the metrics it scrapes)."""
    if not BINARY.is_file():
        pytest.skip(f"{BINARY} is missing: tests/e2e/cluster/build.sh builds it")
    metrics = EvaluationMetrics()
    server, thread = metrics.start_server(0, addr="127.0.0.1")
    rules = tmp_path / "assay-rules.yml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [
                    {
                        "job_name": "assay-operator",
                        "honor_labels": True,
                        "static_configs": [{"targets": [f"127.0.0.1:{server.server_port}"]}],
                    }
                ],
            }
        )
    )
    port = free_port()
    log_path = tmp_path / "prometheus.log"
    log = open(log_path, "wb")
    process = subprocess.Popen(
        [
            BINARY,
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
        wait(
            lambda: process.poll() is None and get(f"{url}/-/ready") is not None,
            lambda: f"Prometheus is not ready: {log_path.read_text()[-2000:]}",
        )
        yield url, metrics
    finally:
        process.terminate()
        process.wait(15)
        log.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bytes(response.read())
    except OSError:
        return None


def api(url: str) -> Any:
    """The `data` of a Prometheus API answer; None while it does not answer."""
    body = get(url)
    return None if body is None else json.loads(body)["data"]


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = api(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    return list(answer["result"]) if answer else []


def wait(found: Callable[[], T], why: Callable[[], str], timeout: float = 30.0) -> T:
    """The first truthy `found()`, polled; an AssertionError saying `why()` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(why())
