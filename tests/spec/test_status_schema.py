"""One status schema: the runner's writer, the operator's and the CLI's readers, and the CRD agree.

The runner writes an Evaluation's status (`condensed`, `status_sink`, `versus_baseline`); the
operator's metrics (`evaluation_series`) and `assay results` (`results_view`) read it back; the
API server keeps only what the CRD's status schema declares. Each test here fails when one
of them names a field the others do not: a value written under another key reads back as
missing, a field the type lacks is reported by name, a field the CRD lacks or types otherwise
would be pruned or refused by the API server.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay import scores
from assay.cli_cluster import results_view
from assay.compare import comparison, outputs
from assay.operator.runtime import evaluation_series as series
from assay.run_results import RunResults
from assay.runner.results import versus_baseline
from assay.runner.results.condensed import condense_results
from assay.runner.results.status_sink import FileStatusSink
from assay.spec import status as schema
from tests.compare.crafted import write_run

REPO = Path(__file__).resolve().parents[2]
CRDS = [
    REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml",
    REPO / "deploy/helm/assay/crds/evaluations.assay.dev.yaml",
]

# An lm-eval results dict as a run of two tasks and their group ends: a stderr lm-eval could
# not compute ("N/A"), a value that is not finite, a metric with no stderr key at all.
LMEVAL = {
    "results": {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.5, "acc_stderr,none": 0.01, "acc_norm,none": 0.625},
        "boolq": {"alias": "boolq", "acc,none": 0.75, "acc_stderr,none": "N/A", "f1,none": float("nan")},
        "suite": {"alias": "suite", "acc,none": 0.625, "acc_stderr,none": 0.02},
    },
    "groups": {"suite": {"alias": "suite", "acc,none": 0.625, "acc_stderr,none": 0.02}},
    "group_subtasks": {"suite": ["arc_easy", "boolq"]},
    "n-samples": {"arc_easy": {"original": 2376, "effective": 100}, "boolq": {"original": 3270, "effective": 100}},
    "versions": {"arc_easy": 1.0, "boolq": 2, "suite": 0},
    "sentinels": {
        "trusted": False,
        "tasks": {
            "boolq": {"trusted": False, "checks": {"degenerate": {"passed": False, "reason": "every choice alike"}}},
            "arc_easy": {"trusted": True, "checks": {"degenerate": {"passed": True}}},
        },
    },
}


def _written(lmeval: Mapping[str, Any]) -> dict[str, Any]:
    """The runner's write as the operator and the CLI get it: through JSON, as a watch event brings it."""
    return json.loads(json.dumps(condense_results(RunResults.from_lmeval_dict(dict(lmeval)))))


def _expected(section: str) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(task, "metric,filter") → (value, stderr) as the lm-eval dict has them; None for a number
    JSON cannot hold (NaN) or lm-eval did not compute ("N/A")."""
    found = {}
    for task, row in LMEVAL[section].items():  # type: ignore[attr-defined]
        for key, value in row.items():
            metric, filter_name = scores.split_key(key)
            if key == "alias" or metric.endswith("_stderr"):
                continue
            stderr = schema.finite_number(row.get(f"{metric}_stderr,{filter_name}"))
            found[(task, key)] = (schema.finite_number(value), stderr)
    return found


def test_the_operators_metrics_read_back_every_score_and_stderr_the_runner_wrote() -> None:
    status = _written(LMEVAL)
    rows = series.score_rows(("ns", "ev"), "m", status, schema.SECTIONS)
    read = {
        (row.labels[3], f"{row.labels[4]},{row.labels[5]}"): (row.values[series.SCORE], row.values.get(series.STDERR))
        for row in rows
    }
    expected = {**_expected("results"), **_expected("groups")}
    # a score without a value is no series (boolq's f1, NaN in the run)
    assert read == {where: numbers for where, numbers in expected.items() if numbers[0] is not None}
    assert {row.labels[-1] for row in rows} == {"false"}  # the sentinels' verdict labels every series
    assert series.scores_trusted(status) == 0.0


def test_assay_results_reads_back_the_runners_tables_counts_versions_and_sentinels() -> None:
    status = _written(LMEVAL)
    shown = results_view.results_dict(status)
    for section in ("results", "groups"):
        read = {
            (task, key): (value, schema.finite_number(row.get(key.replace(",", "_stderr,", 1))))
            for task, row in shown[section].items()
            for key, value in row.items()
            if key != "alias" and "_stderr," not in key
        }
        assert read == _expected(section)
    assert shown["n-samples"] == LMEVAL["n-samples"]
    assert shown["versions"] == {"arc_easy": "1.0", "boolq": "2", "suite": "0"}
    assert shown["sentinels"]["tasks"] == {
        "boolq": {"trusted": False, "checks": {"check 1": {"passed": False, "reason": "every choice alike"}}}
    }


def test_a_renamed_field_on_the_writers_side_is_lost_to_both_readers() -> None:
    """What the two tests above guard against: the readers find nothing under a name the writer does not use."""
    status = _written(LMEVAL)
    renamed = {
        **status,
        "results": {t: {k: {"val": e["value"]} for k, e in m.items()} for t, m in status["results"].items()},
    }
    assert series.score_rows(("ns", "ev"), "m", renamed, [schema.RESULTS]) == []
    assert all(v.get("acc,none") is None for v in results_view.results_dict(renamed)["results"].values())
    assert _mismatches(renamed, schema.EvaluationStatus) != []


# -- every field the runner writes is in the type -------------------------------------------


def _mismatches(value: Any, kind: Any, path: str = "status") -> list[str]:
    """Where `value` (JSON) does not have the shape `kind` (a status type) says; [] when it does."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if typing.is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, not an object"]
        hints = typing.get_type_hints(kind)
        found = [f"{path}.{key}: not in {kind.__name__}" for key in value if key not in hints]
        found += [f"{path}.{key}: missing" for key in kind.__required_keys__ if key not in value]
        for key, sub in value.items():
            if key in hints:
                found += _mismatches(sub, hints[key], f"{path}.{key}")
        return found
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return []
        return _mismatches(value, next(a for a in args if a is not type(None)), path)
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        return [m for key, sub in value.items() for m in _mismatches(sub, args[1], f"{path}.{key}")]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: not an array"]
        return [m for i, sub in enumerate(value) for m in _mismatches(sub, args[0], f"{path}[{i}]")]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    return [] if ok else [f"{path}: {value!r} is not {kind.__name__}"]


def _comparison(tmp_path: Path) -> schema.Comparison:
    """A real comparison of two crafted runs, as the runner writes it to status."""
    base = [{"doc_id": i, "doc": f"q{i}", "acc": 1.0} for i in range(30)]
    worse = [{"doc_id": i, "doc": f"q{i}", "acc": float(i % 3 != 0)} for i in range(30)]
    baseline = outputs.read_run(write_run(tmp_path / "a", {"t": base}), label="baseline")
    candidate = outputs.read_run(write_run(tmp_path / "b", {"t": worse}), label="candidate")
    result = comparison.compare_runs(baseline, candidate, comparison.Settings())
    return versus_baseline.as_status(result, label="base", strict=False)


def test_every_field_the_runner_writes_is_in_the_status_type(tmp_path: Path) -> None:
    sink = FileStatusSink(tmp_path / "status.json", min_interval=0)
    sink.progress(0, 10)
    sink.progress(5, 10)
    compared = _comparison(tmp_path)
    assert compared["verdict"] == "regressed" and compared["rows"]
    assert sink.finished(RunResults.from_lmeval_dict(dict(LMEVAL)), comparison=compared)
    sink.output(written=True, message="/output/ev/g1/results.json")
    written = json.loads((tmp_path / "status.json").read_text())
    assert {"results", "groups", "nSamples", "versions", "sentinels", "progress", "timing"} <= set(written)
    assert {"comparison", "outputFiles", "runnerMessage", "message"} <= set(written)
    assert _mismatches(written, schema.EvaluationStatus) == []
    truncated = condense_results(RunResults.from_lmeval_dict(dict(LMEVAL)), max_bytes=300)
    assert _mismatches(json.loads(json.dumps(truncated)), schema.RunnerResults) == []


def test_the_shape_check_finds_an_undeclared_or_mistyped_field() -> None:
    assert _mismatches({"progress": {"requestsDone": 1, "requestsLeft": 2}}, schema.EvaluationStatus) == [
        "status.progress.requestsLeft: not in Progress"
    ]
    assert _mismatches({"results": {"t": {"acc,none": {"value": "0.5"}}}}, schema.EvaluationStatus) == [
        "status.results.t.acc,none.value: '0.5' is not float"
    ]
    assert _mismatches({"conditions": [{"type": "Ready"}]}, schema.EvaluationStatus) != []


# -- the CRD's status schema and the type -------------------------------------------------

_OPENAPI = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _as_openapi(kind: Any) -> dict[str, Any]:
    """The structure the CRD must declare for `kind`: types, nullability, required keys, nesting."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if typing.is_typeddict(kind):
        hints = typing.get_type_hints(kind)
        shape: dict[str, Any] = {"type": "object", "properties": {k: _as_openapi(v) for k, v in hints.items()}}
        if kind.__required_keys__:
            shape["required"] = sorted(kind.__required_keys__)
        return shape
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return {**_as_openapi(inner), "nullable": True}
    if origin is dict:
        return {"type": "object", "additionalProperties": _as_openapi(args[1])}
    if origin is list:
        return {"type": "array", "items": _as_openapi(args[0])}
    return {"type": _OPENAPI[kind]}


def _structure(node: Mapping[str, Any]) -> dict[str, Any]:
    """The CRD's schema node with only what `_as_openapi` says (no descriptions, bounds, enums)."""
    shape: dict[str, Any] = {"type": node["type"]}
    if node.get("nullable"):
        shape["nullable"] = True
    if "properties" in node:
        shape["properties"] = {key: _structure(sub) for key, sub in node["properties"].items()}
    if node.get("required"):
        shape["required"] = sorted(node["required"])
    if isinstance(node.get("additionalProperties"), Mapping):
        shape["additionalProperties"] = _structure(node["additionalProperties"])
    if "items" in node:
        shape["items"] = _structure(node["items"])
    return shape


@pytest.mark.parametrize("path", CRDS, ids=["deploy", "chart"])
def test_the_crds_status_schema_declares_the_status_type_field_by_field(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    declared = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert _structure(declared) == _as_openapi(schema.EvaluationStatus)


def test_the_comparison_and_a_condition_differ_from_the_crd_when_the_type_does() -> None:
    """The check above is not vacuous: a field added to the type alone, or made nullable, shows."""

    class Extra(schema.Progress, total=False):
        requestsLeft: int

    assert _as_openapi(Extra)["properties"]["requestsLeft"] == {"type": "integer"}
    assert _as_openapi(schema.Condition)["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert _as_openapi(schema.ComparisonRow)["properties"]["delta"] == {"type": "number", "nullable": True}
