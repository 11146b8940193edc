"""The dashboard's interval and versus-baseline panels, queried on a real Prometheus that
scrapes a real /metrics server: each returns the series it claims, with the dashboard's
variables substituted as Grafana would at "All". (tests/e2e/test_dashboard.py proves every
other panel against a cluster's runs.)"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from assay.operator.runtime.metrics import EvaluationMetrics
from tests.operator.helm_chart import CHART, needs_helm
from tests.operator.local_prometheus import prometheus, query, wait  # noqa: F401  (fixture)
from tests.operator.metrics_scrape import scored_evaluation

pytestmark = [needs_helm, pytest.mark.slow]
INTERVALS = "Scores with 95% confidence interval"
REGRESSED = "Versus baseline: regressed"
DELTAS = "Versus baseline: delta with confidence interval"
SCORE_BARS = "Scores with 95% error bars"
DELTA_BARS = "Versus baseline: delta with its interval (bars)"


def _panels() -> dict[str, dict[str, Any]]:
    dashboard = json.loads((CHART / "dashboards" / "assay.json").read_text())
    return {panel["title"]: panel for panel in dashboard["panels"]}


def _substituted(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr.replace("$namespace", "team"))


def _answers(url: str, panel: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each target's rows, by the column name the panel's organize transformation gives it."""
    names = next((t["options"].get("renameByName", {}) for t in panel["transformations"] if t["id"] == "organize"), {})
    answers = {}
    for target in panel["targets"]:
        column = names.get(f"Value #{target['refId']}") or names.get("Value") or target["refId"]
        answers[column] = query(url, _substituted(target["expr"]))
    return answers


def test_intervals_and_versus_baseline_panels_on_a_real_prometheus(prometheus: tuple[str, EvaluationMetrics]) -> None:
    url, metrics = prometheus
    candidate = scored_evaluation("candidate")
    candidate["status"]["comparison"] = {
        "baseline": "base-eval",
        "verdict": "regressed",
        "message": "arc_easy acc is worse.",
        "rowsOmitted": 0,
        "rows": [
            {
                "task": "arc_easy",
                "metric": "acc",
                "filter": "none",
                "n": 200,
                "baseline": 0.67,
                "candidate": 0.61,
                "delta": -0.06,
                "ciLow": -0.09,
                "ciHigh": -0.03,
                "pValue": 0.001,
                "test": "mcnemar",
                "mde": 0.04,
                "verdict": "regressed",
            }
        ],
    }
    metrics.observe(scored_evaluation("base-eval"))
    metrics.observe(candidate)
    panels = _panels()
    wanted = {INTERVALS: 3, REGRESSED: 1, DELTAS: 3, SCORE_BARS: 7, DELTA_BARS: 7}
    answers = {
        title: wait(
            lambda title=title: (a := _answers(url, panels[title])) and all(a.values()) and a,
            lambda title=title: f"the panel {title!r} returns no series",
            timeout=30,
        )
        for title in wanted
    }
    assert {title: len(a) for title, a in answers.items()} == wanted

    intervals = answers[INTERVALS]
    acc = {
        column: [
            float(r["value"][1])
            for r in rows
            if r["metric"]["task"] == "arc_easy"
            and r["metric"]["metric"] == "acc"
            and r["metric"]["evaluation"] == "candidate"
        ]
        for column, rows in intervals.items()
    }
    assert acc == {
        "score": [0.61],
        "95% low": [pytest.approx(0.61 - 1.96 * 0.01)],
        "95% high": [pytest.approx(0.61 + 1.96 * 0.01)],
    }

    (regressed,) = answers[REGRESSED]["verdict"]
    assert regressed["metric"] == {"namespace": "team", "evaluation": "candidate", "baseline": "base-eval"}
    assert float(regressed["value"][1]) == 1.0
    for column, value in (("delta", -0.06), ("interval low", -0.09), ("interval high", -0.03)):
        (row,) = answers[DELTAS][column]
        assert row["metric"] == {
            "namespace": "team",
            "evaluation": "candidate",
            "baseline": "base-eval",
            "model": "EleutherAI/pythia-160m",
            "task": "arc_easy",
            "metric": "acc",
            "filter": "none",
        }
        assert float(row["value"][1]) == pytest.approx(value)

    # The bars: a transparent offset and the interval's part on each side of 0, per row; stacked,
    # they span exactly [low, high] (here wholly below 0: nothing above it).
    bars = {
        column: [float(r["value"][1]) for r in rows if r["metric"]["row"] == "candidate arc_easy acc none"]
        for column, rows in answers[DELTA_BARS].items()
    }
    assert bars == {
        "offset below 0": [pytest.approx(-0.03)],
        "interval below 0": [pytest.approx(-0.06)],
        "offset above 0": [0.0],
        "interval above 0": [0.0],
        "delta": [pytest.approx(-0.06)],
        "interval low": [pytest.approx(-0.09)],
        "interval high": [pytest.approx(-0.03)],
    }
    scores = {
        column: [float(r["value"][1]) for r in rows if r["metric"]["row"] == "candidate arc_easy acc none"]
        for column, rows in answers[SCORE_BARS].items()
    }
    low, high = 0.61 - 1.96 * 0.01, 0.61 + 1.96 * 0.01
    assert scores["offset above 0"] == [pytest.approx(low)] and scores["interval above 0"] == [
        pytest.approx(high - low)
    ]
    assert scores["offset below 0"] == [0.0] and scores["interval below 0"] == [0.0]
