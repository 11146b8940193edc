"""The Grafana dashboard, proven on a real Prometheus: after two Evaluations of two models
finish (and one is refused), every panel's PromQL, with the dashboard's variables
substituted as Grafana would, returns at least one series. The panels about running
Evaluations (progress, ETA) are queried while a third, long run is in progress, which is then
deleted rather than waited for; those about a comparison with a baseline (NEEDS_BASELINE) are
left to the test of regression gates."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.dashboard_panels import DASHBOARD, NEEDS_BASELINE, panel_series, substituted
from tests.e2e.helpers import LONG_RUN, MODEL_IN_POD, SECOND_MODEL_IN_POD, dummy_spec, hf_spec
from tests.e2e.prometheus import prometheus, query  # noqa: F401  (fixture)

pytestmark = pytest.mark.e2e

SUITE = "dashboard"
# Panels whose series exist only while an Evaluation runs.
WHILE_RUNNING = ("Running evaluations: progress and ETA", "Progress of running evaluations")


def _in_suite(name: str, **spec: Any) -> dict[str, Any]:
    manifest = evaluation_manifest(name, **spec)
    manifest["metadata"]["labels"] = {"assay.dev/suite": SUITE}
    return manifest


def test_every_dashboard_panel_returns_series_from_a_real_prometheus(
    cluster: Cluster,
    prometheus: str,
    second_model: Path,
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = {panel["title"]: panel for panel in dashboard["panels"]}
    assert set(WHILE_RUNNING) <= set(panels) and set(NEEDS_BASELINE) <= set(panels)
    ns = cluster.namespace

    # A quarter of a core: the long run's ~20 s of scoring on two cores stretches past several
    # progress reports (an ETA needs two) and Prometheus scrapes, however fast the engine gets.
    slow = {"nodes": 1, "gpusPerNode": 0, "cpu": "250m"}
    cluster.apply(_in_suite("board-running", **hf_spec(**LONG_RUN, resources=slow)))
    cluster.apply(_in_suite("board-a", **hf_spec()))
    cluster.apply(_in_suite("board-b", **hf_spec(model=SECOND_MODEL_IN_POD)))
    cluster.apply(_in_suite("board-refused", **dummy_spec(tasks=["no_such_task"])))

    def long_run_shown(title: str) -> list[dict[str, Any]] | None:
        """The panel's series once every target has one for the long run (the short runs' may come and go)."""
        per_target = [query(prometheus, substituted(t["expr"], ns)) for t in panels[title]["targets"]]
        if all(any(row["metric"].get("evaluation") == "board-running" for row in rows) for rows in per_target):
            return [row for rows in per_target for row in rows]
        return None

    answered: dict[str, list[dict[str, Any]]] = {}
    for title in WHILE_RUNNING:
        answered[title] = cluster.wait_for(
            f"the panel {title!r} to show the long run",
            lambda title=title: long_run_shown(title),
            timeout=300,
            interval=1.0,
        )
    eta = [
        row
        for row in answered["Running evaluations: progress and ETA"]
        if row["metric"].get("__name__") == "assay_evaluation_eta_seconds"
        and row["metric"]["evaluation"] == "board-running"
    ]
    assert eta and float(eta[0]["value"][1]) >= 0, answered
    # Its end adds nothing the panels below need (minutes at a quarter of a core): deleted, it
    # leaves the metrics with its Evaluation.
    cluster.kubectl("delete", "evaluation", "board-running", "--wait=false")

    for name in ("board-a", "board-b"):
        cluster.wait(name, "Succeeded", timeout=600)
    assert cluster.wait("board-refused", "Failed", timeout=60)["status"]["reason"] == "InvalidSpec"

    for title, panel in panels.items():
        if title not in WHILE_RUNNING + NEEDS_BASELINE:
            answered[title] = cluster.wait_for(
                f"the panel {title!r} to return series",
                lambda panel=panel: panel_series(prometheus, panel, ns),
                timeout=90,
            )
    report = {title: len(rows) for title, rows in answered.items()}
    print("dashboard panels and the series each returned:", json.dumps(report, indent=1))
    assert set(report) == set(panels) - set(NEEDS_BASELINE) and all(report.values()), report

    # The series say what the panels claim: both models on the leaderboard, the refusal by its reason.
    leaderboard = answered["Leaderboard: score per model, revision and task"]
    assert {row["metric"]["model"] for row in leaderboard} == {MODEL_IN_POD, SECOND_MODEL_IN_POD}
    (failure,) = answered["Failed evaluations by reason"]
    assert failure["metric"] == {"reason": "InvalidSpec"} and float(failure["value"][1]) == 1.0
    over_time = answered["Score over time by model revision and suite"]
    assert {row["metric"]["suite"] for row in over_time} == {SUITE}

    # Every variable's query finds values (label_values(selector, label) → that label on the selector's series).
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"]).groups()
        values = {row["metric"].get(label, "") for row in query(prometheus, substituted(selector, ns))}
        assert values - {""}, f"the variable {variable['name']} has no values"
