"""A comparison as a forest plot: one row per task, metric and filter, its delta and interval.

Each row's gain interval (candidate − baseline, turned so that right is better, the way
the verdicts read it) is a bar with a dot at the delta, coloured by the row's verdict; a
dashed line marks 0 and a red one the tolerated drop (−max-drop, where it is not 0). Rows
of metrics on different scales (accuracy, perplexity) share one axis only within a row: each
row is drawn on its own scale, from its interval and its tolerance, with the numbers
printed beside it, so that a perplexity's interval does not squash an accuracy's.

SVG is written here without any library (`svg`); PNG needs matplotlib, which Assay does
not depend on (`png`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from assay.compare import verdicts
from assay.compare.comparison import Comparison, Row
from assay.errors import UsageError

COLOURS = {
    verdicts.REGRESSED: "#c0392b",
    verdicts.INCONCLUSIVE: "#e67e22",
    verdicts.UNCHANGED: "#7f8c8d",
    verdicts.EQUIVALENT: "#2980b9",
    verdicts.IMPROVED: "#27ae60",
}
LABEL_WIDTH, PLOT_WIDTH, NUMBERS_WIDTH = 300, 360, 360
ROW_HEIGHT, TOP, BOTTOM = 26, 56, 44
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif' font-size='12'"


@dataclasses.dataclass(frozen=True)
class ForestRow:
    """One row as drawn: its gain (positive better) and gain interval, in the metric's units."""

    label: str
    gain: float
    low: float
    high: float
    tolerance: float
    verdict: str
    text: str

    @staticmethod
    def of(row: Row) -> ForestRow:
        sign = 1.0 if row.higher_is_better else -1.0
        result = row.result
        low, high = sorted((sign * result.ci_low, sign * result.ci_high))
        arrow = "↑" if row.higher_is_better else "↓"
        text = (
            f"{_fmt(result.delta, signed=True)} [{_fmt(result.ci_low)}, {_fmt(result.ci_high)}]  p={_fmt(row.p_holm)}"
        )
        return ForestRow(
            f"{row.task} {row.metric} {arrow} ({row.filter})",
            sign * result.delta,
            low,
            high,
            row.max_drop,
            row.verdict,
            text,
        )


def write(comparison: Comparison, path: Path) -> None:
    """The plot to `path`: SVG for .svg, PNG for .png (with matplotlib); UsageError otherwise."""
    suffix = path.suffix.lower()
    if suffix == ".svg":
        path.write_text(svg(comparison), encoding="utf-8")
    elif suffix == ".png":
        png(comparison, path)
    else:
        raise UsageError(f"--plot {path}: name a .svg or .png file.")


def svg(comparison: Comparison) -> str:
    rows = [ForestRow.of(row) for row in comparison.rows]
    width = LABEL_WIDTH + PLOT_WIDTH + NUMBERS_WIDTH
    height = TOP + ROW_HEIGHT * len(rows) + BOTTOM
    x0 = LABEL_WIDTH
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT}>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        _text(
            10,
            20,
            f"Candidate − baseline, {100 * (1 - comparison.settings.alpha):g}% intervals; "
            f"right is better. Verdict: {comparison.verdict}",
            weight="bold",
        ),
        _text(10, 38, "Each row on its own scale: grey dashes at 0, red at the tolerated drop."),
    ]
    for index, row in enumerate(rows):
        y = TOP + ROW_HEIGHT * index + ROW_HEIGHT / 2
        if index % 2 == 0:
            parts.append(
                f"<rect x='0' y='{y - ROW_HEIGHT / 2:.1f}' width='{width}' height='{ROW_HEIGHT}' fill='#f4f6f7'/>"
            )
        parts.append(_text(10, y + 4, row.label))
        parts.extend(_row_marks(row, x0, y))
        parts.append(_text(x0 + PLOT_WIDTH + 10, y + 4, f"{row.text}  {row.verdict}", colour=COLOURS.get(row.verdict)))
    legend_y = TOP + ROW_HEIGHT * len(rows) + 26
    x = 10
    for name, colour in COLOURS.items():
        parts.append(f"<circle cx='{x + 5}' cy='{legend_y - 4}' r='5' fill='{colour}'/>")
        parts.append(_text(x + 14, legend_y, name))
        x += 24 + 8 * len(name)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _row_marks(row: ForestRow, x0: float, y: float) -> list[str]:
    if not all(math.isfinite(v) for v in (row.gain, row.low, row.high)):
        return [_text(x0 + PLOT_WIDTH / 2 - 30, y + 4, "not finite", colour=COLOURS[verdicts.INCONCLUSIVE])]
    left, right = _scale(row)

    def at(value: float) -> float:
        return x0 + 10 + (value - left) / (right - left) * (PLOT_WIDTH - 20)

    colour = COLOURS.get(row.verdict, "#000000")
    marks = [_line(at(0.0), y - 10, at(0.0), y + 10, "#95a5a6", dashed=True)]
    if row.tolerance > 0:
        marks.append(_line(at(-row.tolerance), y - 10, at(-row.tolerance), y + 10, "#c0392b", dashed=True))
    marks.append(_line(at(row.low), y, at(row.high), y, colour, width=3))
    for end in (row.low, row.high):
        marks.append(_line(at(end), y - 5, at(end), y + 5, colour, width=2))
    marks.append(f"<circle cx='{at(row.gain):.1f}' cy='{y:.1f}' r='4.5' fill='{colour}'/>")
    return marks


def _scale(row: ForestRow) -> tuple[float, float]:
    """The row's axis: its interval, 0 and its tolerance, with a margin; symmetric about 0."""
    reach = max(abs(row.low), abs(row.high), row.tolerance, abs(row.gain)) * 1.15
    reach = reach if reach > 0 else 1.0
    return -reach, reach


def _line(x1: float, y1: float, x2: float, y2: float, colour: str, *, width: float = 1, dashed: bool = False) -> str:
    dash = " stroke-dasharray='4 3'" if dashed else ""
    return (
        f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{colour}' "
        f"stroke-width='{width}'{dash}/>"
    )


def _text(x: float, y: float, content: str, *, colour: str | None = None, weight: str | None = None) -> str:
    fill = f" fill='{colour}'" if colour else ""
    bold = f" font-weight='{weight}'" if weight else ""
    return f"<text x='{x:.1f}' y='{y:.1f}'{fill}{bold}>{escape(content)}</text>"


def _fmt(value: float, *, signed: bool = False) -> str:
    if not math.isfinite(value):
        return "N/A"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def png(comparison: Comparison, path: Path) -> None:
    """The same plot through matplotlib (not an Assay dependency: SVG needs nothing)."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        pyplot: Any = importlib.import_module("matplotlib.pyplot")
    except ModuleNotFoundError:
        raise UsageError(
            f"--plot {path}: a PNG needs matplotlib (pip install matplotlib); name a .svg file instead, "
            "which needs nothing."
        ) from None
    rows = [ForestRow.of(row) for row in comparison.rows]
    figure, axes = pyplot.subplots(len(rows), 1, figsize=(9, 0.45 * len(rows) + 1), squeeze=False)
    for row, (ax,) in zip(rows, axes, strict=False):
        ax.set_yticks([])
        ax.set_ylabel(row.label, rotation=0, ha="right", va="center", fontsize=8)
        if all(math.isfinite(v) for v in (row.gain, row.low, row.high)):
            colour = COLOURS.get(row.verdict, "black")
            ax.errorbar([row.gain], [0], xerr=[[row.gain - row.low], [row.high - row.gain]], fmt="o", color=colour)
            ax.axvline(0, color="#95a5a6", linestyle="--")
            if row.tolerance > 0:
                ax.axvline(-row.tolerance, color="#c0392b", linestyle="--")
            ax.set_xlim(*_scale(row))
        ax.set_title(f"{row.text}  {row.verdict}", fontsize=7, loc="right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
