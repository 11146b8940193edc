"""Read local JSON Lines splits as plain rows, without `datasets`, where that gives the same rows.

Importing `datasets` (with pandas and pyarrow) is about a second and 150 MB of a run's
start-up. For a task that only reads its documents, `datasets.load_dataset("json", ...)`
gives, row by row, what `json.loads` gives, *when every row has one shape*: the same keys in
the same order at every level, one JSON type per field, no nulls. Arrow then infers exactly
that schema and hands the values back unchanged. Anything it would reshape is refused here,
and the caller loads the files through `datasets` as before:

- a field that changes type (int and float become float; missing keys or nulls become None),
  empty lists or objects (typed null), lists whose elements differ in shape;
- strings Arrow reads as timestamps (ISO dates), lone surrogates, ints outside int64,
  NaN/Infinity, duplicate keys, a byte-order mark, blank lines;
- rows carrying the columns `datasets` takes for agent traces, which it rewrites;
- split names `datasets` would reject.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

Row = dict[str, Any]

# datasets reads an ISO-8601 date (optionally with a time) as a timestamp, not a string.
_LOOKS_LIKE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")
_INT64 = (-(2**63), 2**63 - 1)
# Column sets datasets' JSON builder takes for agent-trace files and rewrites (datasets >= 5).
_AGENT_TRACE_COLUMNS = (
    {"type", "message"},
    {"type", "payload"},
    {"type", "id", "version", "cwd"},
    {"id", "source", "model", "system_prompt", "messages"},
)


class _NotPlain(Exception):
    """A row `datasets` would not hand back as `json.loads` reads it."""


def _object(pairs: list[tuple[str, Any]]) -> Row:
    row = dict(pairs)
    if len(row) != len(pairs) or not row:
        raise _NotPlain("duplicate keys or an empty object")
    return row


def _shape(value: Any) -> Any:
    """A hashable description of the value's JSON type, recursively; _NotPlain where Arrow would change it."""
    kind = type(value)
    if kind is str:
        if _LOOKS_LIKE_DATE.match(value) or (not value.isascii() and _has_surrogate(value)):
            raise _NotPlain("a date-like string or a lone surrogate")
        return "str"
    if kind is bool:
        return "bool"
    if kind is int:
        if not _INT64[0] <= value <= _INT64[1]:
            raise _NotPlain("an int outside int64")
        return "int"
    if kind is float:
        if not math.isfinite(value):
            raise _NotPlain("NaN or Infinity")
        return "float"
    if kind is dict:
        return tuple((key, _shape(item)) for key, item in value.items())
    if kind is list:
        shapes = {_shape(item) for item in value}
        if len(shapes) != 1:
            raise _NotPlain("an empty list or one whose elements differ")
        return ("list", shapes.pop())
    raise _NotPlain("a null")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _read(path: Path) -> list[Row]:
    with path.open(encoding="utf-8", newline="") as file:  # newline="": line endings as they are in the file
        text = file.read()
    if text.startswith("\ufeff"):
        raise _NotPlain("a byte-order mark")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    for line in lines:
        if not line.strip() or line.endswith("\r"):
            raise _NotPlain("a blank line or a CRLF line ending")
        row = json.loads(line, object_pairs_hook=_object)
        if type(row) is not dict:
            raise _NotPlain("a line that is not an object")
        rows.append(row)
    return rows


def read_splits(files: dict[str, Path]) -> dict[str, list[Row]] | None:
    """Split name -> rows, as `datasets` would give them; None when any file is not plain (see the module)."""
    if not all(path.suffix == ".jsonl" and _SPLIT_NAME.match(split) for split, path in files.items()):
        return None
    try:
        splits = {split: _read(path) for split, path in files.items()}
        # One builder reads every split with the schema of the first: every row must share one shape.
        shapes = {_shape(row) for rows in splits.values() for row in rows}
    except (_NotPlain, ValueError, OSError, RecursionError):
        return None
    if len(shapes) != 1 or not all(splits.values()):
        return None
    columns = set(next(iter(splits.values()))[0])
    if any(marker <= columns for marker in _AGENT_TRACE_COLUMNS):
        return None
    return splits
