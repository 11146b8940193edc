"""Least privilege, checked by the API server's RBAC authorizer: the runner's ServiceAccount may
read and patch its own Evaluation (and that one's status) and nothing else; the chart's
namespace-scoped Roles are enough for the operator."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.cluster.control_plane import kubeconfig, write_kubeconfig
from tests.e2e.conftest import (
    CHART,
    FORBIDDEN,
    RBAC_KINDS,
    Cluster,
    OperatorDeployment,
    chart_values,
    evaluation_manifest,
    helm,
    render_chart,
)
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e


def _can_i(cluster: Cluster, *args: str, account: str) -> str:
    result = cluster.kubectl(
        "auth", "can-i", *args, f"--as=system:serviceaccount:{cluster.namespace}:{account}", check=False
    )
    return result.stdout.strip()


def test_the_runner_account_reaches_its_own_evaluation_only(cluster: Cluster, tmp_path: Path) -> None:
    # Suspended: the operator creates the runner's account and Role, no pod needs to run.
    for name in ("mine", "other"):
        cluster.apply(evaluation_manifest(name, **dummy_spec(suspend=True)))
    cluster.wait_for(
        "the runner Roles",
        lambda: len(cluster.items("rolebindings", "app.kubernetes.io/managed-by=assay-operator")) == 2,
    )
    account = cluster.runner_account("mine")

    assert _can_i(cluster, "get", "evaluations/mine", account=account) == "yes"
    # Status only: a runner that could patch its own spec could change its image or token Secret.
    assert _can_i(cluster, "patch", "evaluations/mine", account=account) == "no"
    assert _can_i(cluster, "patch", "evaluations/mine", "--subresource=status", account=account) == "yes"
    assert _can_i(cluster, "get", "evaluations/other", account=account) == "no"
    assert _can_i(cluster, "patch", "evaluations/other", "--subresource=status", account=account) == "no"
    for verb_resource in (
        ["list", "evaluations"],
        ["delete", "evaluations/mine"],
        ["create", "jobs"],
        ["get", "secrets"],
        ["list", "pods"],
        ["create", "roles"],
    ):
        assert _can_i(cluster, *verb_resource, account=account) == "no", verb_resource

    # A real attempt with a real token of that account.
    token = cluster.kubectl("create", "token", account, "--duration=10m").stdout.strip()
    runner = write_kubeconfig(
        tmp_path / "runner.kubeconfig",
        kubeconfig(
            server=cluster.plane.server, ca_file=cluster.plane.ca_file, token=token, namespace=cluster.namespace
        ),
    )

    def as_runner(*args: str) -> subprocess.CompletedProcess[str]:
        return cluster.kubectl(*args, kubeconfig=runner, check=False)

    patch = json.dumps({"status": {"progress": {"requestsDone": 1, "requestsTotal": 2, "summary": "50%"}}})
    assert as_runner("get", "evaluation", "mine", "-o", "name").returncode == 0
    # The status patch as the runner's status sink sends it (kubectl would GET the status
    # subresource first, which the Role does not need to allow).
    from kubernetes import client
    from kubernetes import config as kube_config

    configuration = client.Configuration()
    kube_config.load_kube_config(config_file=str(runner), client_configuration=configuration)
    client.CustomObjectsApi(client.ApiClient(configuration)).patch_namespaced_custom_object_status(
        "assay.dev", "v1alpha1", cluster.namespace, "evaluations", "mine", json.loads(patch)
    )
    assert cluster.evaluation("mine")["status"]["progress"]["requestsDone"] == 1
    for attempt in (
        ["get", "evaluation", "other"],
        ["patch", "evaluation", "other", "--subresource=status", "--type=merge", "-p", patch],
        ["patch", "evaluation", "other", "--type=merge", "-p", '{"spec": {"limit": 1}}'],
        ["patch", "evaluation", "mine", "--type=merge", "-p", '{"spec": {"image": "attacker/runner:1"}}'],
        ["get", "evaluations"],
    ):
        denied = as_runner(*attempt)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, (attempt, denied.stderr)
    assert "progress" not in (cluster.evaluation("other").get("status") or {})


def test_a_namespace_scoped_install_runs_on_its_roles_alone(cluster: Cluster, images: dict[str, str]) -> None:
    """`helm install` with watchNamespaces: a Role per namespace instead of a ClusterRole, enough to run."""
    docs = [
        d
        for d in render_chart(f"watchNamespaces={{{cluster.namespace}}}", release="scoped")
        if d["kind"] in RBAC_KINDS - {"CustomResourceDefinition"}
    ]
    # The watched namespace's Role, and the leader Lease's Role in the release's namespace; cluster-wide
    # only what a secured /metrics needs (TokenReviews, and the URL /metrics for its readers).
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "ServiceAccount",
    ]
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"] == "Role") == ["scoped-assay", "scoped-assay-leader"]
    assert sorted(d["metadata"]["name"] for d in docs if d["kind"].startswith("Cluster")) == [
        "scoped-assay-metrics-auth",
        "scoped-assay-metrics-auth",
        "scoped-assay-metrics-reader",
    ]
    cluster.operator.kill()  # one operator per namespace at a time
    scoped = OperatorDeployment(cluster.plane, namespace=cluster.namespace, release="scoped")
    try:
        helm(
            cluster.plane,
            "install",
            "scoped",
            str(CHART),
            "--namespace",
            cluster.namespace,
            "--skip-crds",
            *chart_values(images, f"watchNamespaces={{{cluster.namespace}}}"),
            "--wait",
            "--timeout=180s",
        )
        scoped.wait_watching()
        bindings = cluster.items("clusterrolebindings", "app.kubernetes.io/instance=scoped")
        assert [b["metadata"]["name"] for b in bindings] == ["scoped-assay-metrics-auth"]
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 120))
        cluster.apply(evaluation_manifest("scoped", **dummy_spec()))
        status = cluster.wait("scoped", "Succeeded", timeout=180)["status"]
        assert status["results"]["arc_easy"]
        cluster.wait_for("the Events", lambda: {"JobCreated", "Succeeded"} <= set(cluster.events("scoped")))
        denied = [line for line in scoped.logs(since=since).splitlines() if FORBIDDEN.search(line)]
        assert not denied, "the namespace-scoped operator was denied by RBAC:\n" + "\n".join(denied[:10])
    finally:
        helm(cluster.plane, "uninstall", "scoped", "--namespace", cluster.namespace, "--wait", "--timeout=120s")
        cluster.operator.start()
