"""Clustered and stratified standard errors and their z tests, each against an independent computation.

statsmodels is not installed, so the references here are computed another way: the
cluster-robust sandwich with explicit matrices, plain Python loops, scipy's normal
distribution, and crafted cases whose answer is known by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from assay.compare import clustered, distributions, statistics

ALPHA = 0.05


@pytest.mark.parametrize("z", [0.0, 0.3, 1.0, 1.959963984540054, 3.5, 9.0, 38.0, -2.2])
def test_normal_tail_matches_scipy(z: float) -> None:
    assert distributions.normal_two_sided_p(z) == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-12, abs=1e-300)


def _sandwich_se(differences: np.ndarray, clusters: list[str]) -> float:
    """The cluster-robust variance of an intercept-only regression, (X'X)⁻¹ X'ΩX (X'X)⁻¹, with C/(C−1)."""
    n = len(differences)
    x = np.ones((n, 1))
    names = sorted(set(clusters))
    membership = np.array([[1.0 if cluster == name else 0.0 for name in names] for cluster in clusters])  # n × C
    residuals = differences - np.linalg.lstsq(x, differences, rcond=None)[0][0]
    scores = membership.T @ (x * residuals[:, None])  # C × 1: each cluster's summed score
    bread = np.linalg.inv(x.T @ x)
    count = len(names)
    return math.sqrt(float((bread @ scores.T @ scores @ bread)[0, 0]) * count / (count - 1))


def _loop_se(differences: list[float], clusters: list[str]) -> float:
    """Miller's appendix A written out: Σ over clusters of (Σ residuals)², then the C/(C−1) factor."""
    mean = sum(differences) / len(differences)
    totals: dict[str, float] = {}
    for value, cluster in zip(differences, clusters, strict=False):
        totals[cluster] = totals.get(cluster, 0.0) + (value - mean)
    count = len(totals)
    return math.sqrt(count / (count - 1) * sum(total * total for total in totals.values())) / len(differences)


@pytest.mark.parametrize("seed", range(6))
def test_clustered_se_matches_the_sandwich_and_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    clusters = [f"c{int(k)}" for k in rng.integers(0, int(rng.integers(2, 40)), size=n)]
    effect = {name: rng.normal() for name in set(clusters)}  # a shared per-cluster shift: real correlation
    differences = np.array([effect[c] + rng.normal() for c in clusters])
    found = clustered.clustered_se(differences, clusters)
    assert found == pytest.approx(_sandwich_se(differences, clusters), rel=1e-10)
    assert found == pytest.approx(_loop_se(list(differences), clusters), rel=1e-10)


def test_a_known_answer_by_hand() -> None:
    # d = 1, 1 in cluster a and 0, 0 in b: d̄ = ½, cluster sums +1 and −1, C/(C−1) = 2: SE = sqrt(2·2)/4 = ½.
    assert clustered.clustered_se(np.array([1.0, 1.0, 0.0, 0.0]), ["a", "a", "b", "b"]) == pytest.approx(0.5)


def test_clusters_of_one_document_give_the_paired_se() -> None:
    differences = np.random.default_rng(3).normal(size=57)
    n = len(differences)
    singletons = clustered.clustered_se(differences, [str(i) for i in range(n)])
    assert singletons == pytest.approx(statistics.paired_se(differences), rel=1e-12)
    # Without the finite-cluster factor C/(C−1) (Miller's own form) it is the paired SE times sqrt((n−1)/n).
    assert singletons * math.sqrt((n - 1) / n) == pytest.approx(
        statistics.paired_se(differences) * math.sqrt((n - 1) / n)
    )
    assert math.sqrt(float(((differences - differences.mean()) ** 2).sum())) / n == pytest.approx(
        statistics.paired_se(differences) * math.sqrt((n - 1) / n), rel=1e-12
    )
    # A document without a cluster is a cluster of its own.
    assert clustered.clustered_se(differences, [None] * n) == pytest.approx(singletons, rel=1e-12)


def test_one_cluster_or_one_document_is_undefined() -> None:
    assert math.isnan(clustered.clustered_se(np.array([1.0, 0.0, 1.0]), ["p", "p", "p"]))
    assert math.isnan(clustered.clustered_se(np.array([1.0]), ["p"]))


def test_correlated_clusters_widen_the_interval() -> None:
    # Every question on a passage moves together: 10 passages of 10 questions are worth about 10 documents.
    baseline = np.zeros(100)
    candidate = np.repeat([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0], 10)
    passages = [f"p{i // 10}" for i in range(100)]
    naive = statistics.mcnemar(baseline, candidate, alpha=ALPHA)
    result = clustered.clustered_z(baseline, candidate, passages, alpha=ALPHA)
    # Paired SE² = n·¼ / (n(n−1)) = ¼/99; clustered SE² = 10/9 · 10·(10·½)² / 100² = 1/36: a ratio of sqrt(99/9) ≈ 3.3.
    assert result.se == pytest.approx(naive.se * math.sqrt(99 / 9), rel=1e-12)
    assert result.p_value > naive.p_value


def test_clustered_z_is_a_normal_test_on_the_clustered_se() -> None:
    rng = np.random.default_rng(11)
    baseline = rng.integers(0, 2, size=200).astype(float)
    candidate = np.where(rng.random(200) < 0.2, 1 - baseline, baseline)
    clusters = [f"p{i % 37}" for i in range(200)]
    result = clustered.clustered_z(baseline, candidate, clusters, alpha=ALPHA)
    delta = float((candidate - baseline).mean())
    se = _loop_se(list(candidate - baseline), clusters)
    assert (result.test, result.interval, result.n) == ("clustered z", "normal", 200)
    assert (result.delta, result.se) == (pytest.approx(delta), pytest.approx(se))
    assert result.p_value == pytest.approx(2 * stats.norm.sf(abs(delta / se)), rel=1e-10)
    low, high = stats.norm.interval(1 - ALPHA, loc=delta, scale=se)
    assert (result.ci_low, result.ci_high) == (pytest.approx(low), pytest.approx(high))
    tost_low, tost_high = stats.norm.interval(1 - 2 * ALPHA, loc=delta, scale=se)
    assert (result.tost_low, result.tost_high) == (pytest.approx(tost_low), pytest.approx(tost_high))
    assert result.mde == pytest.approx((stats.norm.ppf(1 - ALPHA / 2) + stats.norm.ppf(0.8)) * se)
    assert (result.gained, result.lost) == (
        int(((baseline == 0) & (candidate == 1)).sum()),
        int(((baseline == 1) & (candidate == 0)).sum()),
    )


def test_identical_runs_are_p_one_and_a_constant_shift_p_zero() -> None:
    scores = np.array([0.2, 0.5, 0.9, 0.4])
    same = clustered.clustered_z(scores, scores.copy(), ["a", "a", "b", "b"], alpha=ALPHA)
    assert (same.delta, same.se, same.p_value, same.mde, same.gained) == (0.0, 0.0, 1.0, 0.0, None)
    shifted = clustered.clustered_z(scores, scores + 0.1, ["a", "a", "b", "b"], alpha=ALPHA)
    assert shifted.se == pytest.approx(0.0, abs=1e-15) and shifted.p_value < 1e-12


def _strata(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    parts = []
    for size, rate in ((40, 0.3), (25, 0.6), (70, 0.5)):
        baseline = (rng.random(size) < rate).astype(float)
        parts.append((baseline, np.where(rng.random(size) < 0.25, 1 - baseline, baseline)))
    return parts


@pytest.mark.parametrize("weight_by_size", [True, False])
def test_stratified_z_is_the_weighted_mean_with_independent_subtasks(weight_by_size: bool) -> None:
    parts = _strata(5)
    sizes = [len(base) for base, _ in parts]
    weights = [n / sum(sizes) if weight_by_size else 1 / len(parts) for n in sizes]
    result = clustered.stratified_z(
        [clustered.Stratum(b, c, w) for (b, c), w in zip(parts, weights, strict=False)], alpha=ALPHA
    )
    # Independently: each subtask's mean difference has variance s²/n (ddof 1); independent subtasks add.
    variance = sum(w * w * np.var(c - b, ddof=1) / len(b) for (b, c), w in zip(parts, weights, strict=False))
    assert result.se == pytest.approx(math.sqrt(variance), rel=1e-12)
    if weight_by_size:  # every paired document counts once: the mean over all of them
        everything = np.concatenate([c - b for b, c in parts])
        assert result.delta == pytest.approx(everything.mean(), rel=1e-12)
        assert result.baseline == pytest.approx(np.concatenate([b for b, _ in parts]).mean(), rel=1e-12)
    else:  # each subtask's mean counts 1/k
        assert result.delta == pytest.approx(np.mean([(c - b).mean() for b, c in parts]), rel=1e-12)
        assert result.candidate == pytest.approx(np.mean([c.mean() for _, c in parts]), rel=1e-12)
    assert result.p_value == pytest.approx(2 * stats.norm.sf(abs(result.delta) / result.se), rel=1e-10)
    assert (result.test, result.n) == ("stratified z", sum(sizes))
    assert result.gained == sum(int(((b == 0) & (c == 1)).sum()) for b, c in parts)


def test_a_clustered_subtask_brings_its_clustered_se_into_the_group() -> None:
    (b1, c1), (b2, c2), _ = _strata(8)
    passages = [f"p{i % 6}" for i in range(len(b1))]
    result = clustered.stratified_z(
        [clustered.Stratum(b1, c1, 0.5, passages), clustered.Stratum(b2, c2, 0.5)], alpha=ALPHA
    )
    expected = math.sqrt(0.25 * _loop_se(list(c1 - b1), passages) ** 2 + 0.25 * statistics.paired_se(c2 - b2) ** 2)
    assert result.se == pytest.approx(expected, rel=1e-12)


def test_a_group_against_itself_is_delta_zero_and_p_one() -> None:
    parts = _strata(2)
    result = clustered.stratified_z([clustered.Stratum(b, b.copy(), 1 / 3) for b, _ in parts], alpha=ALPHA)
    assert (result.delta, result.se, result.p_value, result.gained, result.lost) == (0.0, 0.0, 1.0, 0, 0)
