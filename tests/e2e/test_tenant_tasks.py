"""A tenant's task files are data, on the real node: each attempt here ran code or read files
past every policy gate before templates were sandboxed and task sources confined.

The session's operator runs the chart's default policy (no task code)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec
from tests.operator.task_yaml import ARC_QA

pytestmark = pytest.mark.e2e

SOURCES = [{"configMap": "tenant-tasks"}]


def _config_map(data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tenant-tasks"}, "data": data}


def _refused(cluster: Cluster, name: str, data: dict[str, str], tasks: list[str]) -> str:
    cluster.apply(_config_map(data))
    cluster.apply(evaluation_manifest(name, **dummy_spec(tasks=tasks, taskSources=SOURCES)))
    status = cluster.wait(name, "Failed", timeout=60)["status"]
    assert status["reason"] == "InvalidSpec", status
    assert "\n" not in status["message"] and "/tmp/" not in status["message"], status["message"]
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
    return str(status["message"])


def test_a_template_that_reaches_os_runs_nothing_and_fails_with_the_reason(cluster: Cluster) -> None:
    marker = "/output/pwned-by-template"
    evil = ARC_QA.replace(
        'doc_to_text: "Q: {{question}}\\nA:"',
        f"doc_to_text: \"{{{{ lipsum.__globals__['os'].popen('touch {marker}').read() }}}}Q: {{{{question}}}}\"",
    )
    assert "lipsum" in evil
    cluster.apply(_config_map({"arc_easy_qa.yaml": evil}))
    cluster.apply(evaluation_manifest("template", **dummy_spec(tasks=["arc_easy_qa"], taskSources=SOURCES)))
    status = cluster.wait("template", "Failed", timeout=180)["status"]
    assert "reaches past the document" in status["message"], status["message"]
    (pod,) = cluster.items("pods", "assay.dev/evaluation=template")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 78  # a config error: no retry
    assert not list(cluster.output_dir.rglob("pwned-by-template"))


def test_task_code_from_a_config_map_is_refused_without_the_admins_policy(cluster: Cluster) -> None:
    uses_code = ARC_QA.replace('doc_to_text: "Q: {{question}}\\nA:"', "doc_to_text: !function utils.text")
    message = _refused(cluster, "function", {"a.yaml": uses_code}, ["arc_easy_qa"])
    assert message.startswith("spec.taskSources: ConfigMap 'tenant-tasks' key 'a.yaml': It uses `!function utils.text`")
    helper = {"a.yaml": ARC_QA, "utils.py": "import os\nos.system('touch /output/pwned-by-helper')\n"}
    message = _refused(cluster, "helper", helper, ["arc_easy_qa"])
    assert "key 'utils.py' is Python code, which this cluster does not run from ConfigMaps" in message
    assert not list(cluster.output_dir.rglob("pwned-by-helper"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("include: /proc/self/status\ntask: t\n", "includes '/proc/self/status': an include is a path relative"),
        ("include: ../../../../etc/passwd\ntask: t\n", "which leads outside the task folder"),
        ("task: t\ndoc_to_text: !function .cache.models.mod.fn\n", "It uses `!function .cache.models.mod.fn`"),
    ],
    ids=["absolute-include", "dotdot-include", "leading-dot-function"],
)
def test_includes_and_functions_may_not_leave_the_config_map(cluster: Cluster, text: str, message: str) -> None:
    assert message in _refused(cluster, "escape", {"a.yaml": text}, ["t"])


def test_a_config_map_task_may_not_take_a_library_tasks_name(cluster: Cluster) -> None:
    shadow = ARC_QA.replace("task: arc_easy_qa", "task: arc_easy")
    message = _refused(cluster, "shadow", {"arc_easy.yaml": shadow}, ["arc_easy"])
    assert message == (
        "spec.taskSources: ConfigMap 'tenant-tasks' defines 'arc_easy', a name of the task library, which a task "
        "source may not reuse: rename it (for example to 'custom_arc_easy')."
    )
