"""Paired tests of candidate − baseline over the same documents.

Three tests, chosen by what a metric's per-document value is (docs/compare.md has the
formulas and sources):

- 0/1 scores averaged (acc, exact_match): exact McNemar on the discordant pairs;
- other averaged scores (acc on a partial-credit metric, likelihood): paired t;
- corpus-level aggregations (perplexity, BLEU, F1, ...): a paired bootstrap that resamples
  documents, the same indices for both runs, and recomputes the aggregation on each side.

Each returns a `PairedTest`; where a quantity is undefined (one document, no spread) it is
NaN, which the renderers print as "N/A" and JSON as null.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from assay.compare import distributions

POWER = 0.8
"""The power at which the minimum detectable effect is stated."""

Aggregate = Callable[[Any], float]
"""A corpus-level aggregation over one side's items (a numpy array or a list)."""


@dataclasses.dataclass(frozen=True)
class PairedTest:
    """One metric's comparison on n paired documents."""

    test: str
    """"mcnemar", "paired-t" or "bootstrap" (clustered.py adds "clustered z" and "stratified z")."""
    n: int
    baseline: float
    candidate: float
    delta: float
    """candidate − baseline."""
    se: float
    """Standard error of delta (paired or clustered; for the bootstrap, the replicates' standard deviation)."""
    ci_low: float
    ci_high: float
    interval: str
    """How the interval was made: "t" (df n−1), "normal" (the z tests) or "bootstrap percentile"."""
    p_value: float
    mde: float
    """Smallest |delta| detectable at level alpha with 80% power, from the paired variance."""
    tost_low: float
    tost_high: float
    """The (1 − 2α) interval, which decides equivalence (TOST) against a margin."""
    gained: int | None = None
    """0/1 metrics: documents the baseline got wrong and the candidate right."""
    lost: int | None = None
    """0/1 metrics: documents the baseline got right and the candidate wrong."""
    iterations: int | None = None
    """The bootstrap's: how many resamples made its interval and p."""


def paired_se(differences: np.ndarray) -> float:
    """sqrt(Σ(dᵢ − d̄)² / (n(n−1))); NaN for fewer than two documents."""
    n = len(differences)
    if n < 2:
        return math.nan
    centred = differences - differences.mean()
    return math.sqrt(float(centred @ centred) / (n * (n - 1)))


def minimum_detectable_effect(se: float, *, alpha: float, delta: float = 0.0, power: float = POWER) -> float:
    """(z_{1−α/2} + z_{power})·SE: the true difference a same-size rerun detects at that power.

    NaN where SE is 0 but `delta` is not: every document moved by the same amount (a total
    collapse of a few documents does that), which says nothing about how much a rerun varies,
    so it is no evidence that a small run would have seen a drop.
    """
    if se == 0 and delta != 0:
        return math.nan
    return (distributions.normal_quantile(1 - alpha / 2) + distributions.normal_quantile(power)) * se


HOLM_RESOLUTION = 10
"""The bootstrap's smallest p-value, 2/(B + 1), is at most α/(HOLM_RESOLUTION·k) over k rows."""


def bootstrap_iterations(requested: int, *, rows: int, alpha: float) -> int:
    """Iterations for a comparison of `rows` rows under Holm: the request, or more.

    With B iterations the bootstrap's smallest two-sided p is 2/(B + 1); Holm multiplies the
    smallest of k p-values by k, so below B ≈ 2k/α no bootstrap row could ever be significant
    (a perplexity that tripled would read inconclusive among 26 rows at B = 1000). B grows
    to ⌈2·HOLM_RESOLUTION·k/α⌉ so that a clear effect's Holm p is a tenth of α. The comparison
    spends them only on a row whose p at the requested B is below α (comparison.py).
    """
    return max(requested, math.ceil(2 * HOLM_RESOLUTION * rows / alpha))


def t_interval(delta: float, se: float, n: int, *, alpha: float) -> tuple[float, float]:
    """delta ± t_{1−α/2, n−1}·SE (NaN below two documents)."""
    if n < 2 or math.isnan(se):
        return math.nan, math.nan
    half = distributions.t_quantile(1 - alpha / 2, n - 1) * se
    return delta - half, delta + half


def mcnemar(baseline: np.ndarray, candidate: np.ndarray, *, alpha: float) -> PairedTest:
    """Exact McNemar: two-sided binomial test of `gained` among the discordant pairs."""
    gained = int(np.count_nonzero((baseline == 0) & (candidate == 1)))
    lost = int(np.count_nonzero((baseline == 1) & (candidate == 0)))
    p_value = distributions.binomial_two_sided_half(min(gained, lost), gained + lost)
    return _mean_test("mcnemar", baseline, candidate, p_value, alpha=alpha, gained=gained, lost=lost)


def paired_t(baseline: np.ndarray, candidate: np.ndarray, *, alpha: float) -> PairedTest:
    """Paired t: t = d̄ / SE with n − 1 degrees of freedom.

    Where every difference is exactly zero the runs agree document by document: p = 1
    (scipy's `ttest_rel` returns NaN there). A constant non-zero difference gives p = 0.
    """
    differences = candidate - baseline
    n = len(differences)
    se = paired_se(differences)
    delta = float(differences.mean()) if n else math.nan
    if not np.isfinite(differences).all():
        p_value = math.nan  # a NaN or infinite document score: nothing finite to test
    elif n >= 2 and not differences.any():
        p_value = 1.0
    elif n >= 2 and se == 0:
        p_value = 0.0
    else:
        p_value = distributions.t_two_sided_p(delta / se, n - 1) if n >= 2 else math.nan
    return _mean_test("paired-t", baseline, candidate, p_value, alpha=alpha)


def _mean_test(
    test: str,
    baseline: np.ndarray,
    candidate: np.ndarray,
    p_value: float,
    *,
    alpha: float,
    gained: int | None = None,
    lost: int | None = None,
) -> PairedTest:
    differences = candidate - baseline
    n = len(differences)
    se = paired_se(differences)
    delta = float(differences.mean())
    low, high = t_interval(delta, se, n, alpha=alpha)
    tost_low, tost_high = t_interval(delta, se, n, alpha=2 * alpha)
    return PairedTest(
        test=test,
        n=n,
        baseline=float(baseline.mean()),
        candidate=float(candidate.mean()),
        delta=delta,
        se=se,
        ci_low=low,
        ci_high=high,
        interval="t",
        p_value=p_value,
        mde=minimum_detectable_effect(se, alpha=alpha, delta=delta),
        tost_low=tost_low,
        tost_high=tost_high,
        gained=gained,
        lost=lost,
    )


def paired_bootstrap(
    baseline: Sequence[Any], candidate: Sequence[Any], aggregate: Aggregate, *, alpha: float, iterations: int, seed: int
) -> PairedTest:
    """Resample documents with replacement (the same indices for both runs) `iterations` times.

    The interval is the α/2 and 1−α/2 percentiles of the replicated differences; the p-value
    is twice the smaller share of replicates at or beyond 0 on either side, each share
    counted as (k + 1)/(B + 1) so that it is never 0, capped at 1. A side whose value is not
    finite (a −inf log-likelihood makes a perplexity infinite) or a replicate that is not
    leaves the interval, SE, MDE and p undefined (NaN): nothing finite can be said.
    """
    n = len(baseline)
    base_value, cand_value = float(aggregate(baseline)), float(aggregate(candidate))
    rng = np.random.default_rng(seed)
    replicates = np.empty(iterations)
    for i in range(iterations):
        indices = rng.integers(0, n, size=n)
        replicates[i] = float(aggregate(_take(candidate, indices))) - float(aggregate(_take(baseline, indices)))
    finite = math.isfinite(base_value) and math.isfinite(cand_value) and bool(np.isfinite(replicates).all())
    low, high, tost_low, tost_high = (
        np.quantile(replicates, [alpha / 2, 1 - alpha / 2, alpha, 1 - alpha]) if n and finite else [math.nan] * 4
    )
    se = float(replicates.std(ddof=1)) if iterations > 1 and n and finite else math.nan
    below = (int(np.count_nonzero(replicates <= 0)) + 1) / (iterations + 1)
    above = (int(np.count_nonzero(replicates >= 0)) + 1) / (iterations + 1)
    p_value = min(1.0, 2 * min(below, above)) if finite else math.nan
    return PairedTest(
        test="bootstrap",
        n=n,
        baseline=base_value,
        candidate=cand_value,
        delta=cand_value - base_value,
        se=se,
        ci_low=float(low),
        ci_high=float(high),
        interval="bootstrap percentile",
        p_value=p_value,
        mde=minimum_detectable_effect(se, alpha=alpha, delta=cand_value - base_value),
        tost_low=float(tost_low),
        tost_high=float(tost_high),
        iterations=iterations,
    )


def _take(items: Sequence[Any], indices: np.ndarray) -> Any:
    """items[indices]: numpy's fancy indexing for arrays (fast), a list otherwise."""
    if isinstance(items, np.ndarray):
        return items[indices]
    return [items[j] for j in indices]


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input's order (NaN stays NaN, not counted)."""
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(order)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[index] = running
    return adjusted
