"""Many simulated runs of a one-metric sequential gate at once: where each would stop, and why.

The same decisions as `SequentialGate.decide` (tests/compare/test_sequential_runs.py holds
them equal), vectorised over runs, for bench/sequential_sim.py and the coverage tests: a
stream of paired differences stops at the first chunk's end where the sequence rules out
−maxDrop from above (`regressed`, checked first, as the gate does) or from below
(`non_inferior`); by monotonicity of the capital in m (confidence_sequences.py) that is
exactly where the gate's interval first lies entirely below or above −maxDrop.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from assay.compare import confidence_sequences as cs

CONTINUE, NON_INFERIOR, REGRESSED = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Stops:
    """Per run: the documents scored when it stopped (all of them if it never did) and the reason code."""

    documents: np.ndarray
    reasons: np.ndarray
    """NON_INFERIOR, REGRESSED, or CONTINUE for a run that used every document (`exhausted`)."""


def chunk_size(documents: int) -> int:
    """The runner's largest default chunk: the larger of 64 and a twentieth of the task."""
    return max(64, math.ceil(documents / 20))


def look_ends(documents: int, chunk: int | None) -> np.ndarray:
    """The number of documents seen at each look: every chunk's end, the last one short. `chunk`
    None: the runner's default looks (`assay.runner.sequential.order.chunk_sizes`): every
    `chunk_size(documents)` documents, and after 64, 128, 256, ... (doubling) where that is at
    least 64 documents from those."""
    if chunk is not None:
        return np.minimum(np.arange(chunk, documents + chunk, chunk), documents)
    grid = chunk_size(documents)
    ends = set(range(grid, documents, grid))
    doubling = 64
    while doubling < documents:
        if min(doubling % grid, grid - doubling % grid, documents - doubling) >= 64:
            ends.add(doubling)
        doubling *= 2
    return np.asarray(sorted(ends | {documents}) if documents > 0 else [], dtype=int)


def stops(differences: np.ndarray, *, width: float, max_drop: float, alpha: float, chunk: int | None) -> Stops:
    """Where runs stop: `differences` of shape (documents, runs), each a raw candidate − baseline in
    [−width, width] turned so that positive is better; one metric, so both sides hold at α. `chunk`:
    documents per look, None for the runner's default schedule."""
    x = (differences + width) / (2 * width)
    boundary = (width - max_drop) / (2 * width)
    threshold = math.log(1.0 / alpha)
    ends = look_ends(x.shape[0], chunk) - 1
    rises = cs.running_peak_log_capital(x, cs.boundary_bets(x, boundary, upward=True), boundary, upward=True)
    falls = cs.running_peak_log_capital(x, cs.boundary_bets(x, boundary, upward=False), boundary, upward=False)
    regressed = falls[ends] >= threshold
    passed = rises[ends] >= threshold
    stopped = regressed | passed
    first = np.where(stopped.any(axis=0), stopped.argmax(axis=0), len(ends) - 1)
    runs = np.arange(x.shape[1])
    reasons = np.where(regressed[first, runs], REGRESSED, np.where(passed[first, runs], NON_INFERIOR, CONTINUE))
    return Stops(documents=ends[first] + 1, reasons=reasons)
