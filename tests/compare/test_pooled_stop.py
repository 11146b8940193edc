"""`assay compare` of a run that stopped a group early as one (a sequential run's pooled group):
its tasks' rows hold a few documents each, too few to decide alone, and the group's row decides.

Crafted runs: the baseline scores 1 on every document of t1, t2 and t3; the candidate stopped
with its group after 10 documents of t1 (one lost, one gained) and 60 each of t2 and t3 (all
kept). t1's row alone cannot tell a drop of 0.05 from none (inconclusive); the group's 130
documents can (unchanged)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.cli import main
from tests.compare.crafted import write_run

SIZES = {"t1": 10, "t2": 60, "t3": 60}
TOTAL = 80


def _docs(task: str, values: list[float]) -> list[dict[str, Any]]:
    return [{"doc_id": i, "doc": f"{task} {i}", "acc": v} for i, v in enumerate(values)]


def _runs(tmp_path: Path, *, stopped_with_group: bool) -> tuple[Path, Path]:
    base = write_run(tmp_path / "base", {task: _docs(task, [1.0] * TOTAL) for task in SIZES})
    cand = write_run(
        tmp_path / "cand",
        {
            "t1": _docs("t1", [0.0, 1.0] + [1.0] * 8),  # one lost; and one gained below
            "t2": _docs("t2", [1.0] * SIZES["t2"]),
            "t3": _docs("t3", [1.0] * SIZES["t3"]),
        },
    )
    base_values = {task: (1.0, TOTAL) for task in SIZES}
    cand_values = {"t1": (0.9, 10), "t2": (1.0, 60), "t3": (1.0, 60)}
    for folder, values in ((base, base_values), (cand, cand_values)):
        path = folder  # write_run gives the results JSON
        results = json.loads(path.read_text())
        for task, (value, size) in values.items():
            results["results"][task].update({"acc,none": value, "sample_len": size})
        total = sum(size for _, size in values.values())
        group = sum(value * size for value, size in values.values()) / total
        results["groups"] = {"g": {"alias": "g", "acc,none": group, "acc_stderr,none": "N/A"}}
        results["results"]["g"] = dict(results["groups"]["g"])
        results["group_subtasks"] = {"g": list(SIZES)}
        if folder == cand:
            entries = {
                task: {"documents": size, "total": TOTAL, "stopped": "non_inferior"}
                | ({"group": "g"} if stopped_with_group else {})
                for task, size in SIZES.items()
            }
            groups = {"g": {"documents": 130, "total": 3 * TOTAL, "stopped": "non_inferior", "tasks": list(SIZES)}}
            results["sequential"] = {"seed": 0, "tasks": entries, "groups": groups if stopped_with_group else {}}
        path.write_text(json.dumps(results))
    # the gained document: the baseline lost t1's second document
    samples = next(base.parent.glob("samples_t1_*.jsonl"))
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[1]["acc"] = 0.0
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return base, cand


def _compare(capsys: pytest.CaptureFixture[str], base: Path, cand: Path) -> dict[str, Any]:
    main(["compare", str(base), str(cand), "--max-drop", "0.05", "--format", "json"])
    return dict(json.loads(capsys.readouterr().out))


def test_a_group_stopped_as_one_is_decided_by_its_own_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _compare(capsys, *_runs(tmp_path, stopped_with_group=True))
    rows = {row["task"]: row for row in report["comparisons"]}
    assert rows["t1"]["verdict"] == "inconclusive" and rows["t1"]["n"] == 10
    assert rows["g"]["verdict"] == "unchanged" and rows["g"]["n"] == 130
    assert report["verdict"] == "unchanged"
    assert any(note.startswith("Tasks the candidate stopped with their group") for note in report["notes"])
    assert any("g (its tasks as one) scored 130 of 240 documents (non_inferior)" in note for note in report["notes"])


def test_tasks_stopped_each_on_its_own_keep_their_own_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same numbers without a pooled group: t1 stopped alone, and its inconclusive row counts."""
    report = _compare(capsys, *_runs(tmp_path, stopped_with_group=False))
    assert report["verdict"] == "inconclusive"
    assert not any(note.startswith("Tasks the candidate stopped with their group") for note in report["notes"])
