"""A tenant's strings and a tenant's task count cannot flood Prometheus: label values are
bounded (`metric_labels`) and score series per Evaluation capped (`metrics`)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from assay.errors import UserError
from assay.operator.build.metric_labels import MAX_LENGTH, bounded
from assay.operator.runtime.metrics import DEFAULT_MAX_SERIES, EvaluationMetrics, max_series_from_env


def test_short_printable_values_are_kept_as_they_are() -> None:
    for value in ("EleutherAI/pythia-160m", "arc_easy", "acc_norm", "none", "", "ü-🤖 名前", "a" * MAX_LENGTH):
        assert bounded(value) == value


def test_long_values_are_cut_with_a_hash_so_two_long_names_stay_two() -> None:
    first, second = "x" * 300 + "-first", "x" * 300 + "-second"
    assert len(bounded(first)) == MAX_LENGTH == len(bounded(second))
    assert bounded(first) != bounded(second)
    assert bounded(first).startswith("x" * 100) and bounded(first) == bounded(first)


def test_control_and_format_characters_are_removed() -> None:
    for evil in ("acc\nfake_metric 1", "task\x00", "cost\u202e\u2066", "a\u2028b", "tab\there", "\x1b[31mred"):
        value = bounded(evil)
        assert value.isprintable() and "\n" not in value and "\u202e" not in value, repr(value)
    # Two names that differ only in a removed character do not merge.
    assert bounded("ab") != bounded("a\nb") != bounded("a\rb")


def _evaluation(results: dict[str, Any], *, name: str = "ev", model: str = "m") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"model": "hf", "modelArgs": {"pretrained": model}},
        "status": {"phase": "Succeeded", "model": model, "results": results},
    }


def _samples(metrics: EvaluationMetrics) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def test_label_values_from_the_status_are_bounded_in_the_exposition() -> None:
    metrics = EvaluationMetrics()
    model = "org/" + "m" * 400
    metrics.observe(
        _evaluation(
            {"task\nwith newline": {"acc" + "c" * 200 + ",none": {"value": 0.5, "stderr": 0.1}}},
            name="e" * 253,
            model=model,
        )
    )
    scores = [labels for name, labels, _ in _samples(metrics) if name == "assay_evaluation_score"]
    assert len(scores) == 1
    (labels,) = scores
    assert all(len(value) <= MAX_LENGTH and value.isprintable() for value in labels.values()), labels
    assert labels["model"] == bounded(model) and labels["evaluation"] == bounded("e" * 253)
    # forget() finds the series by the same bounded key.
    metrics.forget("team", "e" * 253)
    assert not [s for s in _samples(metrics) if s[0].startswith("assay_evaluation_")]


def _tasks(count: int, *, stderr: bool = True) -> dict[str, Any]:
    return {f"task_{i:03}": {"acc,none": {"value": i / 1000, "stderr": 0.01 if stderr else None}} for i in range(count)}


def _dropped(metrics: EvaluationMetrics) -> float:
    return metrics.registry.get_sample_value("assay_metric_series_dropped_total", {"namespace": "team"}) or 0.0


def test_score_series_are_capped_per_evaluation_and_the_dropped_ones_counted() -> None:
    metrics = EvaluationMetrics(max_series_per_evaluation=20)
    metrics.observe(_evaluation(_tasks(8)))  # 32 series: score, stderr and the interval's two ends of 8 tasks
    names = [
        (name, labels["task"]) for name, labels, _ in _samples(metrics) if name.startswith("assay_evaluation_score")
    ]
    assert len(names) == 20 and {task for _, task in names} == {f"task_{i:03}" for i in range(5)}
    assert _dropped(metrics) == 12
    # The same status seen again (every watch event): the same series dropped, not counted twice.
    metrics.observe(_evaluation(_tasks(8)))
    assert _dropped(metrics) == 12
    # Two more tasks: eight more series dropped.
    metrics.observe(_evaluation(_tasks(10)))
    assert _dropped(metrics) == 20
    # A second Evaluation has its own cap.
    metrics.observe(_evaluation(_tasks(3), name="other"))
    other = [s for s in _samples(metrics) if s[0] == "assay_evaluation_score" and s[1]["evaluation"] == "other"]
    assert len(other) == 3 and _dropped(metrics) == 20


def test_the_cap_keeps_group_scores_first() -> None:
    metrics = EvaluationMetrics(max_series_per_evaluation=4)
    evaluation = _evaluation(_tasks(5))
    evaluation["status"]["groups"] = {"mmlu": {"acc,none": {"value": 0.4, "stderr": 0.02}}}
    metrics.observe(evaluation)
    kept = {labels["task"] for name, labels, _ in _samples(metrics) if name.startswith("assay_evaluation_score")}
    assert kept == {"mmlu"}


def test_a_series_without_stderr_counts_once() -> None:
    metrics = EvaluationMetrics(max_series_per_evaluation=4)
    metrics.observe(_evaluation(_tasks(6, stderr=False)))
    assert len([s for s in _samples(metrics) if s[0] == "assay_evaluation_score"]) == 4 and _dropped(metrics) == 2


def test_the_cap_setting() -> None:
    assert max_series_from_env({}) == DEFAULT_MAX_SERIES == 500
    assert max_series_from_env({"ASSAY_MAX_SERIES_PER_EVALUATION": " 40 "}) == 40
    with pytest.raises(UserError, match="ASSAY_MAX_SERIES_PER_EVALUATION='many' is not a whole number"):
        max_series_from_env({"ASSAY_MAX_SERIES_PER_EVALUATION": "many"})
    with pytest.raises(UserError, match="is not a positive number of series"):
        EvaluationMetrics(max_series_per_evaluation=0)
