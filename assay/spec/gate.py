"""`spec.baseline` and `spec.gate`: which run an Evaluation is compared with, and what counts as worse.

    baseline:
      evaluation: model-v1        # another Evaluation in this namespace (its last successful run)
      # or path: runs/v1/g1       # a results folder (or results JSON) on this Evaluation's output volume
    gate:
      maxDrop: 0.0                # tolerated drop in each metric's own units
      maxDropFor: {"mmlu*:acc": 0.02}
      alpha: 0.05
      equivalenceMargin: 0.01     # call a metric equivalent when its 1−2α interval is inside ±margin (TOST)
      strict: false               # true: an inconclusive comparison fails the gate as a regression would
      iterations: 1000            # bootstrap iterations for corpus metrics (at least; more for many metrics)
      sequential: false           # true: score in chunks, stop each task once it is known non-inferior or regressed
    stopAt:
      ciHalfWidth: 0.02           # without a baseline: stop each task once its anytime-valid interval is this narrow

Parsed by `gate_parsing`. The runner compares on rank 0 after scoring (`assay.runner.baseline_comparison`), with the
statistics of `assay compare`; the gate's fields are that command's flags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

DEFAULT_ALPHA = 0.05
DEFAULT_ITERATIONS = 1000
MAX_ITERATIONS = 1_000_000
"""Each bootstrap iteration recomputes a corpus metric on each side: bounded, as it is this run's CPU."""
MAX_DROP_FOR_ENTRIES = 256
TARGET_MAX = 512
"""A `maxDropFor` key: TASK or TASK:METRIC, TASK a glob."""
PATH_MAX = 1024


@dataclasses.dataclass(frozen=True)
class Baseline:
    evaluation: str | None = None
    """An Evaluation in the same namespace; the runner reads its status for where its results are."""
    path: str | None = None
    """A results folder or JSON inside this Evaluation's output volume."""

    @property
    def label(self) -> str:
        """How status and metrics name the baseline."""
        return self.evaluation if self.evaluation is not None else f"path:{self.path}"


@dataclasses.dataclass(frozen=True)
class Gate:
    max_drop: float = 0.0
    max_drop_for: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """TASK or TASK:METRIC (TASK a glob) → the drop tolerated there."""
    alpha: float = DEFAULT_ALPHA
    equivalence_margin: float | None = None
    strict: bool = False
    iterations: int = DEFAULT_ITERATIONS
    """Bootstrap iterations (`assay compare --iterations`); a comparison of many metrics uses more."""
    sequential: bool = False
    """Documents in a seeded random order, in chunks; a task stops once its anytime-valid interval
    against the baseline lies above or below −maxDrop (docs/compare.md)."""

    def max_drop_flags(self) -> list[str]:
        """The tolerances as `assay compare --max-drop` values, the general one first."""
        return [str(self.max_drop), *(f"{target}={value}" for target, value in self.max_drop_for.items())]


def gate_to_dict(gate: Gate) -> dict[str, object]:
    out: dict[str, object] = {"maxDrop": gate.max_drop, "alpha": gate.alpha, "strict": gate.strict}
    if gate.max_drop_for:
        out["maxDropFor"] = dict(gate.max_drop_for)
    if gate.equivalence_margin is not None:
        out["equivalenceMargin"] = gate.equivalence_margin
    if gate.iterations != DEFAULT_ITERATIONS:
        out["iterations"] = gate.iterations
    if gate.sequential:
        out["sequential"] = True
    return out


@dataclasses.dataclass(frozen=True)
class StopAt:
    """`spec.stopAt`: stop each task at a precision, baseline or not (a sequential run)."""

    ci_half_width: float
    """The anytime-valid interval's half-width at which a task has been scored enough."""


def stop_at_to_dict(stop_at: StopAt) -> dict[str, object]:
    return {"ciHalfWidth": stop_at.ci_half_width}


def baseline_to_dict(baseline: Baseline) -> dict[str, object]:
    return {"evaluation": baseline.evaluation} if baseline.evaluation is not None else {"path": baseline.path}
