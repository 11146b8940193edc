"""The sentinels on crafted per-document evidence: each published failure trips its check,
and what a random model or a healthy run produces does not."""

from __future__ import annotations

import math
import random

import pytest

from assay.errors import UsageError
from assay.run_options import SentinelSettings
from assay.runner.scoring import sentinel_evidence, sentinels
from assay.runner.scoring.sentinels import DocEvidence

DEFAULTS = SentinelSettings()


def _mc(correct: list[int], k: int = 4, *, seed: int = 0) -> list[DocEvidence]:
    """Multiple-choice documents with distinct choice scores, right where `correct` says."""
    rng = random.Random(seed)
    return [DocEvidence(tuple(rng.uniform(-20, -1) for _ in range(k)), k, float(hit)) for hit in correct]


def _check(
    evidence: list[DocEvidence], output_type: str = "multiple_choice", **kwargs: object
) -> sentinels.TaskSentinels:
    metrics = kwargs.pop("metrics", {"acc,none": 0.5})
    return sentinels.check_task(
        "t",
        output_type=output_type,
        evidence=evidence,
        metrics=metrics,
        settings=DEFAULTS,
        **kwargs,  # type: ignore[arg-type]
    )


def test_binomial_lower_tail_equals_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for k, n, p in [(0, 20, 0.25), (7, 100, 0.25), (69, 1000, 0.25), (970, 14042, 0.25), (5, 5, 0.5), (3, 40, 0.3)]:
        assert sentinels.binomial_lower_tail(k, n, p) == pytest.approx(float(stats.binom.cdf(k, n, p)), rel=1e-9)


def test_accuracy_of_0_07_on_four_way_multiple_choice_is_below_chance() -> None:
    """olmo-eval's vLLM out of memory in prompt_logprobs: MMLU 0.069, exit 0, no error."""
    result = _check(_mc([1] * 7 + [0] * 93))
    finding = next(f for f in result.findings if f.check == "below_chance")
    assert not result.trusted and not finding.passed
    assert finding.figures["accuracy"] == pytest.approx(0.07) and finding.figures["chance"] == 0.25
    assert finding.figures["p_value"] < 1e-5
    assert "significantly below the chance of 0.250" in finding.reason


def test_a_random_model_on_a_small_limit_is_not_below_chance() -> None:
    """Why α is small: 0 right out of 20 at chance 1/4 has p = 0.75^20 = 0.003."""
    assert _check(_mc([0] * 20)).trusted
    rng = random.Random(7)
    alarms = sum(
        not _check(_mc([int(rng.random() < 0.25) for _ in range(rng.choice([5, 10, 50, 200]))], seed=i)).trusted
        for i in range(300)
    )
    assert alarms <= 2  # at most what α = 0.001 over 300 random runs allows with room


def test_chance_is_the_mean_of_one_over_k_when_documents_differ() -> None:
    evidence = _mc([0] * 10, k=2) + _mc([0] * 10, k=4)
    finding = _check(evidence).findings[0]
    assert finding.figures["chance"] == pytest.approx((0.5 + 0.25) / 2) and not finding.passed


def test_a_probability_accuracy_is_not_binomial() -> None:
    """TruthfulQA MC2's acc is a probability mass per document: the test does not apply."""
    evidence = [DocEvidence((-1.0, -2.0), 2, 0.01) for _ in range(100)]
    assert _check(evidence).findings[0].figures["applies"] is False


def test_all_choices_scored_alike_is_degenerate() -> None:
    """llama.cpp's server without echoed logprobs: every choice the same score, accuracy at chance."""
    evidence = [DocEvidence((-3.0, -3.0, -3.0, -3.0), 4, float(i % 4 == 0)) for i in range(40)]
    result = _check(evidence)
    finding = next(f for f in result.findings if f.check == "degenerate")
    assert not finding.passed and finding.figures["all_choices_equal"] == 1.0
    assert "scored every choice alike" in finding.reason and "echo prompt logprobs" in finding.reason


def test_the_same_choice_scores_for_every_document_are_degenerate() -> None:
    evidence = [DocEvidence((-1.0, -2.0, -3.0, -4.0), 4, float(i % 2)) for i in range(10)]
    finding = next(f for f in _check(evidence).findings if f.check == "degenerate")
    assert not finding.passed and "do not depend on the prompt" in finding.reason


def test_two_duplicate_documents_are_not_a_pattern() -> None:
    evidence = [DocEvidence((-1.0, -2.0), 2, 1.0)] * 2
    assert next(f for f in _check(evidence).findings if f.check == "degenerate").passed


def test_a_few_documents_alike_are_below_the_fraction() -> None:
    evidence = [DocEvidence((-1.0, -1.0), 2, 1.0)] * 2 + _mc([1, 0, 1, 0, 1, 0], k=2)
    assert next(f for f in _check(evidence).findings if f.check == "degenerate").passed


def _gen(empty: int, total: int, *, unparsed: tuple[bool, ...] = (False,)) -> list[DocEvidence]:
    return [
        sentinel_evidence.generation(["" if i < empty else " 42"], ["[invalid]" if u else "42" for u in unparsed])
        for i in range(total)
    ]


def test_sixty_percent_empty_answers_fail_and_forty_pass() -> None:
    failed = _check(_gen(6, 10), "generate_until", metrics={"exact_match,none": 0.1})
    finding = next(f for f in failed.findings if f.check == "empty")
    assert not failed.trusted and finding.figures["fraction"] == pytest.approx(0.6)
    assert finding.reason == "60% of 10 answers are empty (limit 50%)"
    assert _check(_gen(4, 10), "generate_until", metrics={"exact_match,none": 0.1}).trusted


def test_unparsed_only_when_no_filter_found_anything_and_below_the_set_fraction() -> None:
    """By default unparsed answers are reported, not failed: a random model's all are."""
    neither = _gen(0, 10, unparsed=(True, True))
    default = next(f for f in _check(neither, "generate_until").findings if f.check == "unparsed")
    assert default.passed and default.figures["fraction"] == 1.0 and default.figures["limit"] == 1.0
    strict = SentinelSettings(unparsed_fraction=0.5)

    def unparsed(evidence: list[DocEvidence]) -> sentinels.Finding:
        return next(f for f in sentinels.generation_findings(evidence, strict) if f.check == "unparsed")

    assert unparsed(_gen(0, 10, unparsed=(True, False))).passed  # the lenient filter still read them
    finding = unparsed(neither)
    assert not finding.passed and "nothing the task's filters could extract" in finding.reason


def test_an_answer_cut_inside_its_reasoning_is_truncated() -> None:
    """lm-eval #3382: output cut before the end of its reasoning is parsed as the answer."""
    cut = sentinel_evidence.generation(["<think> so the answer might be"], ["might"])
    whole = sentinel_evidence.generation(["<think> so </think> 42"], ["42"])
    assert cut.answer_truncated and not whole.answer_truncated
    result = _check([cut] * 6 + [whole] * 4, "generate_until")
    assert [f.check for f in result.failures] == ["truncated"]


@pytest.mark.parametrize(
    ("metrics", "bad"),
    [
        ({"acc,none": math.nan}, "acc,none"),
        ({"acc,none": 1.2}, "acc,none"),
        ({"exact_match,strict-match": -0.1}, "exact_match,strict-match"),
        ({"perplexity,none": 0.5}, "perplexity,none"),
        ({"word_perplexity,none": math.inf}, "word_perplexity,none"),
        ({"some_custom_score,none": math.nan}, "some_custom_score,none"),
    ],
)
def test_a_metric_outside_its_range_or_nan_fails(metrics: dict[str, float], bad: str) -> None:
    finding = sentinels.metric_range(metrics)
    assert (
        not finding.passed and bad in finding.figures["out_of_range"] and "outside the possible range" in finding.reason
    )


def test_metrics_within_their_range_pass() -> None:
    metrics = {"acc,none": 0.0, "acc_norm,none": 1.0, "perplexity,none": 1.0, "mcc,none": -0.4, "bleu_max,none": 35.0}
    assert sentinels.metric_range({**metrics, "some_custom_score,none": -math.inf}).passed


def test_a_task_declares_the_checks_that_do_not_apply() -> None:
    config = {"metadata": {"version": 2.0, "sentinels_skip": ["below_chance"]}}
    skip = sentinels.skipped_checks(config)
    result = _check(_mc([0] * 100), skip=skip)
    assert result.trusted and result.skipped == ("below_chance",)
    assert "below_chance" not in result.as_dict()["checks"] and result.as_dict()["skipped"] == ["below_chance"]


def test_served_retries_and_cut_generations() -> None:
    health = {"requests": 10, "retried": 3, "generations": 20, "cut_by_length": 8, "cut_in_reasoning": 12}
    findings = {f.check: f for f in sentinels.served_findings(health, DEFAULTS)}
    assert not findings["retried"].passed and "30% of 10 requests needed a retry" in findings["retried"].reason
    assert not findings["cut_in_reasoning"].passed and findings["cut_in_reasoning"].figures["fraction"] == 0.6
    # stopped at the budget: reported, failed only below a set fraction (a random model always is)
    assert findings["cut_by_length"].passed and findings["cut_by_length"].figures["fraction"] == pytest.approx(0.4)
    all_cut = {**health, "cut_by_length": 20, "cut_in_reasoning": 0}
    assert next(f for f in sentinels.served_findings(all_cut, DEFAULTS) if f.check == "cut_by_length").passed
    strict = SentinelSettings(cut_by_length_fraction=0.3)
    assert not next(f for f in sentinels.served_findings(health, strict) if f.check == "cut_by_length").passed
    quiet = sentinels.served_findings({"requests": 10, "retried": 1, "generations": 0}, DEFAULTS)
    assert all(f.passed for f in quiet)


def test_lm_eval_samples_lines_give_the_same_evidence() -> None:
    """lm-eval writes a log-likelihood as a string pair; one line per document and filter."""
    lines = [
        {"doc_id": 0, "resps": [[["-3.0", "False"]], [["-3.0", "True"]]], "filter": "none", "acc": 0.0},
        {"doc_id": 1, "resps": [[[-1.5, False]], [[-2.5, True]]], "filter": "none", "acc": 1.0},
    ]
    evidence = sentinel_evidence.from_samples("multiple_choice", lines)
    assert evidence == [DocEvidence((-3.0, -3.0), 2, 0.0), DocEvidence((-1.5, -2.5), 2, 1.0)]
    gen = [
        {"doc_id": 0, "resps": [[""]], "filtered_resps": ["[invalid]"], "filter": "strict-match"},
        {"doc_id": 0, "resps": [[""]], "filtered_resps": ["[invalid]"], "filter": "flexible-extract"},
    ]
    [doc] = sentinel_evidence.from_samples("generate_until", gen)
    assert doc.answer_empty and doc.answer_unparsed == (True, True)


def test_settings_parse_off_and_thresholds_and_refuse_unknown_names() -> None:
    assert not SentinelSettings.parse("off").enabled
    parsed = SentinelSettings.parse("below_chance_alpha=0.01, degenerate_fraction=0.2,strict=true")
    assert parsed.below_chance_alpha == 0.01 and parsed.degenerate_fraction == 0.2 and parsed.strict
    with pytest.raises(UsageError, match="unknown setting 'alpha'; known: enabled, strict, below_chance_alpha"):
        SentinelSettings.parse("alpha=0.1")
    with pytest.raises(UsageError, match="empty_fraction must be a number between 0 and 1, not '2'"):
        SentinelSettings.parse("empty_fraction=2")
