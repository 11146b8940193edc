"""Plain-text tables as kubectl prints them: upper-case headers, left-aligned columns, no
borders; its tabwriter's settings (padding 3, minimum width 6), so `awk` reads them alike."""

from __future__ import annotations

from collections.abc import Sequence

from assay.runner.results.table import text_width

PADDING = 3
MIN_WIDTH = 6
"""A column's width with its padding, at least (kubectl's tabwriter minwidth)."""


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(MIN_WIDTH, PADDING + max([text_width(h), *(text_width(row[i]) for row in rows)]))
        for i, h in enumerate(headers)
    ]
    lines = []
    for cells in [list(headers), *rows]:
        padded = [cell + " " * (width - text_width(cell)) for cell, width in zip(cells[:-1], widths, strict=False)]
        lines.append(("".join(padded) + cells[-1]).rstrip())
    return "\n".join(lines) + "\n"
