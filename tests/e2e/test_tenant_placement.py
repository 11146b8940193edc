"""The admin's bounds on where runner pods go and what they take, on the real node (issue 23).

The session's operator runs the chart's default policy: no PriorityClass, one toleration
(the GPU taint), and runner pods with the chart's requests, emptyDir limits and deadline.
A second release, installed with `policy` values, shows those values reach the operator
through Helm. The namespace's runner ServiceAccount, Role and RoleBinding (`assay-runner`)
are written again when the operator checks them (at its first Job in the namespace after a
start, then every ten minutes; while they are the operator's), so a Role made wider is
brought down to today's rules.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import CHART, Cluster, OperatorDeployment, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import dummy_spec
from tests.e2e.refusals import refused

pytestmark = pytest.mark.e2e

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_the_default_policy_refuses_a_priority_class_and_tolerations_past_the_gpu_taint(cluster: Cluster) -> None:
    message = refused(cluster, "preempting", dummy_spec(podTemplate={"priorityClassName": "system-cluster-critical"}))
    assert message.startswith(
        "spec.podTemplate.priorityClassName 'system-cluster-critical' is not allowed in this cluster (allowed: none)"
    )
    control_plane = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
    message = refused(
        cluster, "on-control-plane", dummy_spec(podTemplate={"tolerations": [GPU_TOLERATION, control_plane]})
    )
    assert message.startswith(
        "spec.podTemplate.tolerations[1] (node-role.kubernetes.io/control-plane:NoSchedule) is "
        "not allowed in this cluster (allowed: nvidia.com/gpu:NoSchedule)"
    )
    message = refused(cluster, "everywhere", dummy_spec(podTemplate={"tolerations": [{"operator": "Exists"}]}))
    assert message.startswith("spec.podTemplate.tolerations[0] (every taint) is not allowed")


def test_the_gpu_toleration_runs_and_runner_pods_get_the_charts_defaults(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("defaults", **dummy_spec(podTemplate={"tolerations": [GPU_TOLERATION]})))
    status = cluster.wait("defaults", "Succeeded", timeout=180)["status"]
    assert status["results"]["arc_easy"]
    (job,) = cluster.items("jobs", "assay.dev/evaluation=defaults")
    pod = job["spec"]["template"]["spec"]
    assert pod["tolerations"] == [GPU_TOLERATION]
    # Not BestEffort: the chart's requests where the spec set no cpu or memory; a memory limit by default.
    assert pod["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "16Gi"},
    }
    # The claims are PVCs (dummy_spec); scratch and /dev/shm are bounded.
    assert {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v} == {
        "tmp": "10Gi",
        "dshm": "10Gi",
    }
    assert job["spec"]["activeDeadlineSeconds"] == 86400
    (runner,) = cluster.items("pods", "assay.dev/evaluation=defaults")
    assert runner["status"]["qosClass"] == "Burstable"


def _can(cluster: Cluster, account: str, verb: str, resource: str, *extra: str) -> bool:
    """What the API server's RBAC says the runner's ServiceAccount may do."""
    subject = f"--as=system:serviceaccount:{cluster.namespace}:{account}"
    answer = cluster.kubectl("auth", "can-i", verb, resource, subject, *extra, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


def test_a_runner_role_made_wider_is_tightened_when_the_identity_is_checked_again(cluster: Cluster) -> None:
    """The namespace's runner Role and RoleBinding, made wider by hand after the operator made them
    (`get` and `patch` on Evaluations themselves would let a runner read any spec and rewrite its
    own; a second subject): a restarted operator checks them at its next Job in the namespace and
    writes today's rules and subjects back, in one request each whose tests check that they are
    still the operator's."""
    cluster.apply(evaluation_manifest("legacy", **dummy_spec(suspend=True)))
    account = cluster.runner_account("legacy")
    cluster.wait_for(
        "the runner's binding", lambda: cluster.items("rolebindings", "app.kubernetes.io/name=assay-runner")
    )
    wide = [
        {"apiGroups": ["assay.dev"], "resources": ["evaluations"], "verbs": ["get", "patch"]},
        {"apiGroups": ["assay.dev"], "resources": ["evaluations/status"], "verbs": ["patch"]},
    ]
    cluster.kubectl("patch", "role", account, "--type=merge", "-p", json.dumps({"rules": wide}))
    subjects = [
        {"kind": "ServiceAccount", "name": account, "namespace": cluster.namespace},
        {"kind": "ServiceAccount", "name": "default", "namespace": cluster.namespace},
    ]
    cluster.kubectl("patch", "rolebinding", account, "--type=merge", "-p", json.dumps({"subjects": subjects}))
    assert _can(cluster, account, "patch", "evaluations.assay.dev/legacy")  # its own spec
    assert _can(cluster, "default", "get", "evaluations.assay.dev/legacy")

    cluster.operator.kill()
    cluster.operator.start()
    cluster.apply(evaluation_manifest("next", **dummy_spec()))
    status = cluster.wait("next", "Succeeded", timeout=180)["status"]
    assert status["results"]["arc_easy"]

    role = cluster.get("role", account)
    assert role["rules"] == [{"apiGroups": ["assay.dev"], "resources": ["evaluations/status"], "verbs": ["patch"]}]
    assert role["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "assay-operator"
    assert "ownerReferences" not in role["metadata"]  # the namespace's, not one Evaluation's
    binding = cluster.get("rolebinding", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": cluster.namespace}]
    # What RBAC itself now answers: status yes, spec and reads no; the extra subject holds nothing.
    assert not _can(cluster, account, "patch", "evaluations.assay.dev/legacy")
    assert not _can(cluster, account, "get", "evaluations.assay.dev/legacy")
    assert _can(cluster, account, "patch", "evaluations.assay.dev/legacy", "--subresource=status")
    assert not _can(cluster, "default", "get", "evaluations.assay.dev/legacy")


def _priority_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": 10,
        "preemptionPolicy": "Never",
        "description": "An Assay e2e test's allowed priority.",
    }


def test_the_charts_placement_values_bound_priority_tolerations_queue_and_defaults(
    cluster: Cluster, images: dict[str, str]
) -> None:
    priority = f"{cluster.namespace}-low"  # cluster-scoped: one per test namespace
    dedicated = {"key": "e2e.assay.dev/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    values = [
        f"watchNamespaces={{{cluster.namespace}}}",
        f"policy.allowedPriorityClasses={{{priority}}}",
        *(f"policy.allowedTolerations[0].{key}={value}" for key, value in dedicated.items()),
        "policy.defaultQueue=e2e-queue",
        "policy.runnerResources.requests.cpu=100m",
        "policy.runnerResources.limits.memory=1Gi",
        "policy.emptyDirSizeLimit=2Gi",
        "policy.defaultActiveDeadlineSeconds=900",
    ]
    cluster.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_priority_class(priority)))
    cluster.operator.kill()  # one operator per namespace at a time
    admin = OperatorDeployment(cluster.plane, namespace=cluster.namespace, release="placement")
    try:
        helm(
            cluster.plane,
            "install",
            "placement",
            str(CHART),
            "--namespace",
            cluster.namespace,
            "--skip-crds",
            *chart_values(images, *values),
            "--wait",
            "--timeout=180s",
        )
        admin.wait_watching()
        message = refused(
            cluster, "other-priority", dummy_spec(podTemplate={"priorityClassName": "system-node-critical"})
        )
        assert f"(allowed: {priority})" in message
        # The chart's default toleration is replaced by the admin's list, not added to.
        message = refused(cluster, "on-gpus", dummy_spec(podTemplate={"tolerations": [GPU_TOLERATION]}))
        assert "(allowed: e2e.assay.dev/dedicated:NoSchedule)" in message

        allowed = dummy_spec(podTemplate={"priorityClassName": priority, "tolerations": [dedicated]})
        cluster.apply(evaluation_manifest("placed", **allowed))
        (job,) = cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=placed"), timeout=60)
        # In the admin's default queue: created suspended, for Kueue (absent here) to admit.
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "e2e-queue" and job["spec"]["suspend"] is True
        pod = job["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == priority and pod["tolerations"] == [dedicated]
        assert pod["containers"][0]["resources"] == {
            "requests": {"cpu": "100m", "memory": "512Mi"},
            "limits": {"memory": "1Gi"},
        }
        assert {v["emptyDir"].get("sizeLimit") for v in pod["volumes"] if "emptyDir" in v} == {"2Gi"}
        assert job["spec"]["activeDeadlineSeconds"] == 900
    finally:
        helm(cluster.plane, "uninstall", "placement", "--namespace", cluster.namespace, "--wait", "--timeout=120s")
        cluster.plane.kubectl("delete", "priorityclass", priority, "--wait=false", check=False)
        cluster.operator.start()
