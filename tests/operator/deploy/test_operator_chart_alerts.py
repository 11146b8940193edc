"""The chart's PrometheusRule (metrics.prometheusRule): rendered by a real `helm template`,
its PromQL checked against the operator's own series names, and its rules loaded by a real
Prometheus that scrapes a real /metrics server, where the alerts fire and end."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from assay.operator.runtime.metrics import EvaluationMetrics
from tests.operator.helm_chart import CHART, HELM, needs_helm
from tests.operator.local_prometheus import api, prometheus, query, wait  # noqa: F401  (fixture)
from tests.operator.metrics_scrape import scored_evaluation

pytestmark = needs_helm
ALERTS = {"AssayEvaluationRegressed", "AssayEvaluationFailed", "AssayEvaluationScoresUntrusted"}


def _render(*values: str) -> list[dict[str, Any]]:
    args = [a for value in values for a in ("--set", value)]
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--namespace", "assay-system", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _rule(*values: str) -> dict[str, Any]:
    (rule,) = [d for d in _render("metrics.prometheusRule.enabled=true", *values) if d["kind"] == "PrometheusRule"]
    return rule


def _rules(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_the_rule_is_off_by_default() -> None:
    assert not [d for d in _render() if d["kind"] == "PrometheusRule"]


def test_the_alerts_name_evaluation_and_baseline_and_query_only_exported_series() -> None:
    rule = _rule()
    assert rule["metadata"]["name"] == "ev-assay" and rule["metadata"]["namespace"] == "assay-system"
    rules = _rules(rule)
    assert set(rules) == ALERTS
    regressed = rules["AssayEvaluationRegressed"]
    assert re.search(r"\bassay_evaluation_regressed\b.*== 1$", regressed["expr"])
    for field in ("summary", "description"):
        for label in ("namespace", "evaluation", "baseline"):
            assert f"{{{{ $labels.{label} }}}}" in regressed["annotations"][field], (field, label)
    assert "{{ $labels.reason }}" in rules["AssayEvaluationFailed"]["annotations"]["summary"]
    untrusted = rules["AssayEvaluationScoresUntrusted"]
    assert re.search(r"\bassay_evaluation_scores_trusted\b.*== 0$", untrusted["expr"])
    exported = {m.name for m in EvaluationMetrics().registry.collect()}
    for alert in rules.values():
        assert alert["labels"] == {"severity": "warning"} and alert["for"] == "0s"
        for name in re.findall(r"assay_[a-z_]+", alert["expr"]):
            assert name.removesuffix("_total") in exported, (
                f"{alert['alert']} queries {name}, which the operator does not export"
            )


def test_labels_for_and_severity_from_values() -> None:
    rule = _rule(
        "metrics.prometheusRule.labels.release=kube-prometheus-stack",
        "metrics.prometheusRule.for=10m",
        "metrics.prometheusRule.severity=critical",
    )
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert {(r["for"], r["labels"]["severity"]) for r in _rules(rule).values()} == {("10m", "critical")}


@pytest.mark.parametrize("value", ["metrics.prometheusRule.for=soon", "metrics.prometheusRule.severity="])
def test_the_schema_refuses_bad_rule_values(value: str) -> None:
    result = subprocess.run([HELM, "template", "ev", str(CHART), "--set", value], capture_output=True, text=True)
    assert result.returncode != 0 and "values don't meet the specifications" in result.stderr


# --- on a real Prometheus ----------------------------------------------------------------


def _firing(url: str) -> set[tuple[str, str]]:
    rows = query(url, 'ALERTS{alertstate="firing"}')
    return {
        (row["metric"]["alertname"], row["metric"].get("baseline") or row["metric"].get("reason", "")) for row in rows
    }


@pytest.mark.slow
def test_the_alerts_fire_and_end_on_a_real_prometheus(prometheus: tuple[str, EvaluationMetrics]) -> None:
    url, metrics = prometheus
    rules = wait(lambda: (api(f"{url}/api/v1/rules") or {}).get("groups"), lambda: "no rule groups")
    loaded = {r["name"]: r for group in rules for r in group["rules"]}
    assert set(loaded) == ALERTS
    candidate = scored_evaluation("candidate")
    candidate["status"]["comparison"] = {
        "baseline": "base-eval",
        "verdict": "regressed",
        "message": "Worse.",
        "rows": [],
    }
    failed = scored_evaluation("broken", phase="Failed")
    failed["status"]["reason"] = "OOMKilled"
    untrusted = scored_evaluation("echoless")
    untrusted["status"]["sentinels"] = {"trusted": False, "message": "arc_easy: alike.", "failures": []}
    trusted = scored_evaluation("fine")
    trusted["status"]["sentinels"] = {"trusted": True, "message": "Every sentinel check passed.", "failures": []}
    metrics.observe(candidate)
    metrics.observe(failed)
    metrics.observe(untrusted)
    metrics.observe(trusted)
    expected = {
        ("AssayEvaluationRegressed", "base-eval"),
        ("AssayEvaluationFailed", "OOMKilled"),
        ("AssayEvaluationScoresUntrusted", ""),
    }
    wait(lambda: _firing(url) == expected, lambda: f"firing: {_firing(url)}")
    answer = api(f"{url}/api/v1/alerts")["alerts"]
    (regressed,) = [a for a in answer if a["labels"]["alertname"] == "AssayEvaluationRegressed"]
    assert regressed["labels"] == {
        "alertname": "AssayEvaluationRegressed",
        "namespace": "team",
        "evaluation": "candidate",
        "baseline": "base-eval",
        "severity": "warning",
    }
    assert regressed["annotations"]["summary"] == "Evaluation team/candidate regressed against base-eval"
    # Compared again and unchanged (the series goes to 0); the failed one deleted: both alerts end.
    candidate["status"]["comparison"]["verdict"] = "unchanged"
    metrics.observe(candidate)
    metrics.forget("team", "broken")
    metrics.forget("team", "echoless")
    wait(lambda: not _firing(url), lambda: f"still firing: {_firing(url)}")
    health = api(f"{url}/api/v1/rules")["groups"]
    assert {r["health"] for group in health for r in group["rules"]} == {"ok"}


@pytest.mark.slow
def test_a_strict_gates_inconclusive_comparison_fires_the_regressed_alert(
    prometheus: tuple[str, EvaluationMetrics],
) -> None:
    url, metrics = prometheus
    wait(lambda: (api(f"{url}/api/v1/rules") or {}).get("groups"), lambda: "no rule groups")
    inconclusive = {"baseline": "base-eval", "verdict": "inconclusive", "message": "Too few.", "rows": []}
    strict, lenient = scored_evaluation("strict"), scored_evaluation("lenient")
    for evaluation, gate in ((strict, {"strict": True}), (lenient, {})):
        evaluation["spec"].update(baseline={"evaluation": "base-eval"}, gate=gate)
        evaluation["status"]["comparison"] = dict(inconclusive)
        metrics.observe(evaluation)
    wait(lambda: _firing(url) == {("AssayEvaluationRegressed", "base-eval")}, lambda: f"firing: {_firing(url)}")
    (alert,) = [
        a for a in api(f"{url}/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "AssayEvaluationRegressed"
    ]
    assert alert["labels"]["evaluation"] == "strict"  # the lenient gate's inconclusive verdict passes
