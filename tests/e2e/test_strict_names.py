"""One strict boolean and one name space, on the real node: each attempt here got through before.

The session's operator runs the chart's default policy (no remote code, no task code, the
AppArmor, seccomp and Multus annotations refused). `trust_remote_code: "on"` passed a gate
that read only true/1/yes as true, and the hf backend then read it as `bool("on")`; a tenant
group listing the library's `arc_easy` with its own dataset reported its rows as arc_easy;
an AppArmor `unconfined` annotation and a Multus network went onto the runner pod as written.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import HF_TASKS, dummy_spec, hf_spec
from tests.e2e.refusals import refused
from tests.operator.task_yaml import ARC_QA

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("word", ["on", "enabled"])
def test_trust_remote_code_on_isrefused(cluster: Cluster, word: str) -> None:
    spec = hf_spec()
    spec["modelArgs"] = {**spec["modelArgs"], "trust_remote_code": word}
    message = refused(cluster, f"remote-{word}", spec)
    assert message == (
        f"spec.modelArgs.trust_remote_code must be true or false (also 1/0 or yes/no, in any case), not {word!r}."
    )


def test_trust_remote_code_no_is_false_and_the_model_runs(cluster: Cluster) -> None:
    """The runner pod's hf backend reads `no` as the gate does: false, so nothing to allow."""
    spec = hf_spec()
    spec["modelArgs"] = {**spec["modelArgs"], "trust_remote_code": "no"}
    cluster.apply(evaluation_manifest("remote-no", **spec))
    status = cluster.wait("remote-no", "Succeeded", timeout=300)["status"]
    assert set(HF_TASKS) <= set(status["results"]), status


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("container.apparmor.security.beta.kubernetes.io/runner", "unconfined"),
        ("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
        ("k8s.v1.cni.cncf.io/networks", "host-net"),
    ],
    ids=["apparmor", "seccomp", "multus"],
)
def test_security_and_network_annotations_arerefused(cluster: Cluster, key: str, value: str) -> None:
    name = f"annotated-{key.split('.')[0]}"
    message = refused(cluster, name, dummy_spec(podTemplate={"annotations": {key: value}}))
    assert message.startswith(f"spec.podTemplate.annotations key {key!r} is refused in this cluster")
    assert value not in message


def test_a_tenant_group_may_not_report_its_rows_as_a_library_task(cluster: Cluster) -> None:
    group = "group: suite_all\ntask:\n  - task: arc_easy\n    dataset_path: json\n    test_split: train\n"
    data = {"arc_easy_qa.yaml": ARC_QA, "suite.yaml": group}
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tenant-group"}, "data": data})
    spec = dummy_spec(tasks=["suite_all"], taskSources=[{"configMap": "tenant-group"}])
    message = refused(cluster, "takeover", spec)
    assert message.startswith("Group 'suite_all' changes 'dataset_path' of the library's 'arc_easy'")
