"""The sequential gate: after each chunk of documents, stop if the answer is already known.

Per metric, the paired per-document differences (candidate − baseline) arrive chunk by
chunk, documents in a random order. Each metric's confidence sequence for the mean
difference (confidence_sequences.py, a betting sequence valid at every look) is checked
after every chunk:

- `regressed` when some metric's interval lies entirely below −maxDrop;
- `non_inferior` when every metric's interval lies entirely above −maxDrop;
- `precise` (with `target_half_width`) when every interval is at most that half-width;
- `exhausted` when the caller says the documents ran out: the fixed-sample comparison decides.

The error rates, whatever the number of looks: a false `non_inferior` needs some metric
whose true difference is at most −maxDrop to have its lower bound above it, at most α for
that metric's one-sided sequence (every metric must pass: an intersection-union test, no
split needed); a false `regressed` needs any one of k metrics' upper bounds below its truth,
so each upper bound holds at α/k (Bonferroni). So `lower` is a one-sided 1−α bound, `upper`
a 1−α/k one. Without a baseline (no max_drop) the values are the candidate's own scores and
[lower, upper] is a two-sided 1−α sequence for each metric's mean, all k at once (α/2k a side).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from assay.compare import confidence_sequences as cs

Reason = Literal["continue", "non_inferior", "regressed", "precise", "exhausted"]
STATE_VERSION = 1
ZERO_ONE_METRICS = frozenset({"acc", "acc_norm", "acc_mutual_info", "acc_bytes", "exact_match"})
"""lm-eval's built-in metrics whose per-document value is 0 or 1 (averaged over documents)."""


@dataclasses.dataclass(frozen=True)
class MetricBounds:
    """The range of a metric's per-document value (0/1 accuracy: 0 and 1), and which way is better."""

    low: float
    high: float
    higher_is_better: bool = True


@dataclasses.dataclass(frozen=True)
class SequentialLook:
    """One metric at one look, in the metric's units, turned so that a positive difference is better."""

    metric: str
    n: int
    """Paired documents seen."""
    mean_difference: float
    """candidate − baseline, turned by the metric's direction; without a baseline, the mean score."""
    lower: float
    upper: float
    """The anytime-valid interval now: every value at or below `lower` (at or above `upper`) is ruled out."""


@dataclasses.dataclass(frozen=True)
class GateDecision:
    stop: bool
    reason: Reason
    looks: tuple[SequentialLook, ...]


def known_bounds(metric: str, higher_is_better: bool = True) -> MetricBounds | None:
    """The range of a built-in per-document metric that may stop a task early; None for any other
    (a corpus metric, or one whose range nobody stated: an unbounded value voids the guarantee)."""
    return MetricBounds(0.0, 1.0, higher_is_better) if metric in ZERO_ONE_METRICS else None


class SequentialGate:
    """Confidence sequences over a task's metrics, fed paired differences chunk by chunk."""

    def __init__(
        self,
        metrics: Mapping[str, MetricBounds],
        *,
        alpha: float = 0.05,
        max_drop: float | Mapping[str, float] | None = None,
        target_half_width: float | None = None,
    ) -> None:
        _check_arguments(metrics, alpha, max_drop, target_half_width)
        self.metrics = dict(metrics)
        self.alpha = float(alpha)
        self.max_drop: dict[str, float] | None = (
            None
            if max_drop is None
            else {name: float(max_drop[name] if isinstance(max_drop, Mapping) else max_drop) for name in metrics}
        )
        self.target_half_width = None if target_half_width is None else float(target_half_width)
        self._values: dict[str, list[float]] = {name: [] for name in metrics}

    @property
    def paired(self) -> bool:
        """Whether the values are differences from a baseline (a max_drop was given)."""
        return self.max_drop is not None

    def observe(self, differences: Mapping[str, Sequence[float]]) -> None:
        """Appends each metric's new per-document values, in document order, raw units.

        Every metric gets the same number of new values (the same documents); a value outside
        the metric's range (bounds.high − bounds.low either way for a difference) is refused,
        as it would void the guarantee."""
        if set(differences) != set(self.metrics):
            raise ValueError(f"observe() needs values for exactly the metrics {sorted(self.metrics)}")
        counts = {len(values) for values in differences.values()}
        if len(counts) > 1:
            raise ValueError("observe() needs the same number of documents for every metric")
        checked = {name: self._checked(name, values) for name, values in differences.items()}
        for name, values in checked.items():
            self._values[name].extend(values)

    def _checked(self, name: str, values: Sequence[float]) -> list[float]:
        bounds = self.metrics[name]
        width = bounds.high - bounds.low
        low, high = (-width, width) if self.paired else (bounds.low, bounds.high)
        out = [float(value) for value in values]
        for value in out:
            if not low <= value <= high:  # False for NaN too
                raise ValueError(
                    f"metric {name}: value {value!r} lies outside [{low}, {high}], the range declared for it"
                )
        return out

    @property
    def documents(self) -> int:
        return len(next(iter(self._values.values())))

    def looks(self) -> tuple[SequentialLook, ...]:
        return tuple(self._look(name) for name in self.metrics)

    def decide(self, *, exhausted: bool = False) -> GateDecision:
        """Whether to stop after the documents observed so far (at a chunk's end).

        `exhausted`: every document has been scored; the decision is then `exhausted`
        whatever the sequences say, and the fixed-sample comparison gives the verdict."""
        looks = self.looks()
        if exhausted:
            return GateDecision(True, "exhausted", looks)
        if self.documents == 0:
            return GateDecision(False, "continue", looks)
        if self.max_drop is not None:
            drops = self.max_drop
            if any(look.upper <= -drops[look.metric] for look in looks):
                return GateDecision(True, "regressed", looks)
            if all(look.lower >= -drops[look.metric] for look in looks):
                return GateDecision(True, "non_inferior", looks)
        target = self.target_half_width
        if target is not None and all((look.upper - look.lower) / 2 <= target for look in looks):
            return GateDecision(True, "precise", looks)
        return GateDecision(False, "continue", looks)

    def _look(self, name: str) -> SequentialLook:
        bounds = self.metrics[name]
        width = bounds.high - bounds.low
        raw = np.asarray(self._values[name], dtype=float)
        k = len(self.metrics)
        if self.max_drop is not None:
            oriented = raw if bounds.higher_is_better else -raw
            x = (oriented + width) / (2 * width)  # [−w, w] → [0, 1]
            boundary = (width - self.max_drop[name]) / (2 * width)
            lower_alpha, upper_alpha = self.alpha, self.alpha / k
            up_bets = cs.boundary_bets(x, boundary, upward=True)
            down_bets = cs.boundary_bets(x, boundary, upward=False)
            scale, offset = 2 * width, -width
        else:
            oriented = raw
            x = (raw - bounds.low) / width
            boundary = None
            lower_alpha = upper_alpha = self.alpha / (2 * k)
            half = (self.target_half_width or width / 20) / width  # no target: tuned to 5% of the range
            up_bets = down_bets = cs.width_bets(x, half)
            scale, offset = width, bounds.low
        lower = cs.bound(x, up_bets, upward=True, alpha=lower_alpha, anchor=boundary)
        upper = cs.bound(x, down_bets, upward=False, alpha=upper_alpha, anchor=boundary)
        return SequentialLook(
            metric=name,
            n=len(raw),
            mean_difference=float(oriented.mean()) if len(raw) else math.nan,
            lower=_from_unit(lower, scale, offset, self.max_drop[name] if self.max_drop else None),
            upper=_from_unit(upper, scale, offset, self.max_drop[name] if self.max_drop else None),
        )

    def state(self) -> dict[str, Any]:
        """Everything needed to carry on after a restart, JSON-safe (the values observed so far)."""
        return {
            "version": STATE_VERSION,
            "metrics": {
                name: {"low": b.low, "high": b.high, "higher_is_better": b.higher_is_better}
                for name, b in self.metrics.items()
            },
            "alpha": self.alpha,
            "max_drop": self.max_drop,
            "target_half_width": self.target_half_width,
            "values": {name: list(values) for name, values in self._values.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SequentialGate:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"sequential gate state of version {state.get('version')!r}, not {STATE_VERSION}")
        metrics = {
            name: MetricBounds(float(b["low"]), float(b["high"]), bool(b["higher_is_better"]))
            for name, b in state["metrics"].items()
        }
        gate = cls(
            metrics,
            alpha=state["alpha"],
            max_drop=state["max_drop"],
            target_half_width=state["target_half_width"],
        )
        gate.observe({name: state["values"][name] for name in metrics})
        return gate


def _from_unit(value: float, scale: float, offset: float, max_drop: float | None) -> float:
    """A unit-scale bound back in the metric's units; −maxDrop exactly when the bound is the boundary."""
    raw = value * scale + offset
    if max_drop is not None and math.isclose(raw, -max_drop, rel_tol=0.0, abs_tol=1e-12 * scale):
        return -max_drop
    return raw


def _check_arguments(
    metrics: Mapping[str, MetricBounds],
    alpha: float,
    max_drop: float | Mapping[str, float] | None,
    target_half_width: float | None,
) -> None:
    if not metrics:
        raise ValueError("a sequential gate needs at least one metric")
    for name, bounds in metrics.items():
        if not (math.isfinite(bounds.low) and math.isfinite(bounds.high) and bounds.low < bounds.high):
            raise ValueError(f"metric {name}: bounds [{bounds.low}, {bounds.high}] are not a finite range")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha!r} is not between 0 and 1")
    if max_drop is None and target_half_width is None:
        raise ValueError("a sequential gate needs max_drop (against a baseline) or target_half_width (without)")
    drops = dict(max_drop) if isinstance(max_drop, Mapping) else {name: max_drop for name in metrics}
    for name in metrics:
        drop = drops.get(name)
        if max_drop is not None and (drop is None or not 0.0 <= drop < metrics[name].high - metrics[name].low):
            raise ValueError(f"metric {name}: max_drop {drop!r} is not between 0 and the metric's range")
    if target_half_width is not None and not target_half_width > 0:
        raise ValueError(f"target_half_width {target_half_width!r} is not positive")
