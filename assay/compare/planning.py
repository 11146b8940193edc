"""`assay compare --plan BASELINE`: how small a change a comparison against this run can see.

From the baseline's per-document variance σ² and an assumed correlation ρ between the
baseline's and a candidate's scores on the same document (the candidate's variance taken
to be the baseline's), the paired variance is Var(d) = 2σ²(1 − ρ). Then, at level α and
80% power, a same-size candidate run detects MDE = (z_{1−α/2} + z_{0.8})·sqrt(Var(d)/n),
and detecting δ needs n = (z_{1−α/2} + z_{0.8})²·Var(d)/δ² documents. Only metrics averaged
over documents are planned; corpus-level ones (perplexity, BLEU) have no per-document
variance to start from.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np

from assay.compare import corpus, outputs, pairing, statistics
from assay.compare.distributions import normal_quantile
from assay.errors import UsageError


@dataclasses.dataclass(frozen=True)
class PlanRow:
    task: str
    metric: str
    filter: str
    n: int
    value: float
    sd: float
    mde: float
    """At this run's size."""
    needed: int | None
    """Documents for the target MDE (None without one)."""


def plan(run: outputs.RunOutput, *, alpha: float, correlation: float, target: float | None) -> list[PlanRow]:
    rows = []
    for task, path in run.samples_paths.items():
        samples = outputs.read_samples(path, label="baseline")
        config = run.results.config_of(task)
        paired = pairing.pair_task(task, samples, samples, configs=(config, config), higher_is_better={})
        for metric in paired.metrics:
            if metric.aggregation == corpus.MEAN and all(isinstance(v, (int, float)) for v in metric.baseline):
                rows.append(_row(metric, alpha=alpha, correlation=correlation, target=target))
    if not rows:
        raise UsageError(
            f"Nothing to plan from: {run.label} has no samples of a per-document metric (run with --log_samples)."
        )
    return rows


def _row(metric: pairing.MetricPairs, *, alpha: float, correlation: float, target: float | None) -> PlanRow:
    values = np.asarray(metric.baseline, dtype=float)
    n = len(values)
    sd = float(values.std(ddof=1)) if n > 1 else math.nan
    variance_d = 2 * sd * sd * (1 - correlation)
    z = normal_quantile(1 - alpha / 2) + normal_quantile(statistics.POWER)
    needed = math.ceil(z * z * variance_d / (target * target)) if target and not math.isnan(variance_d) else None
    return PlanRow(
        metric.task, metric.metric, metric.filter, n, float(values.mean()), sd, z * math.sqrt(variance_d / n), needed
    )


def render_plan(
    rows: list[PlanRow], *, label: str, alpha: float, correlation: float, target: float | None, fmt: str
) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "baseline": label,
                "alpha": alpha,
                "power": statistics.POWER,
                "correlation": correlation,
                "target_mde": target,
                "plans": [_json(row) for row in rows],
            },
            indent=2,
        )
    headers = ["Tasks", "Filter", "Metric", "n", "Value", "SD", "MDE at n"] + (
        [f"n for MDE {target:g}"] if target else []
    )
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        cells = [row.task, row.filter, row.metric, str(row.n), f"{row.value:.4f}", _fmt(row.sd), _fmt(row.mde)]
        lines.append(
            "| " + " | ".join(cells + ([str(row.needed) if row.needed is not None else "N/A"] if target else [])) + " |"
        )
    return "\n".join(
        [
            f"baseline: {label}",
            "",
            *lines,
            "",
            f"Assumes a candidate with the baseline's per-document variance, correlated with it at ρ = {correlation:g} "
            f"(--correlation), compared at α = {alpha:g} with {statistics.POWER:.0%} power.",
        ]
    )


def _fmt(value: float) -> str:
    return "N/A" if math.isnan(value) else f"{value:.4f}"


def _json(row: PlanRow) -> dict[str, Any]:
    entry = dataclasses.asdict(row)
    return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in entry.items()}
