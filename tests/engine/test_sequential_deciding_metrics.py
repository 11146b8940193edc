"""Which metrics may stop a task early: per-document metrics bounded in a known range and
averaged, never a corpus metric, and none at all for a task scored by cluster (its
documents are not independent, which the confidence sequence's guarantee assumes)."""

from __future__ import annotations

from pathlib import Path

from assay.runner.sequential.watch import deciding_metrics
from assay.runner.tasks.index import TaskManager
from assay.runner.tasks.task import Task
from tests.helpers import write_choice_task


def _task(folder: Path, *, cluster_key: str | None) -> Task:
    rows = [{"q": f"q{i}", "choices": ["a", "b"], "label": i % 2, "passage": i // 4} for i in range(8)]
    write_choice_task(folder, "seq_metrics", rows, metrics=("acc", "acc_norm"), cluster_key=cluster_key)
    return TaskManager(include_path=str(folder)).load(["seq_metrics"]).tasks["seq_metrics"]


def test_a_plain_tasks_bounded_mean_metrics_decide(tmp_path: Path) -> None:
    assert sorted(deciding_metrics(_task(tmp_path / "plain", cluster_key=None))) == ["acc,none", "acc_norm,none"]


def test_a_task_scored_by_cluster_never_stops_early(tmp_path: Path) -> None:
    assert deciding_metrics(_task(tmp_path / "clustered", cluster_key="passage")) == {}
