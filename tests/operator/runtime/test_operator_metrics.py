"""Prometheus metrics, scraped over real HTTP from the started prometheus-client server."""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest

from assay.operator.runtime.metrics import EvaluationMetrics
from tests.operator.metrics_scrape import SCORE, scored_evaluation, scrape, series_labels


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


def test_scores_progress_phase_and_duration_over_http(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(scored_evaluation())
    samples = scrape(url)
    assert samples[("assay_evaluation_score", series_labels(**SCORE))] == pytest.approx(0.61)
    assert samples[("assay_evaluation_score_stderr", series_labels(**SCORE))] == pytest.approx(0.01)
    norm = {**SCORE, "metric": "acc_norm"}
    assert samples[("assay_evaluation_score", series_labels(**norm))] == pytest.approx(0.55)
    assert ("assay_evaluation_score_stderr", series_labels(**norm)) not in samples  # no stderr, no series
    group = {**SCORE, "task": "ai2_arc"}
    assert samples[("assay_evaluation_score", series_labels(**group))] == pytest.approx(0.5)
    assert samples[("assay_evaluation_progress_ratio", series_labels(namespace="team", evaluation="ev"))] == 0.25
    assert samples[("assay_evaluation_phase", series_labels(namespace="team", evaluation="ev", phase="Succeeded"))] == 1
    assert samples[("assay_evaluation_phase", series_labels(namespace="team", evaluation="ev", phase="Running"))] == 0
    assert samples[("assay_evaluation_duration_seconds", series_labels(namespace="team", evaluation="ev"))] == 120


def test_counters(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.record_completion("team", "succeeded")
    metrics.record_completion("team", "succeeded")
    metrics.record_completion("team", "failed")
    metrics.record_error("reconcile")
    samples = scrape(url)
    assert samples[("assay_evaluations_completed_total", series_labels(namespace="team", result="succeeded"))] == 2
    assert samples[("assay_evaluations_completed_total", series_labels(namespace="team", result="failed"))] == 1
    assert samples[("assay_operator_reconcile_errors_total", series_labels(handler="reconcile"))] == 1


def test_series_follow_status_and_vanish_on_delete(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(scored_evaluation())
    metrics.observe(scored_evaluation("other"))
    # A new run of `ev` reports only one metric: the other's series go.
    metrics.observe(scored_evaluation(results={"arc_easy": {"acc,none": {"value": 0.7, "stderr": 0.01}}}))
    samples = scrape(url)
    assert samples[("assay_evaluation_score", series_labels(**SCORE))] == pytest.approx(0.7)
    assert ("assay_evaluation_score", series_labels(**{**SCORE, "metric": "acc_norm"})) not in samples
    metrics.forget("team", "ev")
    samples = scrape(url)
    assert not [k for k in samples if dict(k[1]).get("evaluation") == "ev"]
    assert [k for k in samples if dict(k[1]).get("evaluation") == "other"]


def test_each_instance_has_its_own_registry() -> None:
    first, second = EvaluationMetrics(), EvaluationMetrics()
    first.observe(scored_evaluation())
    assert first.registry.get_sample_value("assay_evaluation_score", SCORE) == pytest.approx(0.61)
    assert second.registry.get_sample_value("assay_evaluation_score", SCORE) is None


def _series(url: str, prefix: str = "assay_evaluation_") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {k: v for k, v in scrape(url).items() if k[0].startswith(prefix)}


def test_a_rerun_resets_progress_duration_and_scores(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(scored_evaluation())
    ev = series_labels(namespace="team", evaluation="ev")
    assert scrape(url)[("assay_evaluation_progress_ratio", ev)] == 0.25
    assert scrape(url)[("assay_evaluation_duration_seconds", ev)] == 120.0
    # The spec changed: the operator's new-run status clears progress, times and results.
    rerun = scored_evaluation(phase="Pending")
    for field in ("startTime", "completionTime", "progress", "results", "groups"):
        del rerun["status"][field]
    metrics.observe(rerun)
    names = {name for name, _ in _series(url)}
    assert names == {"assay_evaluation_phase", "assay_evaluation_info"}, names
    assert (
        scrape(url)[("assay_evaluation_phase", series_labels(namespace="team", evaluation="ev", phase="Pending"))]
        == 1.0
    )


@pytest.mark.parametrize(
    ("mode", "tasks"), [("all", {"arc_easy", "ai2_arc"}), ("headline", {"ai2_arc"}), ("none", set())]
)
def test_the_score_series_option_limits_score_series(mode: str, tasks: set[str]) -> None:
    metrics = EvaluationMetrics(score_series=mode)
    server, thread = metrics.start_server(0, addr="127.0.0.1")
    try:
        metrics.observe(scored_evaluation())
        scores = [
            dict(labels)
            for (name, labels) in _series(f"http://127.0.0.1:{server.server_port}/metrics")
            if name == "assay_evaluation_score"
        ]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert {s["task"] for s in scores} == tasks
    # A run without groups keeps its task scores under `headline`.
    headline = EvaluationMetrics(score_series="headline")
    plain = scored_evaluation()
    del plain["status"]["groups"]
    headline.observe(plain)
    assert {
        s.labels["task"] for f in headline.registry.collect() if f.name == "assay_evaluation_score" for s in f.samples
    } == {"arc_easy"}


def test_a_bad_score_series_setting_is_one_sentence() -> None:
    from assay.errors import UserError

    with pytest.raises(UserError, match="ASSAY_SCORE_SERIES='group' is not one of all, headline, none"):
        EvaluationMetrics(score_series="group")


def test_info_eta_and_failure_series_follow_the_evaluation(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    running = scored_evaluation(phase="Running")
    running["metadata"]["labels"] = {"assay.dev/suite": "nightly"}
    running["spec"]["modelArgs"]["revision"] = "step1000"
    # 50 of 200 requests answered in the 60 s since the first: 150 more take 180 s (the reader's ETA).
    now = datetime.datetime.now(datetime.timezone.utc)
    running["status"]["timing"] = {"requestsStarted": (now - datetime.timedelta(seconds=60)).isoformat()}
    running["status"]["progress"]["updated"] = now.isoformat()
    metrics.observe(running)
    ev = dict(namespace="team", evaluation="ev")
    info = series_labels(**ev, model="EleutherAI/pythia-160m", revision="step1000", suite="nightly")
    assert scrape(url)[("assay_evaluation_info", info)] == 1.0
    assert 170 < scrape(url)[("assay_evaluation_eta_seconds", series_labels(**ev))] <= 180
    assert not [labels for name, labels in _series(url) if name == "assay_evaluation_failure"]

    # It fails: no ETA any more, one failure series with the reason; a new revision moves the info series.
    failed = scored_evaluation(phase="Failed")
    failed["status"]["reason"] = "OOMKilled"
    failed["spec"]["modelArgs"]["revision"] = "step2000"
    metrics.observe(failed)
    series = _series(url)
    assert ("assay_evaluation_eta_seconds", series_labels(**ev)) not in series
    assert [dict(labels) for name, labels in series if name == "assay_evaluation_failure"] == [
        {**ev, "reason": "OOMKilled"}
    ]
    assert [dict(labels)["revision"] for name, labels in series if name == "assay_evaluation_info"] == ["step2000"]

    # A re-run clears the failure; deleting the Evaluation drops its info series too.
    metrics.observe(scored_evaluation(phase="Pending"))
    assert not [labels for name, labels in _series(url) if name == "assay_evaluation_failure"]
    metrics.forget("team", "ev")
    assert not [
        labels for name, labels in _series(url) if name in ("assay_evaluation_info", "assay_evaluation_failure")
    ]


def test_untrusted_scores_carry_trusted_false_and_the_gauge_follows(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    untrusted = scored_evaluation()
    untrusted["status"]["sentinels"] = {"trusted": False, "message": "arc_easy: choices scored alike.", "failures": []}
    metrics.observe(untrusted)
    samples = scrape(url)
    ev = series_labels(namespace="team", evaluation="ev")
    assert samples[("assay_evaluation_scores_trusted", ev)] == 0
    assert samples[("assay_evaluation_score", series_labels(**{**SCORE, "trusted": "false"}))] == pytest.approx(0.61)
    assert not [key for key in samples if dict(key[1]).get("trusted") in ("true", "unknown")]
    # The next run's checks pass: its series say so, and the untrusted ones are gone.
    trusted = scored_evaluation()
    trusted["status"]["sentinels"] = {"trusted": True, "message": "Every sentinel check passed.", "failures": []}
    metrics.observe(trusted)
    samples = scrape(url)
    assert samples[("assay_evaluation_scores_trusted", ev)] == 1
    assert samples[("assay_evaluation_score", series_labels(**{**SCORE, "trusted": "true"}))] == pytest.approx(0.61)
    assert not [key for key in samples if dict(key[1]).get("trusted") == "false"]
    metrics.observe(scored_evaluation())  # no findings (checks off): no gauge
    assert ("assay_evaluation_scores_trusted", ev) not in scrape(url)


def test_documents_saved_follows_a_sequential_runs_status(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    stopped = scored_evaluation()
    stopped["status"]["savedWork"] = {"documents": 2184, "ofDocuments": 2376, "modelSeconds": 91.5}
    metrics.observe(stopped)
    ev = series_labels(namespace="team", evaluation="ev")
    assert scrape(url)[("assay_evaluation_documents_saved", ev)] == 2184
    metrics.observe(scored_evaluation())  # the next run scored every document: no gauge
    assert ("assay_evaluation_documents_saved", ev) not in scrape(url)
    metrics.observe(stopped)
    metrics.forget("team", "ev")
    assert ("assay_evaluation_documents_saved", ev) not in scrape(url)
