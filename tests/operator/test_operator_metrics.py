"""Prometheus metrics, scraped over real HTTP from the started prometheus-client server."""

from __future__ import annotations

import datetime

import urllib.request
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from assay.operator.runtime.metrics import EvaluationMetrics


def _evaluation(name: str = "ev", *, phase: str = "Succeeded", results: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"]},
        "status": {
            "phase": phase,
            "startTime": "2025-05-01T12:00:00Z",
            "completionTime": "2025-05-01T12:02:00Z",
            "progress": {"requestsDone": 50, "requestsTotal": 200, "summary": "25%"},
            "results": results
            if results is not None
            else {
                "arc_easy": {
                    "acc,none": {"value": 0.61, "stderr": 0.01},
                    "acc_norm,none": {"value": 0.55, "stderr": None},
                },
            },
            "groups": {"ai2_arc": {"acc,none": {"value": 0.5, "stderr": 0.02}}},
        },
    }


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


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


SCORE = dict(
    namespace="team",
    evaluation="ev",
    model="EleutherAI/pythia-160m",
    task="arc_easy",
    metric="acc",
    filter="none",
    trusted="unknown",  # the status has no sentinels' findings
)


def test_scores_progress_phase_and_duration_over_http(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(_evaluation())
    samples = _scrape(url)
    assert samples[("assay_evaluation_score", _labels(**SCORE))] == pytest.approx(0.61)
    assert samples[("assay_evaluation_score_stderr", _labels(**SCORE))] == pytest.approx(0.01)
    norm = {**SCORE, "metric": "acc_norm"}
    assert samples[("assay_evaluation_score", _labels(**norm))] == pytest.approx(0.55)
    assert ("assay_evaluation_score_stderr", _labels(**norm)) not in samples  # no stderr, no series
    group = {**SCORE, "task": "ai2_arc"}
    assert samples[("assay_evaluation_score", _labels(**group))] == pytest.approx(0.5)
    assert samples[("assay_evaluation_progress_ratio", _labels(namespace="team", evaluation="ev"))] == 0.25
    assert samples[("assay_evaluation_phase", _labels(namespace="team", evaluation="ev", phase="Succeeded"))] == 1
    assert samples[("assay_evaluation_phase", _labels(namespace="team", evaluation="ev", phase="Running"))] == 0
    assert samples[("assay_evaluation_duration_seconds", _labels(namespace="team", evaluation="ev"))] == 120


def test_counters(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.record_completion("team", "succeeded")
    metrics.record_completion("team", "succeeded")
    metrics.record_completion("team", "failed")
    metrics.record_error("reconcile")
    samples = _scrape(url)
    assert samples[("assay_evaluations_completed_total", _labels(namespace="team", result="succeeded"))] == 2
    assert samples[("assay_evaluations_completed_total", _labels(namespace="team", result="failed"))] == 1
    assert samples[("assay_operator_reconcile_errors_total", _labels(handler="reconcile"))] == 1


def test_series_follow_status_and_vanish_on_delete(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(_evaluation())
    metrics.observe(_evaluation("other"))
    # A new run of `ev` reports only one metric: the other's series go.
    metrics.observe(_evaluation(results={"arc_easy": {"acc,none": {"value": 0.7, "stderr": 0.01}}}))
    samples = _scrape(url)
    assert samples[("assay_evaluation_score", _labels(**SCORE))] == pytest.approx(0.7)
    assert ("assay_evaluation_score", _labels(**{**SCORE, "metric": "acc_norm"})) not in samples
    metrics.forget("team", "ev")
    samples = _scrape(url)
    assert not [k for k in samples if dict(k[1]).get("evaluation") == "ev"]
    assert [k for k in samples if dict(k[1]).get("evaluation") == "other"]


def test_each_instance_has_its_own_registry() -> None:
    first, second = EvaluationMetrics(), EvaluationMetrics()
    first.observe(_evaluation())
    assert first.registry.get_sample_value("assay_evaluation_score", SCORE) == pytest.approx(0.61)
    assert second.registry.get_sample_value("assay_evaluation_score", SCORE) is None


def _series(url: str, prefix: str = "assay_evaluation_") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {k: v for k, v in _scrape(url).items() if k[0].startswith(prefix)}


def test_a_rerun_resets_progress_duration_and_scores(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    metrics.observe(_evaluation())
    ev = _labels(namespace="team", evaluation="ev")
    assert _scrape(url)[("assay_evaluation_progress_ratio", ev)] == 0.25
    assert _scrape(url)[("assay_evaluation_duration_seconds", ev)] == 120.0
    # The spec changed: the operator's new-run status clears progress, times and results.
    rerun = _evaluation(phase="Pending")
    for field in ("startTime", "completionTime", "progress", "results", "groups"):
        del rerun["status"][field]
    metrics.observe(rerun)
    names = {name for name, _ in _series(url)}
    assert names == {"assay_evaluation_phase", "assay_evaluation_info"}, names
    assert _scrape(url)[("assay_evaluation_phase", _labels(namespace="team", evaluation="ev", phase="Pending"))] == 1.0


@pytest.mark.parametrize(
    ("mode", "tasks"), [("all", {"arc_easy", "ai2_arc"}), ("headline", {"ai2_arc"}), ("none", set())]
)
def test_the_score_series_option_limits_score_series(mode: str, tasks: set[str]) -> None:
    metrics = EvaluationMetrics(score_series=mode)
    server, thread = metrics.start_server(0, addr="127.0.0.1")
    try:
        metrics.observe(_evaluation())
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
    plain = _evaluation()
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
    running = _evaluation(phase="Running")
    running["metadata"]["labels"] = {"assay.dev/suite": "nightly"}
    running["spec"]["modelArgs"]["revision"] = "step1000"
    # 50 of 200 requests answered in the 60 s since the first: 150 more take 180 s (the reader's ETA).
    now = datetime.datetime.now(datetime.timezone.utc)
    running["status"]["timing"] = {"requestsStarted": (now - datetime.timedelta(seconds=60)).isoformat()}
    running["status"]["progress"]["updated"] = now.isoformat()
    metrics.observe(running)
    ev = dict(namespace="team", evaluation="ev")
    info = _labels(**ev, model="EleutherAI/pythia-160m", revision="step1000", suite="nightly")
    assert _scrape(url)[("assay_evaluation_info", info)] == 1.0
    assert 170 < _scrape(url)[("assay_evaluation_eta_seconds", _labels(**ev))] <= 180
    assert not [labels for name, labels in _series(url) if name == "assay_evaluation_failure"]

    # It fails: no ETA any more, one failure series with the reason; a new revision moves the info series.
    failed = _evaluation(phase="Failed")
    failed["status"]["reason"] = "OOMKilled"
    failed["spec"]["modelArgs"]["revision"] = "step2000"
    metrics.observe(failed)
    series = _series(url)
    assert ("assay_evaluation_eta_seconds", _labels(**ev)) not in series
    assert [dict(labels) for name, labels in series if name == "assay_evaluation_failure"] == [
        {**ev, "reason": "OOMKilled"}
    ]
    assert [dict(labels)["revision"] for name, labels in series if name == "assay_evaluation_info"] == ["step2000"]

    # A re-run clears the failure; deleting the Evaluation drops its info series too.
    metrics.observe(_evaluation(phase="Pending"))
    assert not [labels for name, labels in _series(url) if name == "assay_evaluation_failure"]
    metrics.forget("team", "ev")
    assert not [
        labels for name, labels in _series(url) if name in ("assay_evaluation_info", "assay_evaluation_failure")
    ]


def test_untrusted_scores_carry_trusted_false_and_the_gauge_follows(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    untrusted = _evaluation()
    untrusted["status"]["sentinels"] = {"trusted": False, "message": "arc_easy: choices scored alike.", "failures": []}
    metrics.observe(untrusted)
    samples = _scrape(url)
    ev = _labels(namespace="team", evaluation="ev")
    assert samples[("assay_evaluation_scores_trusted", ev)] == 0
    assert samples[("assay_evaluation_score", _labels(**{**SCORE, "trusted": "false"}))] == pytest.approx(0.61)
    assert not [key for key in samples if dict(key[1]).get("trusted") in ("true", "unknown")]
    # The next run's checks pass: its series say so, and the untrusted ones are gone.
    trusted = _evaluation()
    trusted["status"]["sentinels"] = {"trusted": True, "message": "Every sentinel check passed.", "failures": []}
    metrics.observe(trusted)
    samples = _scrape(url)
    assert samples[("assay_evaluation_scores_trusted", ev)] == 1
    assert samples[("assay_evaluation_score", _labels(**{**SCORE, "trusted": "true"}))] == pytest.approx(0.61)
    assert not [key for key in samples if dict(key[1]).get("trusted") == "false"]
    metrics.observe(_evaluation())  # no findings (checks off): no gauge
    assert ("assay_evaluation_scores_trusted", ev) not in _scrape(url)


def test_documents_saved_follows_a_sequential_runs_status(served: tuple[EvaluationMetrics, str]) -> None:
    metrics, url = served
    stopped = _evaluation()
    stopped["status"]["savedWork"] = {"documents": 2184, "ofDocuments": 2376, "modelSeconds": 91.5}
    metrics.observe(stopped)
    ev = _labels(namespace="team", evaluation="ev")
    assert _scrape(url)[("assay_evaluation_documents_saved", ev)] == 2184
    metrics.observe(_evaluation())  # the next run scored every document: no gauge
    assert ("assay_evaluation_documents_saved", ev) not in _scrape(url)
    metrics.observe(stopped)
    metrics.forget("team", "ev")
    assert ("assay_evaluation_documents_saved", ev) not in _scrape(url)
