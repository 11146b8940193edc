"""Which metrics a task computes, how each is aggregated, and which way is better.

Decided once, when the task is built, from its `metric_list` (or the output type's
defaults), and never changed while scoring. lm-eval lets a generation metric return
several keys and, on first sight of an unknown key, writes the first metric's
aggregation into the task's table for it; `aggregation_for` gives that same answer as a
lookup, so every rank (and rank 0 aggregating for all) sees the same plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from assay.errors import UserError
from assay.runner.scoring.aggregations import AGGREGATIONS
from assay.runner.scoring.metrics import DEFAULT_METRICS, METRICS, MetricSpec

MetricFn = Callable[..., Any]
AggregationFn = Callable[[list[Any]], Any]


@dataclasses.dataclass(frozen=True)
class MetricPlan:
    fns: Mapping[str, tuple[MetricFn | None, Mapping[str, Any]]]
    """metric name → (per-sample function, its keyword arguments); None under custom process_results."""
    aggregations: Mapping[str, AggregationFn]
    higher_is_better: Mapping[str, bool]
    lends_to_extra_keys: bool = False
    """Generation scoring: a score key not in `fns` takes the first metric's aggregation."""

    @classmethod
    def for_metric_list(
        cls, entries: Sequence[Mapping[str, Any]] | None, *, output_type: str, custom_process_results: bool, task: str
    ) -> MetricPlan:
        if entries is None:
            entries = [{"metric": m} for m in DEFAULT_METRICS[output_type]]  # type: ignore[index]
        fns: dict[str, tuple[MetricFn | None, Mapping[str, Any]]] = {}
        aggregations: dict[str, AggregationFn] = {}
        higher: dict[str, bool] = {}
        for entry in entries:
            if "metric" not in entry:
                raise UserError(f"Task {task!r}: every metric_list entry needs a 'metric' key.")
            name, fn, spec = _metric(entry["metric"], custom_process_results=custom_process_results)
            kwargs = {
                k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")
            }
            fns[name] = (None, {}) if custom_process_results else (fn, kwargs)
            aggregations[name] = _aggregation(entry.get("aggregation"), spec)
            higher[name] = (
                entry["higher_is_better"] if "higher_is_better" in entry else (spec.higher_is_better if spec else True)
            )
        # lm-eval lends aggregations only where its built-in generation scoring runs.
        lends = output_type == "generate_until" and not custom_process_results and bool(fns)
        return cls(fns, aggregations, higher, lends)

    @classmethod
    def bypass(cls) -> MetricPlan:
        """lm-eval's --predict_only: every metric replaced by `bypass`."""
        spec = METRICS.get("bypass")
        return cls(
            {"bypass": (spec.fn, {})}, {"bypass": AGGREGATIONS.get(spec.aggregation)}, {"bypass": spec.higher_is_better}
        )

    def _lender(self, key: str) -> str | None:
        if key in self.aggregations or not self.lends_to_extra_keys:
            return None
        return next(iter(self.fns))

    def aggregation_for(self, key: str) -> AggregationFn:
        """The aggregation of score `key`: its own, the lent one, else lm-eval's fallback mean."""
        lender = self._lender(key)
        found = self.aggregations.get(lender if lender is not None else key)
        return found if found is not None else AGGREGATIONS.get("mean")

    def higher_is_better_for(self, keys: Iterable[str]) -> dict[str, bool]:
        """The results' `higher_is_better` for a task that produced score `keys` (in order)."""
        table = dict(self.higher_is_better)
        for key in keys:
            lender = self._lender(key)
            if lender is not None and key not in table:
                table[key] = self.higher_is_better[lender]
        return table


def _metric(metric: Any, *, custom_process_results: bool) -> tuple[str, MetricFn | None, MetricSpec | None]:
    if callable(metric):
        return metric.__name__, metric, None
    spec = METRICS.get(metric) if metric in METRICS or not custom_process_results else None
    return metric, (spec.fn if spec is not None else None), spec


def _aggregation(aggregation: Any, spec: MetricSpec | None) -> AggregationFn:
    if callable(aggregation):
        return aggregation  # type: ignore[no-any-return]
    if isinstance(aggregation, str):
        return AGGREGATIONS.get(aggregation)
    return AGGREGATIONS.get(spec.aggregation if spec is not None else "mean")
