"""Regression gates on the real node: Evaluations that name a baseline are compared with it by
their runner, and say so in status, in the condition Regressed, in `kubectl get`, to
`kubectl wait`, and to Prometheus, whose copy of the chart's PrometheusRule alerts on a
regression and on nothing else; the dashboard's versus-baseline panels return series.

A baseline run of the tiny GPT-2; the same spec against it (nothing changed: Regressed
False); another model against it (a real comparison of two models); the same spec against a
crafted baseline that answered every document right (a regression the alert must catch);
and a baseline that does not exist (one sentence, the scores land all the same).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest, give_to_runner
from tests.e2e.dashboard_panels import DASHBOARD, NEEDS_BASELINE, panel_series
from tests.e2e.helpers import SECOND_MODEL_IN_POD, hf_spec
from tests.e2e.prometheus import prometheus, query  # noqa: F401  (fixture)

pytestmark = pytest.mark.e2e

LIMIT = 60
"""arc_easy documents per run: enough for McNemar to see a crafted 60-point drop, few enough for seconds of scoring."""


def _spec(**overrides: Any) -> dict[str, Any]:
    return hf_spec(**{"tasks": ["arc_easy"], "limit": LIMIT, **overrides})


def _regressed(evaluation: dict[str, Any]) -> tuple[str, str, str]:
    (condition,) = [c for c in evaluation["status"]["conditions"] if c["type"] == "Regressed"]
    return condition["status"], condition["reason"], condition["message"]


def _crafted_perfect_baseline(cluster: Cluster) -> str:
    """A copy of the baseline run's output in which every document was answered right."""
    source, target = cluster.output_dir / "gate-base" / "g1", cluster.output_dir / "perfect"
    shutil.copytree(source, target)
    (scores,) = target.rglob("scores_arc_easy_*.jsonl")
    lines = [json.loads(line) for line in scores.read_text().splitlines()]
    assert len(lines) == LIMIT and "doc" not in lines[0] and "resps" not in lines[0]  # identity and scores only
    scores.write_text("".join(json.dumps({**line, "acc": 1, "acc_norm": 1}) + "\n" for line in lines))
    give_to_runner(target)
    return "perfect"


def test_candidates_are_compared_with_their_baseline_and_a_regression_alerts(
    cluster: Cluster,
    prometheus: str,
    second_model: Path,
) -> None:
    cluster.apply(evaluation_manifest("gate-base", **_spec()))
    cluster.wait("gate-base", "Succeeded", timeout=300)
    perfect = _crafted_perfect_baseline(cluster)

    cluster.apply(evaluation_manifest("gate-self", **_spec(baseline={"evaluation": "gate-base"})))
    cluster.apply(
        evaluation_manifest("gate-other", **_spec(model=SECOND_MODEL_IN_POD, baseline={"evaluation": "gate-base"}))
    )
    cluster.apply(evaluation_manifest("gate-worse", **_spec(baseline={"path": perfect}, gate={"maxDrop": 0.05})))
    cluster.apply(evaluation_manifest("gate-orphan", **_spec(baseline={"evaluation": "no-such-run"})))
    runs = {
        name: cluster.wait(name, "Succeeded", timeout=420)
        for name in ("gate-self", "gate-other", "gate-worse", "gate-orphan")
    }

    # The same spec against its own baseline: every document the same, a powered "no change".
    same = runs["gate-self"]["status"]["comparison"]
    assert same["verdict"] == "unchanged" and same["baseline"] == "gate-base", same
    assert all(row["n"] == LIMIT and row["delta"] == 0 for row in same["rows"])
    assert _regressed(runs["gate-self"])[:2] == ("False", "NoRegression")
    cluster.kubectl_wait("gate-self", "Regressed=False")

    # Two models: a real paired comparison, whatever its verdict.
    other = runs["gate-other"]["status"]["comparison"]
    assert {row["metric"] for row in other["rows"]} == {"acc", "acc_norm"} and all(
        row["n"] == LIMIT for row in other["rows"]
    )
    assert other["rows"][0]["test"] == "mcnemar" and other["verdict"] in (
        "improved",
        "unchanged",
        "inconclusive",
        "regressed",
    )

    # Against a baseline that answered everything: a regression, named with its interval.
    worse = runs["gate-worse"]
    status, reason, message = _regressed(worse)
    assert (status, reason) == ("True", "Regressed") and message.startswith(
        "Regressed against path:perfect: arc_easy acc"
    )
    assert worse["status"]["comparison"]["rows"][0]["ciHigh"] < -0.05
    assert (
        worse["status"]["results"]["arc_easy"]["acc,none"]["value"] is not None
    )  # the scores landed: a verdict, not a failure
    columns = cluster.kubectl("get", "evaluation", "gate-worse", "gate-self").stdout.splitlines()
    assert (
        columns[0].split()[:6] == ["NAME", "MODEL", "TASKS", "PHASE", "REASON", "PROGRESS"]
        and "REGRESSED" in columns[0]
    )
    regressed_column = columns[0].index("REGRESSED")
    assert [line[regressed_column:].split()[0] for line in columns[1:]] == ["True", "False"]

    # A baseline that does not exist: one sentence, Regressed Unknown, the run's own scores in status.
    orphan = runs["gate-orphan"]
    assert orphan["status"]["comparison"] == {
        "baseline": "no-such-run",
        "error": "The baseline Evaluation no-such-run cannot be used: it does not exist.",
    }
    assert _regressed(orphan)[:2] == ("Unknown", "BaselineUnavailable")

    # Prometheus: the verdicts as series, and the chart's rule firing for the regression alone.
    ns = cluster.namespace
    regressed = cluster.wait_for(
        "assay_evaluation_regressed for the gated runs",
        lambda: (
            {
                row["metric"]["evaluation"]: float(row["value"][1])
                for row in query(prometheus, f'assay_evaluation_regressed{{namespace="{ns}"}}')
            }
            if len(query(prometheus, f'assay_evaluation_regressed{{namespace="{ns}"}}')) >= 3
            else None
        ),
        timeout=90,
    )
    assert regressed["gate-worse"] == 1.0 and regressed["gate-self"] == 0.0 and regressed["gate-other"] in (0.0, 1.0)
    delta = query(prometheus, f'assay_evaluation_delta{{namespace="{ns}",evaluation="gate-worse",metric="acc"}}')
    assert delta and float(delta[0]["value"][1]) < -0.05 and delta[0]["metric"]["baseline"] == "path:perfect"
    alerts = cluster.wait_for(
        "the AssayEvaluationRegressed alert to fire",
        lambda: query(
            prometheus, f'ALERTS{{alertname="AssayEvaluationRegressed",namespace="{ns}",alertstate="firing"}}'
        ),
        timeout=120,
    )
    assert {row["metric"]["evaluation"] for row in alerts} <= {"gate-worse", "gate-other"}
    assert "gate-worse" in {row["metric"]["evaluation"] for row in alerts}
    assert "gate-self" not in {row["metric"]["evaluation"] for row in query(prometheus, "ALERTS")}

    # The dashboard's versus-baseline panels, as Grafana would query them.
    panels = {panel["title"]: panel for panel in json.loads(DASHBOARD.read_text())["panels"]}
    for title in NEEDS_BASELINE:
        rows = cluster.wait_for(
            f"the panel {title!r} to return series",
            lambda title=title: panel_series(prometheus, panels[title], ns),
            timeout=60,
        )
        assert "gate-worse" in {row["metric"].get("evaluation") for row in rows}, (title, rows[:3])
