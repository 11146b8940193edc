"""A tenant's task files name data, never the runner pod's files, on the real node.

`data_files: {test: /proc/self/environ}` made the pod's environment a task's documents, and a
template failing on a document (`{{ {}[text] }}`) put it into the Evaluation's status. Now the
runner refuses the task before anything is read, and a tenant's template failure is one fixed
sentence: no environment variable and no document text in the status or any Event.

The session's operator runs the chart's default policy (no task code)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec
from tests.operator.task_yaml import ARC_QA

pytestmark = pytest.mark.e2e

SOURCES = [{"configMap": "tenant-data"}]
ENVIRON_TASK = """\
task: environ_qa
dataset_path: text
dataset_kwargs:
  data_files:
    test: {path}
output_type: generate_until
test_split: test
doc_to_text: "{{{{ {{}}[text] }}}}"
doc_to_target: ""
metric_list:
  - metric: exact_match
"""
# Text of the runner pod's environment (/proc/self/environ) that a leak would carry.
ENVIRONMENT_TEXT = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_PORT", "ASSAY_EVALUATION_FILE", "PATH=", "HOME=")


def _failed_run(cluster: Cluster, name: str, data: dict[str, str], tasks: list[str]) -> str:
    """The runner pod's refusal: the Evaluation's status and every Event, as one text to search."""
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tenant-data"}, "data": data})
    cluster.apply(evaluation_manifest(name, **dummy_spec(tasks=tasks, taskSources=SOURCES)))
    status = cluster.wait(name, "Failed", timeout=180)["status"]
    (pod,) = cluster.items("pods", f"assay.dev/evaluation={name}")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 78  # a config error: no retry
    events = [e.get("message", "") for e in cluster.items("events")]
    seen = json.dumps(status) + "\n".join(events)
    for text in ENVIRONMENT_TEXT:
        assert text not in seen, f"{text} reached the status or an Event: {seen}"
    return str(status["message"])


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/proc/self/environ", "dataset_kwargs.data_files '/proc/self/environ' is an absolute path"),
        ("../../../../../../proc/self/environ", "leads out of its folder (`..`)"),
    ],
    ids=["absolute", "dotdot"],
)
def test_a_task_reading_the_pods_environment_is_refused_with_no_content_anywhere(
    cluster: Cluster, path: str, said: str
) -> None:
    message = _failed_run(cluster, "environ", {"environ_qa.yaml": ENVIRON_TASK.format(path=path)}, ["environ_qa"])
    # The operator's sentence, then the runner's: "... Runner: Task 'environ_qa': dataset_kwargs.data_files ..."
    assert "Runner: Task 'environ_qa': " in message and said in message, message


def test_a_tenants_template_failure_is_one_fixed_sentence(cluster: Cluster) -> None:
    failing = ARC_QA.replace('doc_to_text: "Q: {{question}}\\nA:"', 'doc_to_text: "{{ {}[question] }}"')
    assert failing != ARC_QA
    message = _failed_run(cluster, "template-text", {"arc_easy_qa.yaml": failing}, ["arc_easy_qa"])
    assert message.endswith("Task 'arc_easy_qa': doc_to_text failed to render on a document; check the template."), (
        message
    )
