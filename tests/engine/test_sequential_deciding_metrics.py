"""Which metrics may stop a task early: per-document metrics bounded in a known range and
averaged, never a corpus metric, and none at all for a task scored by cluster (its
documents are not independent, which the confidence sequence's guarantee assumes)."""

from __future__ import annotations

import json
from pathlib import Path

from assay.runner.sequential.watch import deciding_metrics
from assay.runner.tasks.index import TaskManager
from assay.runner.tasks.task import Task

YAML = """task: seq_metrics
dataset_path: json
dataset_kwargs: {data_files: {"test": "@FILE@"}}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{q}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: "{{label}}"
metric_list:
  - {metric: acc, aggregation: mean, higher_is_better: true}
  - {metric: acc_norm, aggregation: mean, higher_is_better: true}
metadata: {version: 1.0@CLUSTER@}
"""


def _task(folder: Path, *, cluster_key: str | None) -> Task:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "rows.jsonl"
    rows = [{"q": f"q{i}", "choices": ["a", "b"], "label": i % 2, "passage": i // 4} for i in range(8)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cluster = f", cluster_key: {cluster_key}" if cluster_key else ""
    (folder / "seq_metrics.yaml").write_text(YAML.replace("@FILE@", str(data)).replace("@CLUSTER@", cluster))
    return TaskManager(include_path=str(folder)).load(["seq_metrics"]).tasks["seq_metrics"]


def test_a_plain_tasks_bounded_mean_metrics_decide(tmp_path: Path) -> None:
    assert sorted(deciding_metrics(_task(tmp_path / "plain", cluster_key=None))) == ["acc,none", "acc_norm,none"]


def test_a_task_scored_by_cluster_never_stops_early(tmp_path: Path) -> None:
    assert deciding_metrics(_task(tmp_path / "clustered", cluster_key="passage")) == {}
