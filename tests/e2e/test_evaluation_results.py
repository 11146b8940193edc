"""An Evaluation runs to the end on a real control plane, and its scores are right everywhere:
in status (equal to a local `assay run`), in `kubectl get`, and in Prometheus."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from assay.operator.decide import run_phases
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import HF_TASKS, MODEL_IN_POD, condensed, dummy_spec, hf_spec
from tests.e2e.prometheus import get as _get
from tests.e2e.prometheus import prometheus  # noqa: F401 - a fixture
from tests.e2e.prometheus import query as _query

pytestmark = pytest.mark.e2e


def test_hf_evaluation_succeeds_with_the_scores_of_a_local_run(
    cluster: Cluster, local_results: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.apply(evaluation_manifest("tiny-gpt2", **hf_spec()))
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
    job_name = cluster.job_name("tiny-gpt2")
    assert status["jobName"] == job_name and status["startTime"] and status["completionTime"]
    _report_the_cold_path(cluster, status, capsys)

    (job,) = cluster.items("jobs")
    assert job["metadata"]["name"] == job_name
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    # The pod ran as the runner's own ServiceAccount, which only the operator created.
    (pod,) = cluster.items("pods")
    assert pod["spec"]["serviceAccountName"] == cluster.runner_account("tiny-gpt2")

    events = cluster.wait_for(
        "the Events of the run",
        lambda: (e := cluster.events("tiny-gpt2")) and {"JobCreated", "Succeeded"} <= set(e) and e,
    )
    assert events["JobCreated"] == f"Created Job {job_name}."

    row = _printed_row(cluster.kubectl("get", "evals").stdout)
    assert list(row) == ["NAME", "MODEL", "TASKS", "PHASE", "REASON", "PROGRESS", "REGRESSED", "AGE"]
    done, total = status["progress"]["requestsDone"], status["progress"]["requestsTotal"]
    assert (row["NAME"], row["MODEL"], row["PHASE"]) == ("tiny-gpt2", MODEL_IN_POD, "Succeeded")
    assert row["PROGRESS"] == f"{done}/{total} (100%)"  # the finished run shows no ETA
    assert json.loads(row["TASKS"]) == HF_TASKS


def _report_the_cold_path(cluster: Cluster, status: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The run's phases from its status add up to the run, reach `assay_run_phase_seconds`, and are printed."""
    phases = run_phases.phase_seconds(status)
    assert phases is not None, status.get("timing")
    start, end = (run_phases.parse_time(status[key]) for key in ("startTime", "completionTime"))
    assert start is not None and end is not None
    # Each phase is clamped at zero against skew between the node's clock and the control plane's.
    assert sum(phases.values()) == pytest.approx((end - start).total_seconds(), abs=2.0), phases
    counted = cluster.wait_for(
        "assay_run_phase_seconds for the run",
        lambda: re.search(
            r'^assay_run_phase_seconds_count\{phase="startup"\} ([1-9][0-9.]*)$', cluster.operator.metrics(), re.M
        ),
    )
    assert counted
    with capsys.disabled():
        print(
            "\ncold path of a tiny Evaluation (tiny-gpt2, 2 tasks): "
            + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases.items())
            + f"; total {(end - start).total_seconds():.1f} s"
        )


def _printed_row(table: str) -> dict[str, str]:
    """The one row of `kubectl get` output, by column (cells may be empty)."""
    header, line = table.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    bounds = zip(starts, starts[1:] + [None], strict=False)
    return {header[a:b].strip(): line[a:b].strip() for a, b in bounds}


def test_prometheus_scrapes_the_score_from_the_operator(cluster: Cluster, prometheus: str) -> None:
    cluster.apply(evaluation_manifest("dummy-arc", **dummy_spec()))
    status = cluster.wait("dummy-arc", "Succeeded", timeout=180)["status"]
    expected = status["results"]["arc_easy"]["acc,none"]["value"]

    promql = (
        f'assay_evaluation_score{{namespace="{cluster.namespace}",evaluation="dummy-arc",'
        'task="arc_easy",metric="acc",filter="none"}'
    )
    series = cluster.wait_for(f"Prometheus to answer {promql}", lambda: _query(prometheus, promql), timeout=60)
    (sample,) = series
    assert float(sample["value"][1]) == pytest.approx(expected, abs=1e-12)
    assert sample["metric"]["model"] == "dummy"
    # The score can reach Prometheus one scrape before the phase does (the runner writes
    # results into status before its Job completes), so wait for the phase series too.
    phase_query = 'assay_evaluation_phase{evaluation="dummy-arc",phase="Succeeded"}'
    phase = cluster.wait_for(
        f"Prometheus to answer {phase_query} = 1",
        lambda: [row for row in _query(prometheus, phase_query) if float(row["value"][1]) == 1.0],
        timeout=60,
    )
    assert phase and float(phase[0]["value"][1]) == 1.0
    assert time.time() - float(sample["value"][0]) < 60
    # The target is the operator's pod, found through the API server, not a fixed address.
    (target,) = json.loads(_get(f"{prometheus}/api/v1/targets") or b"{}")["data"]["activeTargets"]
    assert target["health"] == "up", target
    # Over HTTPS, as the chart serves /metrics by default.
    assert target["scrapeUrl"].startswith(f"https://{cluster.operator.pod()['status']['podIP']}:")
