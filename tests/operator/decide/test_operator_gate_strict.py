"""A strict gate's inconclusive comparison is one thing everywhere: the runner's status, the
condition Regressed, the gauge assay_evaluation_regressed, and the chart's alert on it.

From crafted runs (every one of 5 documents lost: too few to call a regression, far too few
to call it unchanged) through `assay compare`'s statistics and the runner's status, to the
operator's condition and its gauge, scraped over real HTTP; the alert's expression, read
from the chart's template, is evaluated on the scraped series (test_operator_chart_alerts.py
loads the same rule into a real Prometheus where helm and prometheus are installed)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.compare import comparison, outputs
from assay.operator.decide import regression
from assay.operator.runtime.metrics import EvaluationMetrics
from assay.runner.results import versus_baseline
from tests.compare.crafted import write_run
from tests.operator.metrics_scrape import scored_evaluation, scrape

RULE = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "assay" / "templates" / "prometheusrule.yaml"


@pytest.fixture
def served() -> Iterator[tuple[EvaluationMetrics, str]]:
    metrics = EvaluationMetrics()
    server, thread = metrics.start_server(0, addr="127.0.0.1")
    try:
        yield metrics, f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _collapse_status(tmp_path: Path, *, strict: bool) -> dict[str, Any]:
    samples = [{"doc_id": i, "doc": f"d{i}", "acc": 1} for i in range(5)]
    base = write_run(tmp_path / "base", {"arc_easy": samples})
    cand = write_run(tmp_path / "cand", {"arc_easy": [{**s, "acc": 0} for s in samples]})
    result = comparison.compare_runs(
        outputs.read_run(base, label="baseline"), outputs.read_run(cand, label="candidate"), comparison.Settings()
    )
    return versus_baseline.as_status(result, label="base-eval", strict=strict)


def _alert_expression() -> tuple[list[str], str]:
    """The AssayEvaluationRegressed rule's `max by (LABELS) (SERIES) == 1`, as (LABELS, SERIES)."""
    text = RULE.read_text()
    (expr,) = re.findall(r"- alert: AssayEvaluationRegressed\n\s+expr: (.*)\n", text)
    match = re.fullmatch(r"max by \(([a-z_, ]+)\) \((assay_[a-z_]+)\) == 1", expr.strip())
    assert match, f"the rule's expression changed form ({expr}): evaluate the new one here"
    assert yaml.safe_load(f"expr: {expr}")["expr"] == expr.strip()
    return [label.strip() for label in match.group(1).split(",")], match.group(2)


def _firing(url: str) -> set[tuple[str, ...]]:
    labels, series = _alert_expression()
    maxima: dict[tuple[str, ...], float] = defaultdict(lambda: float("-inf"))
    for (name, sample_labels), value in scrape(url).items():
        if name == series:
            key = tuple(dict(sample_labels).get(label, "") for label in labels)
            maxima[key] = max(maxima[key], value)
    return {key for key, value in maxima.items() if value == 1}


@pytest.mark.parametrize("strict", [True, False])
def test_strict_and_inconclusive_is_the_same_in_status_condition_gauge_and_alert(
    served: tuple[EvaluationMetrics, str], tmp_path: Path, strict: bool
) -> None:
    metrics, url = served
    status = _collapse_status(tmp_path, strict=strict)
    assert status["verdict"] == "inconclusive"
    assert ("(the gate is strict: this fails it)" in status["message"]) is strict
    spec = {"baseline": {"evaluation": "base-eval"}, "gate": {"strict": strict}}
    condition = regression.regressed({"comparison": status}, spec, succeeded=True)["Regressed"]
    assert condition[:2] == ((True if strict else None), "Inconclusive")

    evaluation = scored_evaluation("cand")
    evaluation["spec"].update(spec)
    evaluation["status"]["comparison"] = status
    metrics.observe(evaluation)
    gauge = {
        dict(labels)["baseline"]: value
        for (name, labels), value in scrape(url).items()
        if name == "assay_evaluation_regressed"
    }
    assert gauge == {"base-eval": 1.0 if strict else 0.0}
    assert _firing(url) == ({("team", "cand", "base-eval")} if strict else set())


def test_a_regressed_verdict_fires_under_any_gate(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    evaluation = scored_evaluation("cand")
    evaluation["spec"]["baseline"] = {"evaluation": "base-eval"}
    evaluation["status"]["comparison"] = {"baseline": "base-eval", "verdict": "regressed", "message": "m.", "rows": []}
    metrics.observe(evaluation)
    assert _firing(url) == {("team", "cand", "base-eval")}
