"""Local JSON Lines read without `datasets`: the rows equal what `datasets` gives, or the reader
declines and `datasets` loads them as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.runner.data import local as datasets_local
from assay.runner.data import plain_jsonl

datasets = pytest.importorskip("datasets")


def _datasets_rows(files: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    loaded = datasets_local._load_local(files)
    return {split: [dict(row) for row in loaded[split]] for split in loaded}


def _typed(value: Any) -> Any:
    """The value with every type and key order spelled out, so that 1 != 1.0 and key order counts."""
    if isinstance(value, dict):
        return [(key, _typed(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


@pytest.mark.slow  # every row of every local benchmark through both readers (about 11 s); the cases below are fast
def test_every_imported_benchmark_reads_as_datasets_reads_it(converted: Path) -> None:
    folders = sorted({path.parent for path in converted.rglob("*.jsonl")})
    plain = 0
    for folder in folders:
        files = datasets_local.find_local_files(
            str(folder.parent.relative_to(converted)), folder.name, roots=[converted]
        )
        assert files is not None
        rows = plain_jsonl.read_splits(files)
        if rows is None:
            continue
        plain += 1
        assert _typed(rows) == _typed(_datasets_rows(files)), folder
    assert plain >= len(folders) // 2  # the reader serves most of the benchmarks, not none of them


def _write(tmp_path: Path, *rows: Any, raw: str | None = None) -> dict[str, Path]:
    path = tmp_path / "test.jsonl"
    path.write_text(raw if raw is not None else "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return {"test": path}


@pytest.mark.parametrize(
    ("rows", "raw"),
    [
        (({"a": 1}, {"a": 1.5}), None),  # int and float: datasets makes both floats
        (({"a": 1}, {"b": 1}), None),  # different keys: datasets fills the missing ones with None
        (({"a": 1, "b": 2}, {"b": 2, "a": 1}), None),  # key order: datasets takes the first row's
        (({"a": None},), None),
        (({"a": []},), None),
        (({"a": {}},), None),
        (({"a": [1, "x"]},), None),
        (({"a": [{"x": 1}, {"y": 1}]},), None),
        (({"d": "2020-01-01"},), None),  # datasets reads it as a timestamp
        (({"n": 2**63},), None),
        (({"type": "x", "message": "m"},), None),  # agent-trace columns, which datasets rewrites
        ((), '{"a": 1}\n\n{"a": 2}\n'),
        ((), '{"a": 1}\r\n'),
        ((), '\ufeff{"a": 1}\n'),
        ((), '{"a": 1, "a": 2}\n'),
        ((), '{"a": NaN}\n'),
        ((), '{"a": "\\ud800"}\n'),
        ((), "[1, 2]\n"),
        ((), ""),
    ],
)
def test_rows_datasets_would_reshape_are_left_to_datasets(
    tmp_path: Path, rows: tuple[Any, ...], raw: str | None
) -> None:
    assert plain_jsonl.read_splits(_write(tmp_path, *rows, raw=raw)) is None


def test_a_split_name_datasets_rejects_is_left_to_it(tmp_path: Path) -> None:
    path = tmp_path / "my-split.jsonl"
    path.write_text('{"a": 1}\n', encoding="utf-8")
    assert plain_jsonl.read_splits({"my-split": path}) is None


def test_splits_must_share_one_shape(tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text('{"a": 1}\n', encoding="utf-8")
    (tmp_path / "train.jsonl").write_text('{"a": "x"}\n', encoding="utf-8")
    files = {"test": tmp_path / "test.jsonl", "train": tmp_path / "train.jsonl"}
    assert plain_jsonl.read_splits(files) is None
    (tmp_path / "train.jsonl").write_text('{"a": 2}\n', encoding="utf-8")
    assert plain_jsonl.read_splits(files) == {"test": [{"a": 1}], "train": [{"a": 2}]}


def test_uniform_rows_equal_what_datasets_gives(tmp_path: Path) -> None:
    rows = [
        {
            "q": "why",
            "n": 3,
            "x": 0.5,
            "ok": True,
            "choices": {"text": ["a", "b"], "label": ["A", "B"]},
            "nested": [{"k": 1, "v": [1.0, 2.0]}],
        },
        {
            "q": "é ✓",
            "n": -1,
            "x": 1e-3,
            "ok": False,
            "choices": {"text": ["c"], "label": ["C"]},
            "nested": [{"k": 2, "v": [3.0]}, {"k": 3, "v": [4.0]}],
        },
    ]
    files = _write(tmp_path, *rows)
    assert _typed(plain_jsonl.read_splits(files)) == _typed(_datasets_rows(files)) == _typed({"test": rows})
