"""The betting confidence sequences against their definition: coverage at every look, in simulation;
bounds equal to the capital process's root, and to its closed form where there is one."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from scipy import optimize, stats

from assay.compare import confidence_sequences as cs
from assay.compare import sequential_runs
from assay.compare.sequential import MetricBounds, SequentialGate

ALPHA = 0.05
STREAMS = 500
LENGTH = 2000


def slack(alpha: float, runs: int) -> float:
    """A one-sided 99.9% binomial allowance over α: the test fails one seed in a thousand even if
    the sequence missed exactly α of the time (it misses less: Ville's inequality is not tight)."""
    return float(stats.binom.ppf(0.999, runs, alpha)) / runs - alpha


def streams(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """(LENGTH, STREAMS) values in [0, 1] and their true mean."""
    shape = (LENGTH, STREAMS)
    if kind == "paired 0/1, 10% discordant, −0.02":  # d ∈ {−1, 0, 1} mapped to {0, ½, 1}
        u = rng.random(shape)
        return np.where(u < 0.06, 0.0, np.where(u < 0.1, 1.0, 0.5)), 0.5 - 0.01
    if kind == "beta(2, 5)":
        return rng.beta(2, 5, shape), 2 / 7
    if kind == "bernoulli(0.02)":  # near the edge of the range, where the clip c/m binds
        return (rng.random(shape) < 0.02).astype(float), 0.02
    raise AssertionError(kind)


KINDS = ["paired 0/1, 10% discordant, −0.02", "beta(2, 5)", "bernoulli(0.02)"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bets", ["tuned to the truth", "tuned elsewhere", "tuned to a width"])
def test_the_truth_stays_inside_at_every_time_in_all_but_alpha_of_the_streams(kind: str, bets: str) -> None:
    x, mean = streams(kind, np.random.default_rng(zlib.crc32(f"{kind} {bets}".encode())))
    for upward in (True, False):
        if bets == "tuned to the truth":  # the most aggressive test of the truth there is
            lam = cs.boundary_bets(x, mean, upward=upward)
        elif bets == "tuned elsewhere":
            lam = cs.boundary_bets(x, mean - 0.05 if upward else mean + 0.05, upward=upward)
        else:
            lam = cs.width_bets(x, 0.02)
        peak = cs.peak_log_capital(x, lam, mean, upward=upward)
        missed = float(np.mean(peak >= math.log(1 / ALPHA)))  # at some t of 2000, the bound crossed the truth
        assert missed <= ALPHA + slack(ALPHA, STREAMS), (upward, missed)


def test_the_coverage_check_catches_a_sequence_that_is_not_valid_at_every_look() -> None:
    """Peeking at a fixed-sample 95% one-sided interval after every 100 documents misses far more."""
    x, mean = streams("beta(2, 5)", np.random.default_rng(11))
    t = np.arange(1, LENGTH + 1)[:, None]
    running = np.cumsum(x, axis=0) / t
    se = np.sqrt(np.cumsum((x - running) ** 2, axis=0) / (t * (t - 1)).clip(min=1))
    looks = slice(99, None, 100)
    missed = float(np.mean(((running - 1.645 * se)[looks] > mean).any(axis=0)))
    assert missed > ALPHA + slack(ALPHA, STREAMS)


def test_the_gate_misses_its_true_difference_in_at_most_alpha_of_runs_at_every_chunk() -> None:
    """The gate itself, through its vectorised twin: a true difference of exactly −maxDrop is
    called non-inferior (lower bound above it) in at most α of runs, whenever it is checked."""
    rng = np.random.default_rng(12)
    u = rng.random((LENGTH, STREAMS))
    differences = np.where(u < 0.06, -1.0, np.where(u < 0.1, 1.0, 0.0))  # true mean −0.02
    stops = sequential_runs.stops(differences, width=1.0, max_drop=0.02, alpha=ALPHA, chunk=64)
    assert float(np.mean(stops.reasons == sequential_runs.NON_INFERIOR)) <= ALPHA + slack(ALPHA, STREAMS)
    assert float(np.mean(stops.reasons == sequential_runs.REGRESSED)) <= ALPHA + slack(ALPHA, STREAMS)


def test_the_interval_shrinks_as_documents_arrive() -> None:
    gate = SequentialGate({"acc": MetricBounds(0, 1)}, target_half_width=0.01)
    scores = (np.random.default_rng(13).random(8000) < 0.6).astype(float)
    widths = []
    for start in range(0, 8000, 1000):
        gate.observe({"acc": scores[start : start + 1000]})
        (look,) = gate.decide().looks
        widths.append(look.upper - look.lower)
        assert look.lower < 0.6 < look.upper
    assert all(later < earlier for earlier, later in zip(widths, widths[1:], strict=False))
    assert widths[-1] < widths[0] / 2  # about 1/√n: eight times the documents, a third of the width


@pytest.mark.parametrize(
    ("value", "bet", "n", "alpha"), [(0.5, 0.3, 400, 0.05), (0.7, 0.6, 50, 0.01), (0.2, 0.7, 1000, 0.1)]
)
def test_a_constant_bet_on_a_constant_stream_gives_the_closed_form_bound(
    value: float, bet: float, n: int, alpha: float
) -> None:
    """log K_n(m) = n·log(1 + λ(v − m)) rises with n for m < v, so the lower bound solves
    n·log(1 + λ(v − m)) = log(1/α): m = v − (α^(−1/n) − 1)/λ (while λ ≤ c/m)."""
    x, lam = np.full(n, value), np.full(n, bet)
    expected = value - (alpha ** (-1 / n) - 1) / bet
    assert bet <= cs.CAP / expected and bet <= cs.CAP / (1 - value - (alpha ** (-1 / n) - 1) / bet)
    lower = cs.bound(x, lam, upward=True, alpha=alpha)
    assert expected - 1e-5 <= lower <= expected
    upper = cs.bound(x, lam, upward=False, alpha=alpha)
    assert value + (alpha ** (-1 / n) - 1) / bet <= upper <= value + (alpha ** (-1 / n) - 1) / bet + 1e-5


@pytest.mark.parametrize("upward", [True, False])
def test_the_bound_is_the_root_of_the_running_peak_of_the_capital(upward: bool) -> None:
    """Against the definition written out in plain Python: the bound is where the largest log
    capital so far, over every prefix of the stream, reaches log(1/α), with the bets clipped."""
    rng = np.random.default_rng(14)
    x = rng.beta(0.5, 0.5, 300)
    lam = cs.boundary_bets(x, 0.45 if upward else 0.55, upward=upward)

    def peak_minus_threshold(m: float) -> float:
        capital, peak = 0.0, 0.0
        for value, bet in zip(x, lam, strict=False):
            if upward:
                capital += math.log(1 + min(bet, cs.CAP / m) * (value - m))
            else:
                capital += math.log(1 - min(bet, cs.CAP / (1 - m)) * (value - m))
            peak = max(peak, capital)
        return peak - math.log(1 / ALPHA)

    mean = float(x.mean())
    root = (
        optimize.brentq(peak_minus_threshold, 1e-9, mean)
        if upward
        else optimize.brentq(peak_minus_threshold, mean, 1 - 1e-9)
    )
    found = cs.bound(x, lam, upward=upward, alpha=ALPHA)
    assert (root - 1e-5 <= found <= root) if upward else (root <= found <= root + 1e-5)


def test_the_predictable_estimates_use_only_earlier_values() -> None:
    x = np.array([1.0, 0.0, 1.0, 1.0])
    means, variances = cs.predictable_moments(x)
    assert means[0] == 0.5 and variances[0] == 0.25  # the prior, before any value
    assert means[2] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    changed = x.copy()
    changed[3] = 0.0  # the last value changes no estimate used to bet on it
    assert np.array_equal(cs.predictable_moments(changed)[0], means)


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_passes_the_decision_boundary_exactly_when_the_boundary_is_ruled_out(seed: int) -> None:
    """The gate decides by where the bound lies; that must be the test of the boundary itself."""
    rng = np.random.default_rng(seed)
    anchor = 0.49
    x = np.where(rng.random(300) < 0.3, (rng.random(300) < 0.2 + 0.12 * seed).astype(float), 0.5)
    for upward in (True, False):
        lam = cs.boundary_bets(x, anchor, upward=upward)
        found = cs.bound(x, lam, upward=upward, alpha=ALPHA, anchor=anchor)
        beyond = found >= anchor if upward else found <= anchor
        assert beyond == cs.rejects(x, lam, anchor, upward=upward, alpha=ALPHA)
