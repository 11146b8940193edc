"""The reference distributions a paired comparison needs, from the standard library.

Normal quantiles come from `statistics.NormalDist`, the normal tail from `math.erfc`;
Student's t from the regularised incomplete beta function (the continued fraction of
Numerical Recipes §6.4); the exact binomial from integer arithmetic. scipy would do all of
it, but importing `scipy.stats` takes longer than comparing a whole MMLU run, and Assay's
core does not depend on it.
tests/compare check every function here against scipy.
"""

from __future__ import annotations

import functools
import math
import statistics

_STANDARD_NORMAL = statistics.NormalDist()
_TINY = 1e-300
_EPSILON = 1e-15


def normal_quantile(probability: float) -> float:
    """z such that P(Z ≤ z) = probability (scipy: `norm.ppf`)."""
    return _STANDARD_NORMAL.inv_cdf(probability)


def normal_two_sided_p(statistic: float) -> float:
    """P(|Z| ≥ |z|) for a standard normal Z (scipy: 2·`norm.sf(|z|)`); erfc keeps the far tail exact."""
    if math.isnan(statistic):
        return math.nan
    return math.erfc(abs(statistic) / math.sqrt(2.0))


def binomial_two_sided_half(successes: int, trials: int) -> float:
    """Exact two-sided p-value of `successes` in `trials` under p = ½ (scipy: `binomtest`).

    For p = ½ the distribution is symmetric, so the two-sided p is 2·P(X ≤ min(k, n−k))
    capped at 1; computed with Python integers, so it stays exact for any n.
    """
    if trials == 0:
        return 1.0
    low = min(successes, trials - successes)
    term, tail = 1, 0
    for k in range(low + 1):
        tail += term
        term = term * (trials - k) // (k + 1)
    probability: float = 2 * tail / 2**trials
    return min(1.0, probability)


def t_two_sided_p(statistic: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with `df` degrees of freedom (scipy: 2·`t.sf(|t|)`)."""
    if math.isnan(statistic) or df <= 0:
        return math.nan
    if math.isinf(statistic):
        return 0.0
    x = df / (df + statistic * statistic)
    return _regularized_beta(x, df / 2.0, 0.5)


@functools.lru_cache(maxsize=256)  # every task of a suite asks for the same few (level, n) pairs
def t_quantile(probability: float, df: float) -> float:
    """t such that P(T ≤ t) = probability (scipy: `t.ppf`), by bisection on the tail."""
    if df <= 0:
        return math.nan
    if probability == 0.5:
        return 0.0
    tail = 2 * min(probability, 1 - probability)  # two-sided p of the quantile's |t|
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > tail:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-14 * high:
            break
    value = (low + high) / 2
    return value if probability > 0.5 else -value


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), the regularised incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast only below (a+1)/(a+b+2); above it, use symmetry.
    if x < (a + 1) / (a + b + 2):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of I_x(a, b) by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    result = d
    for m in range(1, 100_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            step = c * d
            result *= step
        if abs(step - 1.0) < _EPSILON:
            break
    return result
