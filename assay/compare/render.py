"""A Comparison as text: an lm-eval-style table (default), JSON, or GitHub Markdown.

The table looks like `lm_eval`'s results table (pipes, `%.4f`, ↑/↓) with the comparison's
columns; its p is the Holm-adjusted p that decides the row's verdict. Undefined numbers (one
document, no spread) and numbers that are not finite (an infinite perplexity) print as N/A,
and as null in JSON, which is always strict JSON (the notes say which rows were not finite).
"""

from __future__ import annotations

import json
import math
from typing import Any

from assay.compare.comparison import Comparison, Row

HEADERS = [
    "Tasks",
    "Filter",
    "Metric",
    "",
    "Baseline",
    "Candidate",
    "Delta",
    "CI",
    "p",
    "Test",
    "Flips",
    "MDE",
    "Verdict",
]
_NUMERIC = {"Baseline", "Candidate", "Delta", "p", "MDE"}


def render(comparison: Comparison, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(_finite(as_json(comparison)), indent=2, ensure_ascii=False, allow_nan=False)
    table = _table(comparison, markdown=fmt == "markdown")
    lines = [] if fmt == "table" else ["## assay compare", ""]
    lines += [f"baseline: {comparison.baseline}", f"candidate: {comparison.candidate}", "", table, ""]
    lines += [("- " if fmt == "markdown" else "") + sentence for sentence in _summary(comparison)]
    return "\n".join(lines)


def _summary(comparison: Comparison) -> list[str]:
    settings = comparison.settings
    level = f"{100 * (1 - settings.alpha):g}%"
    normal = (
        "; normal for clustered and stratified z"
        if any(row.result.interval == "normal" for row in comparison.rows)
        else ""
    )
    sentences = [
        _paired_sentence(comparison),
        f"CI: {level} interval of candidate − baseline (t with n−1 df{normal}; bootstrap percentile, {_iterations(comparison)}, "
        f"seed {settings.seed}). p: Holm-adjusted over the {len(comparison.rows)} rows. "
        f"MDE: smallest difference detectable at α = {settings.alpha:g} with 80% power.",
        *comparison.notes,
        *(f"Doubt: {doubt}" for doubt in comparison.doubts),
        f"Verdict: {comparison.verdict} (Holm-adjusted over {len(comparison.rows)} metrics).",
    ]
    return sentences


def _iterations(comparison: Comparison) -> str:
    requested = comparison.settings.iterations
    if comparison.iterations <= requested:
        return f"{requested} iterations"
    return (
        f"{requested} iterations, {comparison.iterations} for a row whose p was below α at {requested} "
        f"(Holm over {len(comparison.rows)} rows needs the finer p)"
    )


def _paired_sentence(comparison: Comparison) -> str:
    tasks = comparison.tasks
    if len(tasks) <= 6:
        return "Paired on doc_hash: " + ", ".join(f"{t.task} {t.paired} documents" for t in tasks) + "."
    return f"Paired on doc_hash: {sum(t.paired for t in tasks)} documents over {len(tasks)} tasks."


def _table(comparison: Comparison, *, markdown: bool) -> str:
    rows, previous = [], None
    for row in comparison.rows:
        cells = _cells(row)
        if not markdown and row.task == previous:
            cells[0] = ""  # lm-eval names each task once
        previous = row.task
        rows.append(cells)
    if markdown:
        lines = [
            "| " + " | ".join(HEADERS) + " |",
            "|" + "|".join("---:" if h in _NUMERIC else "---" for h in HEADERS) + "|",
        ]
        return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]
    header = "|" + "|".join(h.center(w) for h, w in zip(HEADERS, widths, strict=False)) + "|"
    rule = (
        "|"
        + "|".join("-" * (w - 1) + (":" if h in _NUMERIC else "-") for h, w in zip(HEADERS, widths, strict=False))
        + "|"
    )
    body = [
        "|"
        + "|".join(c.rjust(w) if h in _NUMERIC else c.ljust(w) for c, h, w in zip(r, HEADERS, widths, strict=False))
        + "|"
        for r in rows
    ]
    return "\n".join([header, rule, *body])


def _cells(row: Row) -> list[str]:
    result = row.result
    flips = f"+{result.gained}/-{result.lost}" if result.gained is not None else ""
    interval = f"[{_number(result.ci_low)}, {_number(result.ci_high)}]" if math.isfinite(result.ci_low) else "N/A"
    return [
        row.task,
        row.filter,
        row.metric,
        "↑" if row.higher_is_better else "↓",
        _number(result.baseline),
        _number(result.candidate),
        _number(result.delta, signed=True),
        interval,
        _p(row.p_holm),
        result.test,
        flips,
        _number(result.mde),
        row.verdict,
    ]


def _number(value: float, *, signed: bool = False) -> str:
    if not math.isfinite(value):
        return "N/A"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "N/A"
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def as_json(comparison: Comparison) -> dict[str, Any]:
    settings = comparison.settings
    return {
        "baseline": comparison.baseline,
        "candidate": comparison.candidate,
        "alpha": settings.alpha,
        "ci_level": 1 - settings.alpha,
        "bootstrap": {"iterations": comparison.iterations, "requested": settings.iterations, "seed": settings.seed},
        "equivalence_margin": settings.margin,
        "verdict": comparison.verdict,
        "comparisons": [_row_json(row, margin=settings.margin is not None) for row in comparison.rows],
        "tasks": [
            {
                "task": t.task,
                "paired": t.paired,
                "only_baseline": t.only_baseline,
                "only_candidate": t.only_candidate,
                "doc_id_mismatches": t.doc_id_mismatches,
                "prompt_differences": t.prompt_differences,
            }
            for t in comparison.tasks
        ],
        "notes": list(comparison.notes),
        "doubts": list(comparison.doubts),
    }


def _row_json(row: Row, *, margin: bool) -> dict[str, Any]:
    result = row.result
    entry: dict[str, Any] = {
        "task": row.task,
        "metric": row.metric,
        "filter": row.filter,
        "higher_is_better": row.higher_is_better,
        "n": result.n,
        "baseline": result.baseline,
        "candidate": result.candidate,
        "delta": result.delta,
        "se": result.se,
        "ci_low": result.ci_low,
        "ci_high": result.ci_high,
        "interval": result.interval,
        "p_value": result.p_value,
        "p_holm": row.p_holm,
        "test": result.test,
        "flips": {"gained": result.gained, "lost": result.lost} if result.gained is not None else None,
        "iterations": result.iterations,
        "mde": result.mde,
        "max_drop": row.max_drop,
        "verdict": row.verdict,
        "group": {"subtasks": list(row.group.subtasks), "weight_by_size": row.group.weight_by_size}
        if row.group
        else None,
    }
    if margin:
        entry.update(tost_low=result.tost_low, tost_high=result.tost_high)
    return entry


def _finite(value: Any) -> Any:
    """NaN and ±inf as null, anywhere: JSON has no such numbers (Python would write `Infinity`)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
