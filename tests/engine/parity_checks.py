"""Comparisons of Assay's and lm-eval's results and samples, number by number (relative 1e-9)."""

from __future__ import annotations

import json
import math


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def assert_rows_equal(ours: dict, theirs: dict) -> None:
    assert set(ours["results"]) == set(theirs["results"])
    for name, row in theirs["results"].items():
        assert set(ours["results"][name]) == set(row), name
        for key, value in row.items():
            assert _close(ours["results"][name][key], value), (name, key, ours["results"][name][key], value)
    for key in ("group_subtasks", "n-shot", "n-samples", "higher_is_better"):
        assert json.loads(json.dumps(ours[key])) == json.loads(json.dumps(theirs[key])), key
    assert set(ours.get("groups", {})) == set(theirs.get("groups", {}))


def _jsonish(value):
    return json.loads(json.dumps(value, default=str))


def assert_samples_equal(ours: dict, theirs: dict) -> None:
    for task, rows in theirs["samples"].items():
        assert len(ours["samples"][task]) == len(rows)
        for mine, ref in zip(ours["samples"][task], rows, strict=False):
            for key in ("doc_id", "target", "arguments", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash"):
                assert _jsonish(mine[key]) == _jsonish(ref[key]), (task, key)
            for key in ("resps", "filtered_resps"):
                assert _jsonish(mine[key]) == _jsonish(ref[key]), (task, key)
