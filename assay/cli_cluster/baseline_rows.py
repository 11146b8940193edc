"""`status.comparison` as text: the verdict against the baseline and its rows, worst first.

The runner keeps the rows `assay compare` computed (`versus_baseline.as_status`: at most 50,
numbers without their Comparison objects), so this lays them out in `assay compare`'s style
(pipes, `%.4f`, signed deltas, N/A for an undefined number) from the status fields alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay import echoed_text
from assay.spec import status as schema

HEADERS = ["Tasks", "Filter", "Metric", "n", "Baseline", "Candidate", "Delta", "CI", "p (Holm)", "Test", "Verdict"]
_NUMERIC = {"n", "Baseline", "Candidate", "Delta", "p (Holm)"}
TEXT_CHARS = 1024


def render(comparison: Mapping[str, Any], *, markdown: bool) -> str:
    """The verdict, its sentence, the rows, and what was left out; or why nothing was compared."""
    baseline = echoed_text.bounded(str(comparison.get("baseline") or "the baseline"), 256)
    if comparison.get("error"):
        return f"No comparison with the baseline {baseline}: {_text(comparison['error'])}\n"
    heading = f"Against the baseline {baseline}: {_text(comparison.get('verdict') or 'no verdict')}"
    lines = [f"#### {heading}" if markdown else heading]
    if comparison.get("message"):
        lines += ["", _text(comparison["message"])] if markdown else [_text(comparison["message"])]
    rows = [_cells(row) for row in comparison.get("rows") or () if isinstance(row, Mapping)]
    if rows:
        lines += ["", _markdown(rows) if markdown else _table(rows)]
    omitted = int(comparison.get("rowsOmitted") or 0)
    notes = list(comparison.get("notes") or ())
    if rows and (omitted or notes):
        lines.append("")  # a line after a Markdown table would be read as one more row
    if omitted:
        lines.append(
            f"({omitted} more compared metric{'s' if omitted != 1 else ''} left out of status; the runner's log "
            "and its output volume have them all.)"
        )
    for note in notes:
        lines.append(("- " if markdown else "") + _text(note))
    return "\n".join(lines) + "\n"


def _text(value: Any) -> str:
    return echoed_text.bounded(str(value), TEXT_CHARS)


def _cells(row: Mapping[str, Any]) -> list[str]:
    low, high = row.get("ciLow"), row.get("ciHigh")
    interval = (
        f"[{_number(low, signed=True)}, {_number(high, signed=True)}]"
        if low is not None and high is not None
        else "N/A"
    )
    texts = [row.get("task"), row.get("filter"), row.get("metric")]
    return [
        *(_text(t or "") for t in texts),
        str(row.get("n") if row.get("n") is not None else ""),
        _number(row.get("baseline")),
        _number(row.get("candidate")),
        _number(row.get("delta"), signed=True),
        interval,
        _p(row.get("pValue")),
        _text(row.get("test") or ""),
        _text(row.get("verdict") or ""),
    ]


def _number(value: Any, *, signed: bool = False) -> str:
    number = schema.finite_number(value)
    if number is None:
        return "N/A"
    return f"{number:+.4f}" if signed else f"{number:.4f}"


def _p(value: Any) -> str:
    number = schema.finite_number(value)
    if number is None:
        return "N/A"
    return f"{number:.4f}" if number >= 1e-4 else f"{number:.1e}"


def _table(rows: list[list[str]]) -> str:
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


def _markdown(rows: list[list[str]]) -> str:
    escaped = [[cell.replace("|", "\\|") for cell in row] for row in rows]
    lines = [
        "| " + " | ".join(HEADERS) + " |",
        "|" + "|".join("---:" if h in _NUMERIC else "---" for h in HEADERS) + "|",
    ]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in escaped])
