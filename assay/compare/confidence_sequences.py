"""Betting confidence sequences for the mean of a bounded stream, valid at every look.

The construction is Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
betting" (JRSS-B 2023), §4: for observations x_i in [0, 1] with a common mean μ (documents in
a random order make a task's per-document values exchangeable, with the task's mean as their
mean), a gambler who bets λ_i on "x_i is above m" holds the capital

    K⁺_t(m) = ∏_{i≤t} (1 + λ_i(m)·(x_i − m)),     and on "below m":  K⁻_t(m) = ∏ (1 − λ_i(m)·(x_i − m)).

With the bet λ_i chosen before x_i is seen (predictable) and kept in [0, 1/m) (resp.
[0, 1/(1−m))), K⁺(μ) is a non-negative martingale, so by Ville's inequality it ever reaches
1/α with probability at most α: {m : max_{s≤t} K⁺_s(m) < 1/α} is a one-sided (1−α) lower
confidence sequence, holding at every t at once (any stopping rule, any number of looks).

The bets here are λ_i(m) = min(λ̃_i, c/m) (c/(1−m) below), λ̃_i built only from x_1..x_{i−1}
and *not* from m. That choice makes every factor non-increasing in m (K⁻: non-decreasing),
so the rejected values form a ray: the lower bound is a single number, found by bisection, and "the interval lies above m₀" is exactly "m₀ is rejected", one capital process.
Two families of λ̃:

- `boundary_bets`: tuned to one boundary m₀ (the gate's −maxDrop): the approximately
  growth-optimal bet (μ̂ − m₀)/(σ̂² + (μ̂ − m₀)²) of WSR's aGRAPA, evaluated at m₀ for every m;
- `width_bets`: tuned to a target half-width w: w/(σ̂² + w²), the bet that grows fastest
  against a mean w away.

μ̂ and σ̂² are WSR's regularised running estimates (a prior point at ½ with variance ¼).
"""

from __future__ import annotations

import math

import numpy as np

CAP = 0.75
"""c: the bet is at most c/m (resp. c/(1−m)), so a factor is at least 1 − c: one document costs at most log 4."""
TOLERANCE = 2.0**-18
"""How far inside the true bound (on the unit scale, about 4e-6) a reported bound may lie."""


def predictable_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """μ̂_{i−1} and σ̂²_{i−1} for every i along axis 0 (time; further axes are separate runs).

    μ̂_t = (½ + Σ_{i≤t} x_i)/(t + 1), σ̂²_t = (¼ + Σ_{i≤t} (x_i − μ̂_i)²)/(t + 1) (WSR 2023, eq. 26):
    what is known before x_i, so that a bet built from them is predictable.
    """
    t = np.arange(1, x.shape[0] + 1, dtype=float).reshape((-1,) + (1,) * (x.ndim - 1))
    means = (0.5 + np.cumsum(x, axis=0)) / (t + 1)
    variances = (0.25 + np.cumsum((x - means) ** 2, axis=0)) / (t + 1)
    before = np.concatenate([np.full((1,) + x.shape[1:], 0.5), means[:-1]], axis=0)
    spread = np.concatenate([np.full((1,) + x.shape[1:], 0.25), variances[:-1]], axis=0)
    return before, spread


def boundary_bets(x: np.ndarray, boundary: float, *, upward: bool) -> np.ndarray:
    """λ̃_i for testing the mean against `boundary` (unit scale): upward bets on a mean above it."""
    means, variances = predictable_moments(x)
    gap = (means - boundary) if upward else (boundary - means)
    return np.clip(gap / (variances + gap * gap), 0.0, None)


def width_bets(x: np.ndarray, half_width: float) -> np.ndarray:
    """λ̃_i that grow capital fastest against a mean `half_width` (unit scale) from the truth."""
    _, variances = predictable_moments(x)
    return half_width / (variances + half_width * half_width)


def log_factors(x: np.ndarray, bets: np.ndarray, m: np.ndarray | float, *, upward: bool) -> np.ndarray:
    """log(1 ± λ_i(m)·(x_i − m)) elementwise, the bet clipped to c/m (c/(1−m) betting downward);
    m broadcasts against x and bets (x[:, None] with m of shape (k,): k candidate means at once)."""
    m = np.asarray(m, dtype=float)
    if upward:
        factors: np.ndarray = np.log1p(np.minimum(bets, CAP / np.maximum(m, 1e-300)) * (x - m))
    else:
        factors = np.log1p(-np.minimum(bets, CAP / np.maximum(1.0 - m, 1e-300)) * (x - m))
    return factors


def peak_log_capital(x: np.ndarray, bets: np.ndarray, m: np.ndarray | float, *, upward: bool) -> np.ndarray:
    """max(0, max over t of log K_t(m)), time along axis 0 of x and bets (see `log_factors`)."""
    peak: np.ndarray = np.maximum(np.cumsum(log_factors(x, bets, m, upward=upward), axis=0).max(axis=0), 0.0)
    return peak


def running_peak_log_capital(x: np.ndarray, bets: np.ndarray, m: np.ndarray | float, *, upward: bool) -> np.ndarray:
    """max(0, max over s ≤ t of log K_s(m)) at every t (axis 0): whether m is ruled out by time t."""
    paths = np.maximum.accumulate(np.cumsum(log_factors(x, bets, m, upward=upward), axis=0), axis=0)
    peak: np.ndarray = np.maximum(paths, 0.0)
    return peak


def rejects(x: np.ndarray, bets: np.ndarray, m: float, *, upward: bool, alpha: float) -> bool:
    """Whether the one-sided sequence has ruled out `m` by now (upward: the mean is above m)."""
    if x.size == 0:
        return False
    peak = peak_log_capital(x, bets, m, upward=upward)
    return bool(peak >= math.log(1.0 / alpha))


def bound(x: np.ndarray, bets: np.ndarray, *, upward: bool, alpha: float, anchor: float | None = None) -> float:
    """The one-sided bound on the unit scale: the largest m ruled out below the mean (upward) or the
    smallest above it; 0 (resp. 1) when nothing is. Found by bisection (the ruled-out values are a
    ray), it lies within `TOLERANCE` of the true bound, on the safe side. `anchor` (the decision
    boundary) is tried first, so the bound is past it exactly when `rejects` says so.
    """
    ruled_out_end, open_end = (0.0, 1.0) if upward else (1.0, 0.0)  # a trivial bound; a value never tried
    if x.size == 0:
        return ruled_out_end
    if anchor is not None and 0.0 < anchor < 1.0:
        if rejects(x, bets, anchor, upward=upward, alpha=alpha):
            ruled_out_end = anchor
        else:
            open_end = anchor
    while abs(open_end - ruled_out_end) > TOLERANCE:
        middle = (open_end + ruled_out_end) / 2
        if rejects(x, bets, middle, upward=upward, alpha=alpha):
            ruled_out_end = middle
        else:
            open_end = middle
    return ruled_out_end
