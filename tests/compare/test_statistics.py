"""Every statistic of `assay compare` against scipy, on crafted data with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from assay.compare import distributions, statistics

ALPHA = 0.05


@pytest.mark.parametrize("df", [1, 2, 3, 7, 30, 299, 14041])
@pytest.mark.parametrize("t", [0.0, 0.05, 1.0, 1.96, 3.5, 12.0])
def test_t_tail_matches_scipy(t: float, df: int) -> None:
    assert distributions.t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("df", [1, 2, 5, 99, 14041])
@pytest.mark.parametrize("probability", [0.5, 0.8, 0.95, 0.975, 0.995, 0.025])
def test_t_quantile_matches_scipy(probability: float, df: int) -> None:
    assert distributions.t_quantile(probability, df) == pytest.approx(stats.t.ppf(probability, df), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("probability", [0.8, 0.95, 0.975, 0.995])
def test_normal_quantile_matches_scipy(probability: float) -> None:
    assert distributions.normal_quantile(probability) == pytest.approx(stats.norm.ppf(probability), rel=1e-12)


@pytest.mark.parametrize(
    ("k", "n"), [(0, 1), (1, 1), (0, 5), (2, 5), (3, 6), (10, 40), (0, 60), (450, 1000), (6800, 14000)]
)
def test_exact_binomial_matches_scipy(k: int, n: int) -> None:
    assert distributions.binomial_two_sided_half(k, n) == pytest.approx(stats.binomtest(k, n, 0.5).pvalue, rel=1e-12)


def _pair(gained: int, lost: int, both_right: int, both_wrong: int) -> tuple[np.ndarray, np.ndarray]:
    baseline = np.array([0] * gained + [1] * lost + [1] * both_right + [0] * both_wrong, dtype=float)
    candidate = np.array([1] * gained + [0] * lost + [1] * both_right + [0] * both_wrong, dtype=float)
    return baseline, candidate


@pytest.mark.parametrize(("gained", "lost"), [(3, 12), (12, 3), (7, 7), (0, 9), (1, 0)])
def test_mcnemar_is_the_exact_binomial_on_discordant_pairs(gained: int, lost: int) -> None:
    baseline, candidate = _pair(gained, lost, both_right=40, both_wrong=25)
    result = statistics.mcnemar(baseline, candidate, alpha=ALPHA)
    assert (result.gained, result.lost) == (gained, lost)
    assert result.p_value == pytest.approx(stats.binomtest(min(gained, lost), gained + lost, 0.5).pvalue)
    assert result.delta == pytest.approx((gained - lost) / len(baseline))
    assert result.baseline == pytest.approx(baseline.mean()) and result.candidate == pytest.approx(candidate.mean())


def test_mcnemar_without_discordant_pairs_is_p_one() -> None:
    baseline, candidate = _pair(0, 0, both_right=10, both_wrong=5)
    result = statistics.mcnemar(baseline, candidate, alpha=ALPHA)
    assert (result.delta, result.p_value, result.se, result.mde) == (0.0, 1.0, 0.0, 0.0)


def test_paired_se_is_the_paired_formula_and_ttest_rel_statistic() -> None:
    rng = np.random.default_rng(3)
    baseline = rng.random(57)
    candidate = baseline * 0.8 + rng.random(57) * 0.3
    d = candidate - baseline
    se = statistics.paired_se(d)
    assert se == pytest.approx(math.sqrt(((d - d.mean()) ** 2).sum() / (57 * 56)))
    assert se == pytest.approx(
        math.sqrt((np.var(baseline, ddof=1) + np.var(candidate, ddof=1) - 2 * np.cov(baseline, candidate)[0, 1]) / 57)
    )
    assert d.mean() / se == pytest.approx(stats.ttest_rel(candidate, baseline).statistic)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_t_matches_ttest_rel_and_its_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    baseline = rng.normal(0.5, 0.2, 80)
    candidate = baseline + rng.normal(0.03, 0.1, 80)
    result = statistics.paired_t(baseline, candidate, alpha=ALPHA)
    reference = stats.ttest_rel(candidate, baseline)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    low, high = reference.confidence_interval(0.95)
    assert (result.ci_low, result.ci_high) == (pytest.approx(low), pytest.approx(high))
    assert result.mde == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * result.se)


def test_paired_t_with_ties_uses_only_the_differences() -> None:
    baseline = np.array([0.5, 0.5, 0.5, 0.25, 0.25, 1.0])
    candidate = np.array([0.5, 0.75, 0.5, 0.25, 0.5, 1.0])  # four tied documents
    result = statistics.paired_t(baseline, candidate, alpha=ALPHA)
    assert result.p_value == pytest.approx(stats.ttest_rel(candidate, baseline).pvalue)


def test_all_equal_runs_give_delta_zero_and_p_one() -> None:
    values = np.array([0.1, 0.7, 0.3, 0.3])
    result = statistics.paired_t(values, values.copy(), alpha=ALPHA)
    assert (result.delta, result.p_value, result.se, result.ci_low, result.ci_high) == (0.0, 1.0, 0.0, 0.0, 0.0)


def test_a_constant_nonzero_difference_is_p_zero_like_scipy() -> None:
    baseline = np.array([0.5, 0.25, 0.75])  # exact in binary: the differences are exactly equal
    result = statistics.paired_t(baseline, baseline + 0.25, alpha=ALPHA)
    assert result.p_value == stats.ttest_rel(baseline + 0.25, baseline).pvalue == 0.0


def test_one_document_has_no_standard_error() -> None:
    result = statistics.paired_t(np.array([0.2]), np.array([0.9]), alpha=ALPHA)
    assert result.n == 1 and result.delta == pytest.approx(0.7)
    assert all(math.isnan(v) for v in (result.se, result.ci_low, result.ci_high, result.p_value, result.mde))
    mcnemar = statistics.mcnemar(np.array([0.0]), np.array([1.0]), alpha=ALPHA)
    assert mcnemar.p_value == stats.binomtest(0, 1, 0.5).pvalue == 1.0


def test_bootstrap_of_a_mean_agrees_with_the_paired_t() -> None:
    rng = np.random.default_rng(5)
    baseline = rng.normal(0, 1, 400)
    candidate = baseline + rng.normal(0.2, 0.5, 400)
    boot = statistics.paired_bootstrap(
        baseline, candidate, lambda x: float(np.mean(x)), alpha=ALPHA, iterations=4000, seed=1
    )
    t = statistics.paired_t(baseline, candidate, alpha=ALPHA)
    assert boot.delta == pytest.approx(t.delta)
    assert boot.se == pytest.approx(t.se, rel=0.1)
    assert boot.ci_low == pytest.approx(t.ci_low, abs=0.02) and boot.ci_high == pytest.approx(t.ci_high, abs=0.02)
    assert boot.p_value == pytest.approx(2 / 4001)  # every replicate above 0: the smallest p it can state


def test_bootstrap_is_seeded_and_p_one_on_identical_runs() -> None:
    items = np.random.default_rng(0).normal(-2, 1, 50)
    first = statistics.paired_bootstrap(
        items, items + 0.01, lambda x: float(np.exp(-x.mean())), alpha=ALPHA, iterations=200, seed=9
    )
    again = statistics.paired_bootstrap(
        items, items + 0.01, lambda x: float(np.exp(-x.mean())), alpha=ALPHA, iterations=200, seed=9
    )
    assert first == again
    same = statistics.paired_bootstrap(
        items, items.copy(), lambda x: float(np.exp(-x.mean())), alpha=ALPHA, iterations=200, seed=9
    )
    assert (same.delta, same.p_value, same.ci_low, same.ci_high) == (0.0, 1.0, 0.0, 0.0)


def test_holm_matches_the_step_down_definition() -> None:
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    # sorted: 0.005·4=0.02, 0.01·3=0.03, 0.03·2=0.06, 0.04·1=0.04→ monotone 0.06
    assert statistics.holm(p)[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(statistics.holm(p)[4])
