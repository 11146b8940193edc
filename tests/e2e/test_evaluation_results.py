"""An Evaluation runs to the end on a real control plane, and its scores are right everywhere:
in status (equal to a local `assay run`), in `kubectl get`, and in Prometheus."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.e2e.cluster.control_plane import die_with_parent, free_port
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import HF_TASKS, condensed, dummy_spec, hf_spec

pytestmark = pytest.mark.e2e


def test_hf_evaluation_succeeds_with_the_scores_of_a_local_run(cluster: Cluster, tiny_model: Path,
                                                               local_results: dict[str, Any]) -> None:  # fmt: skip
    cluster.apply(evaluation_manifest("tiny-gpt2", **hf_spec(tiny_model)))
    cluster.wait("tiny-gpt2", "Succeeded", timeout=300)
    cluster.kubectl_wait("tiny-gpt2", "Succeeded")
    evaluation = cluster.evaluation("tiny-gpt2")
    status = evaluation["status"]

    assert status["phase"] == "Succeeded"
    assert status["observedGeneration"] == evaluation["metadata"]["generation"] == 1
    assert {k: status.get(k) for k in ("results", "nSamples", "versions")} == condensed(local_results)
    assert set(status["results"]) == set(HF_TASKS)
    assert status["progress"]["requestsDone"] == status["progress"]["requestsTotal"] > 0
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Succeeded"]["status"] == "True" and conditions["Failed"]["status"] == "False"
    assert conditions["Accepted"]["status"] == "True"
    assert all(c["observedGeneration"] == 1 for c in conditions.values())
    assert status["jobName"] == "tiny-gpt2-g1" and status["startTime"] and status["completionTime"]

    (job,) = cluster.items("jobs")
    assert job["metadata"]["name"] == "tiny-gpt2-g1"
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    # The pod ran as the runner's own ServiceAccount, which only the operator created.
    (pod,) = cluster.items("pods")
    assert pod["spec"]["serviceAccountName"] == "tiny-gpt2-runner"

    events = cluster.wait_for("the Events of the run",
                              lambda: (e := cluster.events("tiny-gpt2")) and {"JobCreated", "Succeeded"} <= set(e) and e)  # fmt: skip
    assert events["JobCreated"] == "Created Job tiny-gpt2-g1."

    table = cluster.kubectl("get", "evals").stdout.splitlines()
    assert table[0].split() == ["NAME", "MODEL", "TASKS", "PHASE", "PROGRESS", "AGE"]
    row = table[1].split()
    assert row[:2] == ["tiny-gpt2", str(tiny_model)] and row[3:5] == ["Succeeded", "100%"]
    assert json.loads(row[2]) == HF_TASKS


# --- Prometheus ----------------------------------------------------------------------


@pytest.fixture
def prometheus(cluster: Cluster, tmp_path: Path) -> Iterator[str]:
    """An own Prometheus (Debian's package) on a loopback port, scraping the operator each second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install -y --no-install-recommends prometheus)")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: assay-operator\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{cluster.operator.metrics_port}']}}]\n"
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        cluster.wait_for("Prometheus ready", lambda: _get(f"{url}/-/ready") is not None, timeout=60)
        yield url
    finally:
        process.terminate()
        process.wait(15)
        log.close()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read()
    except Exception:  # noqa: BLE001 - not up yet
        return None


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if body is None:
        return []
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_prometheus_scrapes_the_score_from_the_operator(cluster: Cluster, prometheus: str) -> None:
    cluster.apply(evaluation_manifest("dummy-arc", **dummy_spec()))
    status = cluster.wait("dummy-arc", "Succeeded", timeout=180)["status"]
    expected = status["results"]["arc_easy"]["acc,none"]["value"]

    promql = (f'assay_evaluation_score{{namespace="{cluster.namespace}",evaluation="dummy-arc",'
              'task="arc_easy",metric="acc",filter="none"}')  # fmt: skip
    series = cluster.wait_for(f"Prometheus to answer {promql}", lambda: _query(prometheus, promql), timeout=60)
    (sample,) = series
    assert float(sample["value"][1]) == pytest.approx(expected, abs=1e-12)
    assert sample["metric"]["model"] == "dummy"
    # The score can reach Prometheus one scrape before the phase does (the runner writes
    # results into status before its Job completes), so wait for the phase series too.
    phase_query = f'assay_evaluation_phase{{evaluation="dummy-arc",phase="Succeeded"}}'
    phase = cluster.wait_for(
        f"Prometheus to answer {phase_query} = 1",
        lambda: [row for row in _query(prometheus, phase_query) if float(row["value"][1]) == 1.0],
        timeout=60,
    )
    assert phase and float(phase[0]["value"][1]) == 1.0
    assert time.time() - float(sample["value"][0]) < 60
