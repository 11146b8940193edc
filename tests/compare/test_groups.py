"""Groups compared as a whole, and tasks whose documents are clustered, on real and crafted runs.

The real runs (tests/compare/runs/README.md) hold a size-weighted and an unweighted group
over ARC-Easy (30 documents) and BoolQ (24, clustered by passage), from `assay run` and
`lm_eval`. Every number is recomputed here straight from the files, by loops.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from assay.cli import main
from assay.compare import groups, outputs
from assay.run_results import RunResults
from tests.compare.crafted import write_run

RUNS = Path(__file__).resolve().parent / "runs"
ASSAY_0, ASSAY_1, LMEVAL = (
    str(RUNS / name) for name in ("group_assay_0shot", "group_assay_1shot", "group_lmeval_seed7")
)
GROUPS = {"g_weighted": ("g_arc", "g_boolq"), "g_unweighted": ("g_arc_u", "g_boolq_u")}


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["compare", *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _rows(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["task"], row["metric"]): row for row in report["comparisons"]}


def _results(folder: str) -> dict[str, Any]:
    return dict(json.loads(next(Path(folder).glob("*/results_*.json")).read_text()))


def _acc_by_doc(folder: str, task: str) -> dict[str, tuple[float, str]]:
    """doc_hash → (acc, passage or doc_hash), read from the samples file with no Assay code."""
    found = {}
    for line in next(Path(folder).glob(f"*/samples_{task}_2*.jsonl")).read_text().splitlines():
        record = json.loads(line)
        found[record["doc_hash"]] = (float(record["acc"]), record["doc"].get("passage", record["doc_hash"]))
    return found


def _se_by_loops(differences: list[float], clusters: list[str]) -> float:
    mean = sum(differences) / len(differences)
    sums: dict[str, float] = defaultdict(float)
    for value, cluster in zip(differences, clusters, strict=False):
        sums[cluster] += value - mean
    count = len(sums)
    return math.sqrt(count / (count - 1) * sum(s * s for s in sums.values())) / len(differences)


def test_a_group_against_itself_is_delta_zero_and_p_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _json(capsys, ASSAY_0, ASSAY_0)
    rows = _rows(report)
    for group, subtasks in GROUPS.items():
        row = rows[(group, "acc")]
        assert (row["delta"], row["p_value"], row["verdict"], row["test"]) == (0.0, 1.0, "unchanged", "stratified z")
        assert row["group"] == {"subtasks": list(subtasks), "weight_by_size": group == "g_weighted"} and row["n"] == 54
    assert code == 0 and report["verdict"] == "unchanged"
    assert not any("not compared as such" in note for note in report["notes"])


@pytest.mark.parametrize("folder", [ASSAY_0, ASSAY_1, LMEVAL])
def test_each_group_reproduces_its_results_json(folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, report = _json(capsys, folder, ASSAY_1)
    results, rows = _results(folder), _rows(report)
    for group in GROUPS:
        assert rows[(group, "acc")]["baseline"] == pytest.approx(results["groups"][group]["acc,none"], rel=1e-12)
    # lm-eval's dummy answers g_arc and g_arc_u differently, so its two groups tell the weightings apart.
    assert rows[("g_unweighted", "acc")]["group"]["weight_by_size"] is False


@pytest.mark.parametrize(("group", "weight_by_size"), [("g_weighted", True), ("g_unweighted", False)])
def test_the_group_row_is_recomputed_from_the_samples(
    group: str, weight_by_size: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report = _json(capsys, LMEVAL, ASSAY_1)
    row = _rows(report)[(group, "acc")]
    delta, variance, total = 0.0, 0.0, 54
    for task in GROUPS[group]:
        base, cand = _acc_by_doc(LMEVAL, task), _acc_by_doc(ASSAY_1, task)
        differences = [cand[h][0] - base[h][0] for h in base]
        clusters = [base[h][1] for h in base]
        weight = len(differences) / total if weight_by_size else 1 / 2
        delta += weight * sum(differences) / len(differences)
        variance += weight**2 * _se_by_loops(differences, clusters) ** 2  # BoolQ by passage, ARC one document each
    assert row["delta"] == pytest.approx(delta, rel=1e-12) and row["se"] == pytest.approx(
        math.sqrt(variance), rel=1e-12
    )
    z = delta / math.sqrt(variance)
    assert row["p_value"] == pytest.approx(math.erfc(abs(z) / math.sqrt(2)), rel=1e-10)


def test_a_task_with_a_cluster_key_gets_a_clustered_z(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = _json(capsys, LMEVAL, ASSAY_1)
    row = _rows(report)[("g_boolq", "acc")]
    base, cand = _acc_by_doc(LMEVAL, "g_boolq"), _acc_by_doc(ASSAY_1, "g_boolq")
    differences, passages = [cand[h][0] - base[h][0] for h in base], [base[h][1] for h in base]
    assert len(set(passages)) == 10
    assert (row["test"], row["interval"]) == ("clustered z", "normal")
    assert row["se"] == pytest.approx(_se_by_loops(differences, passages), rel=1e-12)
    assert any(
        note.startswith("g_boolq: documents clustered by 'passage' (10 clusters over 24") for note in report["notes"]
    )
    assert _rows(report)[("g_arc", "acc")]["test"] == "mcnemar"  # no cluster_key: unchanged


def test_holm_counts_the_group_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", ASSAY_0, ASSAY_1])
    out = capsys.readouterr().out
    assert "Holm-adjusted over 8 metrics" in out and "|g_weighted  |none  |acc     |" in out
    assert "Groups compared as a whole: g_unweighted (subtasks weighted equally), g_weighted (size-weighted)" in out
    assert code == 0


def test_cluster_ids_are_the_same_from_samples_scores_lines_and_memory(tmp_path: Path) -> None:
    sample_file = next(Path(ASSAY_0).glob("*/samples_g_boolq_2*.jsonl"))
    records = [json.loads(line) for line in sample_file.read_text().splitlines()]
    from_samples = outputs.read_samples(sample_file, label="b", cluster_key="passage")
    scores = tmp_path / "scores_g_boolq_2026-01-02T03-04-05.jsonl"
    scores.write_text("".join(json.dumps(outputs.score_line(r, cluster_key="passage")) + "\n" for r in records))
    from_scores = outputs.read_samples(scores, label="b")
    results = _results(ASSAY_0)
    in_memory = outputs.run_in_memory(RunResults.from_lmeval_dict(results), {"g_boolq": records}, label="b").samples(
        "g_boolq"
    )
    clusters = [s.cluster for s in from_samples]
    assert len(set(clusters)) == 10 and None not in clusters
    assert [s.cluster for s in from_scores] == clusters == [s.cluster for s in in_memory]
    assert all(
        s.values == {"acc": r["acc"]} for s, r in zip(from_scores, records, strict=False)
    )  # `cluster` is not a metric
    assert (
        "cluster" not in outputs.score_line(records[0])
        and outputs.read_samples(sample_file, label="b")[0].cluster is None
    )


def _with_group(
    results_path: Path,
    group: str,
    subtasks: list[str],
    value: float,
    *,
    sizes: dict[str, int],
    values: dict[str, float],
    metric: str = "acc",
    config: dict[str, Any] | None = None,
) -> None:
    results = json.loads(results_path.read_text())
    for task in subtasks:
        results["results"][task].update({f"{metric},none": values[task], "sample_len": sizes[task]})
    results["groups"] = {group: {"alias": group, f"{metric},none": value, f"{metric}_stderr,none": "N/A"}}
    results["results"][group] = dict(results["groups"][group])
    results["group_subtasks"] = {group: subtasks}
    if config is not None:
        results["configs"][group] = config
    results_path.write_text(json.dumps(results))


def _docs(scores: list[float], prefix: str) -> list[dict[str, Any]]:
    return [{"doc_id": i, "doc": f"{prefix}{i}", "acc": v} for i, v in enumerate(scores)]


def _two_task_runs(tmp_path: Path) -> tuple[Path, Path]:
    base = write_run(tmp_path / "a", {"t1": _docs([1, 0, 1, 1], "x"), "t2": _docs([0, 0], "y")})
    cand = write_run(tmp_path / "b", {"t1": _docs([1, 1, 1, 1], "x"), "t2": _docs([1, 0], "y")})
    return base, cand


@pytest.mark.parametrize(
    ("base_value", "cand_value", "expected"), [(0.5, 5 / 6, True), (0.375, 0.75, False), (0.9, 0.75, None)]
)
def test_the_weighting_is_read_from_the_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], base_value: float, cand_value: float, expected: bool | None
) -> None:
    base, cand = _two_task_runs(tmp_path)
    sizes = {"t1": 4, "t2": 2}
    # Baseline t1 0.75, t2 0: by size (3 + 0)/6 = 0.5, plain 0.375. Candidate t1 1, t2 0.5: by size 5/6, plain 0.75.
    _with_group(base, "g", ["t1", "t2"], base_value, sizes=sizes, values={"t1": 0.75, "t2": 0.0})
    _with_group(cand, "g", ["t1", "t2"], cand_value, sizes=sizes, values={"t1": 1.0, "t2": 0.5})
    _, report = _json(capsys, str(base), str(cand))
    row = _rows(report).get(("g", "acc"))
    if expected is None:
        assert row is None and any("a custom aggregation?" in note for note in report["notes"])
        return
    assert row is not None and row["group"]["weight_by_size"] is expected
    assert row["baseline"] == base_value and row["candidate"] == pytest.approx(cand_value)


def test_a_group_config_in_the_results_json_decides_the_weighting(tmp_path: Path) -> None:
    base, cand = _two_task_runs(tmp_path)
    config = {
        "group": "g",
        "aggregate_metric_list": [{"metric": "acc", "filter_list": ["none"], "weight_by_size": False}],
    }
    _with_group(base, "g", ["t1", "t2"], 0.5, sizes={"t1": 4, "t2": 2}, values={"t1": 0.75, "t2": 0.0}, config=config)
    run = RunResults.from_lmeval_dict(json.loads(base.read_text()))
    specs = groups.group_metrics(run, run, [])
    assert [(s.group, s.metric, s.filter, s.subtasks, s.weight_by_size) for s in specs] == [
        ("g", "acc", "none", ("t1", "t2"), False)
    ]


def test_a_group_of_a_corpus_metric_is_left_out_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = [{"doc_id": i, "doc": f"d{i}", "perplexity": -float(i + 1)} for i in range(4)]
    base = write_run(tmp_path / "a", {"t1": docs, "t2": docs})
    _with_group(
        base, "g", ["t1", "t2"], 2.0, sizes={"t1": 4, "t2": 4}, values={"t1": 2.0, "t2": 2.0}, metric="perplexity"
    )
    _, report = _json(capsys, str(base), str(base))
    assert ("g", "perplexity") not in _rows(report)
    assert any(
        "g perplexity (none): not compared as a group; t1's perplexity is not a mean" in n for n in report["notes"]
    )


def test_a_subtask_without_samples_leaves_the_group_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = _two_task_runs(tmp_path)
    for path in (base, cand):
        _with_group(path, "g", ["t1", "t2"], 0.5, sizes={"t1": 4, "t2": 2}, values={"t1": 0.75, "t2": 0.0})
    next(cand.parent.glob("samples_t2_*.jsonl")).unlink()
    _, report = _json(capsys, str(base), str(cand))
    assert ("g", "acc") not in _rows(report)
    assert any(note == "g acc (none): not compared as a group; no paired documents in t2." for note in report["notes"])


def test_nested_groups_weight_their_leaf_tasks() -> None:
    subtasks = {"mmlu": ["stem", "humanities"], "stem": ["algebra", "physics"], "humanities": ["law"]}
    assert groups.leaf_tasks("mmlu", subtasks) == ("algebra", "physics", "law")
    assert groups.group_names(RunResults.from_lmeval_dict({"results": {}, "group_subtasks": subtasks})) == {
        "mmlu",
        "stem",
        "humanities",
    }
