"""The vectorised runs that bench/sequential_sim.py simulates stop where the gate itself stops."""

from __future__ import annotations

import numpy as np
import pytest

from assay.compare import sequential_runs
from assay.compare.sequential import MetricBounds, SequentialGate
from assay.runner.sequential import order as chunk_order

CODES = {"non_inferior": sequential_runs.NON_INFERIOR, "regressed": sequential_runs.REGRESSED}


@pytest.mark.parametrize(("width", "max_drop"), [(1.0, 0.02), (1.0, 0.0), (2.0, 0.1)])
def test_each_simulated_run_stops_at_the_gates_chunk_for_the_gates_reason(width: float, max_drop: float) -> None:
    rng = np.random.default_rng(21)
    documents, runs, chunk = 1500, 24, 100
    truths = np.linspace(-0.08, 0.04, runs) * width  # both sides of −maxDrop, and near it
    u = rng.random((documents, runs))
    differences = np.where(u < (0.2 - truths / width) / 2, -width, np.where(u < 0.2, width, 0.0))
    simulated = sequential_runs.stops(differences, width=width, max_drop=max_drop, alpha=0.05, chunk=chunk)
    assert len(set(simulated.reasons.tolist())) == 3  # the streams exercise every outcome
    for run in range(runs):
        gate = SequentialGate({"m": MetricBounds(0.0, width)}, max_drop=max_drop)
        for start in range(0, documents, chunk):
            gate.observe({"m": differences[start : start + chunk, run]})
            decision = gate.decide()
            if decision.stop:
                break
        assert simulated.documents[run] == gate.documents
        assert simulated.reasons[run] == CODES.get(decision.reason, sequential_runs.CONTINUE)


def test_the_runners_default_chunks() -> None:
    assert sequential_runs.chunk_size(1000) == 64 and sequential_runs.chunk_size(14042) == 703
    assert sequential_runs.look_ends(200, 64).tolist() == [64, 128, 192, 200]
    assert sequential_runs.look_ends(14042, None).tolist()[:9] == [64, 128, 256, 512, 703, 1024, 1406, 2109, 2812]


@pytest.mark.parametrize("documents", [1, 63, 64, 200, 1280, 1281, 5000, 14042])
def test_the_simulated_looks_are_the_runners_chunk_ends(documents: int) -> None:
    """bench/sequential_sim.py looks where a sequential run looks (`order.chunk_sizes`), by default and fixed."""
    assert sequential_runs.look_ends(documents, None).tolist() == np.cumsum(chunk_order.chunk_sizes(documents)).tolist()
    assert (
        sequential_runs.look_ends(documents, 100).tolist()
        == np.cumsum(chunk_order.chunk_sizes(documents, 100)).tolist()
    )
