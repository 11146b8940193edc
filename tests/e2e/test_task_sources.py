"""spec.taskSources on a real cluster: a suite's own task from a ConfigMap runs in the runner
image without a rebuild; a broken ConfigMap fails the Evaluation in one sentence, no Job."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec
from tests.operator.task_yaml import ARC_QA

pytestmark = pytest.mark.e2e


def _config_map(name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_a_task_from_a_config_map_runs_and_its_source_is_recorded(cluster: Cluster) -> None:
    cluster.apply(_config_map("suite-tasks", {"arc_easy_qa.yaml": ARC_QA}))
    version = cluster.get("configmap", "suite-tasks")["metadata"]["resourceVersion"]
    cluster.apply(
        evaluation_manifest(
            "custom", **dummy_spec(tasks=["arc_easy_qa", "arc_easy"], taskSources=[{"configMap": "suite-tasks"}])
        )
    )
    status = cluster.wait("custom", "Succeeded", timeout=180)["status"]
    assert set(status["results"]) == {"arc_easy_qa", "arc_easy"}
    assert status["nSamples"]["arc_easy_qa"]["effective"] == 4
    assert status["taskSources"] == [
        {"configMap": "suite-tasks", "resourceVersion": version, "tasks": ["arc_easy_qa", "suite_qa"]}
    ]
    (pod,) = cluster.items("pods")
    mount = next(
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["mountPath"] == "/etc/assay/tasks/suite-tasks"
    )
    assert mount["readOnly"] is True
    # The runner read the task from the mounted ConfigMap (the results JSON says which file).
    (path,) = sorted(cluster.output_dir.rglob("results_*.json"))
    configs = json.loads(path.read_text())["configs"]
    assert configs["arc_easy_qa"]["metadata"]["config_source"] == "/etc/assay/tasks/suite-tasks/arc_easy_qa.yaml"
    assert configs["arc_easy_qa"]["doc_to_text"] == "Q: {{question}}\nA:"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "spec.taskSources: ConfigMap 'suite-tasks' does not exist in namespace"),
        ({"a.yaml": "task: [x\n"}, "spec.taskSources: ConfigMap 'suite-tasks' key 'a.yaml': It is malformed at line 2"),
        (
            {"a.yaml": ARC_QA.replace("doc_to_text", "doc_to_txt")},
            "spec.taskSources: ConfigMap 'suite-tasks' key 'a.yaml': Task 'arc_easy_qa' has unknown key 'doc_to_txt'.",
        ),
        ({"a.yaml": ARC_QA, "b.yaml": "#" * 600_000}, "spec.taskSources: ConfigMap 'suite-tasks' holds"),
    ],
    ids=["missing", "malformed", "unknown-field", "too-large"],
)
def test_a_broken_config_map_fails_the_evaluation_in_one_sentence_without_a_job(
    cluster: Cluster, data: dict[str, str] | None, message: str
) -> None:
    if data is not None:
        # `create`, not `apply`: apply's last-applied annotation cannot hold 600 kB.
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(_config_map("suite-tasks", data)))
    cluster.apply(
        evaluation_manifest("broken", **dummy_spec(tasks=["arc_easy_qa"], taskSources=[{"configMap": "suite-tasks"}]))
    )
    status = cluster.wait("broken", "Failed", timeout=60)["status"]
    assert status["reason"] == "InvalidSpec" and status["message"].startswith(message), status["message"]
    assert "\n" not in status["message"] and "/tmp/" not in status["message"]
    assert cluster.items("jobs") == []
