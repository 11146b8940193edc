"""Series of a comparison with a baseline (delta, its interval, regressed) and of each score's
95% interval, scraped over real HTTP from the started prometheus-client server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from assay.operator.build.metric_labels import MAX_LENGTH, bounded
from assay.operator.runtime.metrics import EvaluationMetrics
from tests.operator.metrics_scrape import SCORE, scored_evaluation, scrape, series_labels

EV = dict(namespace="team", evaluation="ev")
DELTA = dict(**EV, baseline="base-eval", task="arc_easy", metric="acc", filter="none")


def _row(task: str, delta: float, verdict: str, **fields: Any) -> dict[str, Any]:
    return {
        "task": task,
        "metric": "acc",
        "filter": "none",
        "n": 200,
        "baseline": 0.41,
        "candidate": 0.41 + delta,
        "delta": delta,
        "ciLow": delta - 0.03,
        "ciHigh": delta + 0.03,
        "pValue": 0.001,
        "test": "mcnemar",
        "mde": 0.04,
        "verdict": verdict,
        **fields,
    }


def _compared(
    verdict: str = "regressed",
    *,
    baseline: str = "base-eval",
    rows: list[dict[str, Any]] | None = None,
    name: str = "ev",
) -> dict[str, Any]:
    evaluation = scored_evaluation(name)
    evaluation["status"]["comparison"] = {
        "baseline": baseline,
        "verdict": verdict,
        "message": "arc_easy acc is worse than base-eval's.",
        "rows": rows if rows is not None else [_row("arc_easy", -0.06, "regressed"), _row("piqa", 0.01, "unchanged")],
        "rowsOmitted": 0,
    }
    return evaluation


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


def _named(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in scrape(url).items() if sample == name}


def test_each_score_with_a_stderr_has_its_95_percent_interval(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    evaluation = scored_evaluation()
    evaluation["status"]["results"]["piqa"] = {"acc,none": {"value": 0.7, "stderr": "N/A"}}  # lm-eval's "no stderr"
    metrics.observe(evaluation)
    samples = scrape(url)
    assert samples[("assay_evaluation_score_ci_low", series_labels(**SCORE))] == pytest.approx(0.61 - 1.96 * 0.01)
    assert samples[("assay_evaluation_score_ci_high", series_labels(**SCORE))] == pytest.approx(0.61 + 1.96 * 0.01)
    # No stderr (null, or "N/A"): the score alone.
    for labels in (series_labels(**{**SCORE, "metric": "acc_norm"}), series_labels(**{**SCORE, "task": "piqa"})):
        assert ("assay_evaluation_score", labels) in samples
        assert not [name for name, other in samples if other == labels and name != "assay_evaluation_score"]
    # The interval series carry exactly the score's labels (the dashboard joins them one to one).
    assert set(_named(url, "assay_evaluation_score_ci_low")) == set(_named(url, "assay_evaluation_score_stderr"))
    # A stderr that goes away takes its interval with it.
    evaluation["status"]["results"]["arc_easy"]["acc,none"]["stderr"] = None
    metrics.observe(evaluation)
    assert ("assay_evaluation_score_ci_low", series_labels(**SCORE)) not in scrape(url)
    assert ("assay_evaluation_score_stderr", series_labels(**SCORE)) not in scrape(url)


def test_a_regressed_comparison_exports_deltas_their_intervals_and_the_verdict(
    served: tuple[EvaluationMetrics, str],
) -> None:
    metrics, url = served
    metrics.observe(_compared())
    samples = scrape(url)
    assert samples[("assay_evaluation_delta", series_labels(**DELTA))] == pytest.approx(-0.06)
    assert samples[("assay_evaluation_delta_ci_low", series_labels(**DELTA))] == pytest.approx(-0.09)
    assert samples[("assay_evaluation_delta_ci_high", series_labels(**DELTA))] == pytest.approx(-0.03)
    assert samples[("assay_evaluation_delta", series_labels(**{**DELTA, "task": "piqa"}))] == pytest.approx(0.01)
    assert _named(url, "assay_evaluation_regressed") == {series_labels(**EV, baseline="base-eval"): 1.0}


@pytest.mark.parametrize("verdict", ["improved", "equivalent", "unchanged", "inconclusive"])
def test_every_other_verdict_is_0(served: tuple[EvaluationMetrics, str], verdict: str) -> None:
    metrics, url = served
    metrics.observe(_compared(verdict))
    assert _named(url, "assay_evaluation_regressed") == {series_labels(**EV, baseline="base-eval"): 0.0}


def test_comparison_series_follow_the_status(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(_compared())
    # Compared again, with another baseline and one row: the old baseline's series go.
    metrics.observe(_compared("unchanged", baseline="path:/results/base", rows=[_row("arc_easy", -0.01, "unchanged")]))
    deltas = _named(url, "assay_evaluation_delta")
    assert deltas == {series_labels(**{**DELTA, "baseline": "path:/results/base"}): pytest.approx(-0.01)}
    assert _named(url, "assay_evaluation_regressed") == {series_labels(**EV, baseline="path:/results/base"): 0.0}
    # A row without an interval: the delta alone.
    metrics.observe(_compared(rows=[{**_row("arc_easy", -0.06, "regressed"), "ciLow": None, "ciHigh": None}]))
    assert len(_named(url, "assay_evaluation_delta")) == 1 and not _named(url, "assay_evaluation_delta_ci_low")
    # The baseline could not be used: no deltas, no verdict.
    errored = scored_evaluation()
    errored["status"]["comparison"] = {"baseline": "base-eval", "error": "The baseline base-eval has not succeeded."}
    metrics.observe(errored)
    assert not [name for name, _ in scrape(url) if name.startswith(("assay_evaluation_delta", "assay_evaluation_regr"))]
    # Scores stay as they were.
    assert scrape(url)[("assay_evaluation_score", series_labels(**SCORE))] == pytest.approx(0.61)


def test_a_new_run_without_comparison_and_a_deletion_remove_its_series(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(_compared())
    metrics.observe(_compared(name="other"))
    rerun = scored_evaluation(phase="Pending")
    for field in ("startTime", "completionTime", "progress", "results", "groups"):
        del rerun["status"][field]
    metrics.observe(rerun)
    evaluations = {
        dict(labels)["evaluation"]
        for name, labels in scrape(url)
        if name.startswith(("assay_evaluation_delta", "assay_evaluation_regressed", "assay_evaluation_score"))
    }
    assert evaluations == {"other"}
    metrics.forget("team", "other")
    assert not [labels for name, labels in scrape(url) if dict(labels).get("evaluation") == "other"]


def test_the_cap_keeps_the_worst_compared_metrics_first_and_counts_the_rest() -> None:
    metrics = EvaluationMetrics(max_series_per_evaluation=7)
    rows = [_row("worst", -0.2, "regressed"), _row("bad", -0.1, "regressed"), _row("fine", 0.0, "unchanged")]
    metrics.observe(_compared(rows=rows))
    registry = metrics.registry
    kept = {s.labels["task"] for f in registry.collect() if f.name == "assay_evaluation_delta" for s in f.samples}
    assert kept == {"worst", "bad"}
    # Left out: the third row's 3 series, then the 4 of the group's score and the 4 of arc_easy's acc
    # (score, stderr, interval)...
    assert registry.get_sample_value("assay_metric_series_dropped_total", {"namespace": "team"}) == 3 + 4 + 4
    # ...while acc_norm, a score without stderr (1 series), fits in what is left.
    scores = {
        (f.name, s.labels["metric"])
        for f in registry.collect()
        if f.name.startswith("assay_evaluation_score")
        for s in f.samples
    }
    assert scores == {("assay_evaluation_score", "acc_norm")}
    # The verdict is one series whatever the cap.
    assert registry.get_sample_value("assay_evaluation_regressed", {**EV, "baseline": "base-eval"}) == 1.0


def test_the_baseline_label_is_bounded() -> None:
    metrics = EvaluationMetrics()
    long_path = "path:/results/" + "run-" * 100 + "\n"
    metrics.observe(_compared(baseline=long_path))
    regressed = [
        s.labels for f in metrics.registry.collect() if f.name == "assay_evaluation_regressed" for s in f.samples
    ]
    assert regressed == [{**EV, "baseline": bounded(long_path)}] and len(bounded(long_path)) == MAX_LENGTH
    metrics.forget("team", "ev")
    assert not [s for f in metrics.registry.collect() if f.name.startswith("assay_evaluation_") for s in f.samples]
