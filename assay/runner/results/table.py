"""The results table printed after a run, as lm-eval prints it.

lm-eval builds its table with `pytablewriter.MarkdownTableWriter`, which types every
cell (integer, real, string, ...) and derives each column's alignment and number format
from those types: a column of "%.4f" strings is printed with as many decimals as its
most precise value needs once trailing zeros are dropped ("0.5000" and "0.2500" print as
"0.50" and "0.25"). Assay reproduces that rendering (pytablewriter >= 1.0, what
`pip install lm-eval` resolves to) without depending on pytablewriter. Only the cell
kinds lm-eval's table can contain are modelled: strings, ints, floats, bools, None,
lists and dicts.
"""

from __future__ import annotations

import decimal
import enum
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from assay.run_results import ABSENT, RunResults
from assay.runner.results import stopped_early

HIGHER_IS_BETTER_SYMBOLS: dict[bool | None, str] = {True: "↑", False: "↓"}
UNTRUSTED_MARK = "⚠"
"""After the name of a task whose sentinels failed, and before each footnote saying why."""
_MIN_COLUMN_WIDTH = 3


def make_table(run: RunResults, column: str = "results", sort_results: bool = False) -> str:
    """Render the run's "results" or "groups" as lm-eval's Markdown table."""
    headers = [
        "Groups" if column == "groups" else "Tasks",
        "Version",
        "Filter",
        "n-shot",
        "Metric",
        "",
        "Value",
        "",
        "Stderr",
    ]
    table = render_markdown(headers, table_rows(run, column, sort_results=sort_results))
    shown = {task.name for task, _ in run.rows(column)}
    notes = [f"{UNTRUSTED_MARK} {task}: {reason}." for task, reason in run.untrusted() if task in shown]
    if column == "results":  # the run's own findings (a served model's requests) once, under the tasks
        notes += [f"{UNTRUSTED_MARK} {task}: {reason}." for task, reason in run.untrusted() if task.startswith("(")]
    stops = stopped_early.footnote(run, shown) if column == "results" else []
    if stops:
        table += "\n" + "\n".join(stops)
    if not notes:
        return table
    return (
        table
        + "\n"
        + "\n".join([f"{UNTRUSTED_MARK} scores not trusted (their sentinels failed, see docs/sentinels.md):", *notes])
    )


def table_rows(run: RunResults, column: str = "results", *, sort_results: bool = False) -> list[list[Any]]:
    """The table's cells, row by row, before rendering (lm-eval's value matrix)."""
    listed = {task.name: (task, result) for task, result in run.rows(column)}
    untrusted = {task for task, _ in run.untrusted()}
    depths, ordered = _hierarchy(run.group_subtasks, set(listed))
    rows: list[list[Any]] = []
    for key in sorted(listed) if sort_results else ordered:
        task, result = listed[key]
        version: Any = "    N/A" if task.version is ABSENT else task.version
        shots = " " if task.n_shot is ABSENT else str(task.n_shot)
        higher: Mapping[str, Any] = task.higher_is_better or {}
        name = result.alias + (f" {UNTRUSTED_MARK}" if key in untrusted else "")
        if depths.get(key, 0) > 0:
            name = " " * depths[key] + "- " + name
        # lm-eval sorts a row's `metric,filter` keys as strings.
        for score in sorted(result.values, key=lambda value: value.key):
            arrow = HIGHER_IS_BETTER_SYMBOLS.get(higher.get(score.metric), "")
            shown = f"{score.value:.4f}" if isinstance(score.value, float) else score.value
            cells = [name, version, score.filter, shots, score.metric, arrow, shown]
            if score.has_stderr:
                rows.append([*cells, "±", "   N/A" if score.stderr is None else f"{score.stderr:.4f}"])
            else:
                rows.append([*cells, "", ""])
            name, version = "", ""
    return rows


def _hierarchy(group_subtasks: Mapping[str, Sequence[str]], present: set[str]) -> tuple[dict[str, int], list[str]]:
    """Depth of each name under its groups, and the display order (groups first, children sorted)."""
    depths: dict[str, int] = {}
    ordered: list[str] = []

    def visit(name: str, depth: int) -> None:
        depths[name] = depth
        if name in present:
            ordered.append(name)
        for child in sorted(group_subtasks.get(name, [])):
            visit(child, depth + 1)

    children = {child for kids in group_subtasks.values() for child in kids}
    for name in sorted(group_subtasks):
        if name not in children:
            visit(name, 0)
    ordered.extend(key for key in sorted(present) if key not in depths)
    return depths, ordered


# --- a Markdown table writer with pytablewriter's typing rules --------------------------


class Kind(enum.IntFlag):
    NONE = 1
    INTEGER = 2
    INFINITY = 4
    NAN = 8
    REAL = 16
    BOOL = 32
    LIST = 64
    DICT = 128
    NULL_STRING = 256
    STRING = 512


_FLOATISH = Kind.REAL | Kind.INFINITY | Kind.NAN
_NUMBER = _FLOATISH | Kind.INTEGER
# Order in which a column's kind is picked from the kinds of its cells.
_COLUMN_KIND_ORDER = (
    Kind.STRING,
    Kind.REAL,
    Kind.INTEGER,
    Kind.DICT,
    Kind.LIST,
    Kind.BOOL,
    Kind.INFINITY,
    Kind.NAN,
    Kind.NULL_STRING,
)
_SCIENTIFIC_INT = re.compile(r"^-?\d+(?:\.\d*)?[eE][+\-]?\d{3,}$")
_HAS_E = re.compile("[eE]")
_SCIENTIFIC_REAL = re.compile(r"^-?\d+(?:\.\d*)?[eE][+\-]?\d{,2}$")


class _Cell:
    __slots__ = ("kind", "data", "decimals")

    def __init__(self, kind: Kind, data: Any) -> None:
        self.kind, self.data = kind, data
        self.decimals: int | None = None
        if kind is Kind.INTEGER:
            self.decimals = 0
        elif kind is Kind.REAL:
            self.decimals = _decimal_places(data)


def _column_cells(values: list[Any]) -> list[_Cell]:
    """Type a column's cells top to bottom as pytablewriter does.

    Once plain strings are the most common kind seen so far in a column, later strings
    stay strings even when they look like numbers ("2" under "    N/A" prints as text).
    """
    cells: list[_Cell] = []
    seen: dict[Kind, int] = {}
    for value in values:
        if value is None or (isinstance(value, str) and value == ""):
            cell = _Cell(Kind.NULL_STRING, "")
        else:
            if isinstance(value, str):
                value = _dequote(value.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
            common = max(seen, key=lambda kind: seen[kind]) if seen else None
            if common is Kind.STRING and isinstance(value, str) and value.strip():
                cell = _Cell(Kind.STRING, value)
            else:
                cell = _Cell(*_classify(value))
        seen[cell.kind] = seen.get(cell.kind, 0) + 1
        cells.append(cell)
    return cells


def _dequote(text: str) -> str:
    stripped = text.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
        return stripped[1:-1]
    return text


def _to_decimal(value: Any) -> decimal.Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, decimal.Decimal)):
        return decimal.Decimal(value)
    if isinstance(value, str):
        try:
            return decimal.Decimal(value.strip())
        except decimal.InvalidOperation:
            try:
                return decimal.Decimal(float(value))
            except ValueError:
                return None
    return None


def _is_real(value: Any) -> bool:
    """A non-integral finite number (pytablewriter's RealNumber at its default strictness)."""
    if isinstance(value, (bool, int)):
        return False
    if isinstance(value, str) and _HAS_E.search(value) and not _SCIENTIFIC_REAL.search(value):
        return False
    number = _to_decimal(value)
    return number is not None and number.is_finite() and number != number.to_integral_value()


def _classify(value: Any) -> tuple[Kind, Any]:
    if value is None:
        return Kind.NONE, None
    if isinstance(value, bool):
        return Kind.BOOL, value
    if isinstance(value, int):
        return Kind.INTEGER, value
    if isinstance(value, float):
        if math.isinf(value):
            return Kind.INFINITY, decimal.Decimal(value)
        if math.isnan(value):
            return Kind.NAN, decimal.Decimal("NaN")
        if value.is_integer():
            return Kind.INTEGER, int(value)
        return Kind.REAL, decimal.Decimal(value)
    if isinstance(value, list):
        return Kind.LIST, value
    if isinstance(value, dict):
        return Kind.DICT, value
    if isinstance(value, str):
        number = _to_decimal(value)
        if number is not None:
            if number.is_infinite():
                return Kind.INFINITY, number
            if number.is_nan():
                return Kind.NAN, number
            if not _is_real(value) and not _SCIENTIFIC_INT.search(value.strip()):
                return Kind.INTEGER, int(number)
            if _is_real(value):
                return Kind.REAL, number
        if value.lower() in ("true", "false"):
            return Kind.BOOL, value.lower() == "true"
        if not value.strip():
            return Kind.NULL_STRING, value
        return Kind.STRING, value
    return Kind.STRING, str(value)


def _decimal_places(number: Any) -> int:
    text = str(abs(float(number)))
    if "." in text:
        return len(text.split(".")[1])
    match = re.search(r"[\d.]+[eE]-(\d+)", text)
    return int(match.group(1)) if match else 0


def _column_kind(kinds: int) -> Kind:
    def mixed(group: int) -> bool:
        return bool(kinds & group and kinds & ~group)

    if not mixed(_NUMBER | Kind.NULL_STRING):
        if bin(kinds & (_FLOATISH | Kind.NULL_STRING)).count("1") >= 2 or bin(kinds & _NUMBER).count("1") >= 2:
            return Kind.REAL
    if mixed(Kind.BOOL):
        return Kind.STRING
    for kind in _COLUMN_KIND_ORDER:
        if kinds & kind:
            return kind
    return Kind.NONE if kinds == Kind.NONE else Kind.STRING


def _format(cell: _Cell, column: Kind, decimals: int | None) -> str:
    if cell.kind is Kind.STRING:
        return str(cell.data)
    kind = cell.kind if column is Kind.STRING else column
    data = cell.data
    if column not in (cell.kind, Kind.STRING, Kind.BOOL):
        converted = _convert(cell, column)
        if converted is None:
            return _format_as(cell.kind, cell.data, decimals, fallback_str=True)
        data = converted
    try:
        return _format_as(kind, data, decimals)
    except (ValueError, TypeError):
        return str(data)


def _convert(cell: _Cell, column: Kind) -> Any:
    """Convert a cell to its column's kind, leniently; None when impossible."""
    if column is Kind.REAL:
        if cell.kind in (Kind.INTEGER, Kind.REAL):
            return decimal.Decimal(cell.data)
        return None
    if column is Kind.INTEGER:
        if cell.kind is Kind.REAL:
            return int(cell.data)
        return None
    return None


def _format_as(kind: Kind, data: Any, decimals: int | None, *, fallback_str: bool = False) -> str:
    if kind is Kind.INTEGER:
        return f"{data:d}" if isinstance(data, int) else str(data)
    if kind is Kind.REAL:
        return f"{data:.{decimals}f}" if decimals is not None else f"{data:f}"
    if kind in (Kind.INFINITY, Kind.NAN):
        return f"{data:f}"
    if kind in (Kind.NONE, Kind.BOOL, Kind.LIST, Kind.DICT):
        return f"{data}"
    if fallback_str and not isinstance(data, str):
        raise TypeError(data)
    return str(data)


def text_width(text: str) -> int:
    """Terminal width: East Asian wide and full-width characters count two."""
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def _pad(text: str, width: int, align: str) -> str:
    fill = max(width - (text_width(text) - len(text)), 0)
    if align == "right":
        return text.rjust(fill)
    if align == "center":
        return f"{text:^{fill}}"
    return text.ljust(fill)


def render_markdown(headers: list[str], rows: Iterable[list[Any]]) -> str:
    """A Markdown table with pytablewriter's typing, widths and alignment."""
    matrix = list(rows)
    columns = []
    row_count = len(matrix)
    for index, header in enumerate(headers):
        cells = _column_cells([row[index] for row in matrix])
        kinds = 0
        for cell in cells:
            kinds |= cell.kind
        kind = _column_kind(kinds) if cells else Kind.NONE
        places = [
            cell.decimals for cell in cells if cell.kind in (Kind.INTEGER, Kind.REAL) and cell.decimals is not None
        ]
        decimals = max(places) if places else None
        texts = [_format(cell, kind, decimals) for cell in cells]
        header_text = str(header).strip().strip('"')
        width = max([_MIN_COLUMN_WIDTH, text_width(header_text)] + [text_width(t) for t in texts])
        column_align = "right" if kind in (Kind.INTEGER, Kind.REAL) else "left"
        aligns = [
            "right" if kind is Kind.STRING and cell.kind in (Kind.INTEGER, Kind.REAL) else column_align
            for cell in cells
        ]
        columns.append((header_text, width, column_align, texts, aligns))

    lines = ["|" + "|".join(_escape(_pad(h, w, "center")) for h, w, _, _, _ in columns) + "|"]
    lines.append("|" + "|".join("-" * (w - 1) + ":" if a == "right" else "-" * w for _, w, a, _, _ in columns) + "|")
    for row_index in range(row_count):
        lines.append(
            "|"
            + "|".join(_escape(_pad(texts[row_index], w, aligns[row_index])) for _, w, _, texts, aligns in columns)
            + "|"
        )
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")
