"""Verdict rules, --max-drop, equivalence (TOST) and the Holm-corrected overall verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from assay.compare import planning, statistics, verdicts
from assay.compare.statistics import PairedTest
from assay.errors import UsageError


def _result(delta: float, *, se: float, p: float, n: int = 1000) -> PairedTest:
    half = stats.t.ppf(0.975, n - 1) * se
    tost = stats.t.ppf(0.95, n - 1) * se
    return PairedTest(
        test="paired-t",
        n=n,
        baseline=0.5,
        candidate=0.5 + delta,
        delta=delta,
        se=se,
        ci_low=delta - half,
        ci_high=delta + half,
        interval="t",
        p_value=p,
        mde=2.8 * se,
        tost_low=delta - tost,
        tost_high=delta + tost,
    )


def _verdict(result: PairedTest, *, higher: bool = True, max_drop: float = 0.0, margin: float | None = None) -> str:
    return verdicts.verdict(result, higher_is_better=higher, alpha=0.05, max_drop=max_drop, margin=margin)


def test_the_five_verdicts() -> None:
    assert _verdict(_result(-0.05, se=0.01, p=1e-6)) == "regressed"
    assert _verdict(_result(+0.05, se=0.01, p=1e-6)) == "improved"
    assert _verdict(_result(-0.005, se=0.01, p=0.6), max_drop=0.03) == "unchanged"  # MDE 0.028 ≤ 0.03
    assert _verdict(_result(-0.005, se=0.01, p=0.6)) == "inconclusive"
    assert _verdict(_result(0.001, se=0.002, p=0.6), margin=0.01) == "equivalent"


def test_direction_follows_higher_is_better() -> None:
    assert _verdict(_result(+0.05, se=0.01, p=1e-6), higher=False) == "regressed"  # perplexity went up
    assert _verdict(_result(-0.05, se=0.01, p=1e-6), higher=False) == "improved"


def test_a_significant_drop_within_the_tolerance_is_not_a_regression() -> None:
    small = _result(-0.01, se=0.002, p=1e-6)  # interval about [-0.014, -0.006]
    assert _verdict(small, max_drop=0.02) == "unchanged"
    assert _verdict(small, max_drop=0.01) == "inconclusive"  # might be more than 0.01 worse
    assert _verdict(small, max_drop=0.005) == "regressed"


def test_max_drop_forms_and_the_most_specific_match() -> None:
    tolerances = [verdicts.parse_max_drop(text) for text in ("0.01", "mmlu*=0.02", "mmlu_law:acc=0.05")]
    assert verdicts.max_drop_for(tolerances, "arc_easy", "acc") == 0.01
    assert verdicts.max_drop_for(tolerances, "mmlu_anatomy", "acc") == 0.02
    assert verdicts.max_drop_for(tolerances, "mmlu_law", "acc") == 0.05
    assert verdicts.max_drop_for(tolerances, "mmlu_law", "acc_norm") == 0.02
    assert verdicts.max_drop_for([], "t", "acc") == 0.0
    assert verdicts.max_drop_for([verdicts.parse_max_drop("0.1"), verdicts.parse_max_drop("0.2")], "t", "acc") == 0.2
    for bad in ("x", "mmlu=-1", "=0.1", "mmlu:acc=nan"):
        with pytest.raises(UsageError):
            verdicts.parse_max_drop(bad)


def test_holm_keeps_one_marginal_metric_among_many_from_failing_the_comparison() -> None:
    marginal = _result(-0.02, se=0.0095, p=0.04)
    rows = [marginal] + [_result(0.0, se=0.01, p=0.9)] * 9
    adjusted = statistics.holm([r.p_value for r in rows])
    per_metric = [_verdict(r) for r in rows]
    overall = verdicts.overall(
        [
            verdicts.verdict(r, higher_is_better=True, alpha=0.05, max_drop=0.0, margin=None, p_value=p)
            for r, p in zip(rows, adjusted, strict=False)
        ]
    )
    assert per_metric[0] == "regressed" and overall == "inconclusive"


def test_overall_verdict_order() -> None:
    assert verdicts.overall(["improved", "regressed"]) == "regressed"
    assert verdicts.overall(["improved", "inconclusive"]) == "inconclusive"
    assert verdicts.overall(["improved", "unchanged"]) == "improved"
    assert verdicts.overall(["equivalent", "equivalent"]) == "equivalent"
    assert verdicts.overall(["equivalent", "unchanged"]) == "unchanged"


def test_tost_interval_is_the_one_minus_two_alpha_t_interval() -> None:
    rng = np.random.default_rng(2)
    baseline, candidate = rng.random(60), rng.random(60)
    result = statistics.paired_t(baseline, candidate, alpha=0.05)
    low, high = stats.ttest_rel(candidate, baseline).confidence_interval(0.90)
    assert (result.tost_low, result.tost_high) == (pytest.approx(low), pytest.approx(high))


def test_plan_formulas() -> None:
    from assay.compare.pairing import MetricPairs

    values = [1, 0, 0, 1, 1, 1, 0, 1, 0, 1] * 30
    pairs = MetricPairs("t", "acc", "none", "mean", True, values, values)
    row = planning._row(pairs, alpha=0.05, correlation=0.5, target=0.02)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    variance_d = 2 * np.var(values, ddof=1) * (1 - 0.5)
    assert row.mde == pytest.approx(z * math.sqrt(variance_d / 300))
    assert row.needed == math.ceil(z**2 * variance_d / 0.02**2)
