"""Least privilege, checked by kube-apiserver itself: every runner of a namespace runs as its
ServiceAccount `assay-runner`, which RBAC lets patch Evaluations' status and nothing else (no
`get` of any object: not an Evaluation, not a ConfigMap, not a Secret), and which the chart's
ValidatingAdmissionPolicy lets patch only the status of the Evaluation whose run its pod
belongs to, by the pod its token is bound to; the chart's namespace-scoped Roles are enough
for the operator."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.control_plane import kubeconfig, write_kubeconfig
from tests.e2e.conftest import (
    CHART,
    FORBIDDEN,
    RBAC_KINDS,
    RELEASE,
    Cluster,
    OperatorDeployment,
    chart_values,
    evaluation_manifest,
    helm,
    render_chart,
)
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

POLICY = f"{RELEASE}-runner-writes"


def _can_i(cluster: Cluster, *args: str, account: str) -> str:
    result = cluster.kubectl(
        "auth", "can-i", *args, f"--as=system:serviceaccount:{cluster.namespace}:{account}", check=False
    )
    return result.stdout.strip()


def _pod(cluster: Cluster, name: str, image: str) -> None:
    """A pod of the runner account under `name`, as the Job controller would name one; for no
    node, so it never runs: it is only what a token is bound to."""
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "assay-runner",
            "nodeSelector": {"assay.dev/no-such-node": "true"},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": image, "securityContext": security}],
        },
    }
    cluster.apply(pod)


def _as(cluster: Cluster, tmp_path: Path, token: str, name: str) -> Any:
    """A client (assay.kube, the status sink's) with `token`, sending status patches as the runner's sink does."""
    from assay.kube import api_session, credentials
    from assay.kube import client as kube_client

    path = write_kubeconfig(
        tmp_path / f"{name}.kubeconfig",
        kubeconfig(
            server=cluster.plane.server, ca_file=cluster.plane.ca_file, token=token, namespace=cluster.namespace
        ),
    )
    return path, kube_client.ApiClient(api_session.Session(credentials.load(str(path))))


def _patch_status(api: Any, cluster: Cluster, name: str, status: dict[str, Any]) -> tuple[int, str]:
    """(0, "") when written, else (HTTP status, the API server's message)."""
    from assay.kube import api_errors

    path = f"/apis/assay.dev/v1alpha1/namespaces/{cluster.namespace}/evaluations/{name}/status"
    try:
        api.request("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
    except api_errors.ApiError as error:
        return error.code, error.message
    return 0, ""


def test_the_runner_policy_is_admitted_and_type_checks(cluster: Cluster) -> None:
    """The chart's runner write policy and its binding, as kube-apiserver holds them: its CEL
    checked against the Evaluation's schema without a warning."""
    binding = cluster.plane.kubectl("get", "validatingadmissionpolicybinding", POLICY, "-o", "json")
    assert json.loads(binding.stdout)["spec"] == {"policyName": POLICY, "validationActions": ["Deny"]}

    def checked() -> dict[str, Any] | None:
        policy = json.loads(cluster.plane.kubectl("get", "validatingadmissionpolicy", POLICY, "-o", "json").stdout)
        status = policy.get("status") or {}
        return status if status.get("observedGeneration") == policy["metadata"]["generation"] else None

    status = cluster.wait_for("the policy's type check", checked, timeout=120)
    assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
    assert [c for c in status.get("conditions") or () if c.get("status") == "False"] == [], status


def test_a_runner_writes_its_own_runs_status_and_reads_nothing(
    cluster: Cluster, images: dict[str, str], tmp_path: Path
) -> None:
    # Suspended: the operator accepts each run (status.jobName) and makes the namespace's runner
    # identity with the first Job; no runner pod runs.
    for name in ("mine", "other"):
        cluster.apply(evaluation_manifest(name, **dummy_spec(suspend=True)))
    for name in ("mine", "other"):
        cluster.wait_for(f"the Job of {name}", lambda: cluster.items("jobs", f"assay.dev/evaluation={name}"))  # noqa: B023 - called within this iteration
    cluster.wait_for(
        "the runner identity", lambda: cluster.items("rolebindings", "app.kubernetes.io/name=assay-runner")
    )
    account = cluster.runner_account("mine")
    assert account == "assay-runner"
    # One identity for the namespace, none per run.
    assert [
        a["metadata"]["name"] for a in cluster.items("serviceaccounts", "app.kubernetes.io/managed-by=assay-operator")
    ] == [account]
    assert cluster.items("configmaps", "app.kubernetes.io/managed-by=assay-operator") == []

    # RBAC: status patches, nothing else. No read at all: there is no spec to read but its own pod's.
    assert _can_i(cluster, "patch", "evaluations/mine", "--subresource=status", account=account) == "yes"
    for verb_resource in (
        ["get", "evaluations/mine"],
        ["get", "evaluations/other"],
        ["list", "evaluations"],
        ["patch", "evaluations/mine"],  # its spec: its image, its token Secret
        ["delete", "evaluations/mine"],
        ["get", "configmaps"],
        ["list", "configmaps"],
        ["get", "secrets"],
        ["list", "secrets"],
        ["list", "pods"],
        ["create", "jobs"],
        ["create", "roles"],
        ["create", "serviceaccounts", "--subresource=token"],
    ):
        assert _can_i(cluster, *verb_resource, account=account) == "no", verb_resource

    mine_job, other_job = cluster.job_name("mine"), cluster.job_name("other")
    assert cluster.evaluation("mine")["status"]["jobName"] == mine_job
    # The runner pod of mine's run, and of an Evaluation a tenant named after mine's Job: its pods'
    # names begin with `<mine's job>-`.
    cluster.apply(evaluation_manifest(mine_job, **dummy_spec(suspend=True)))
    lookalike_job = cluster.wait_for(
        "the look-alike's run", lambda: (cluster.evaluation(mine_job).get("status") or {}).get("jobName")
    )
    mine_pod, lookalike_pod = f"{mine_job}-0-x7k2p", f"{lookalike_job}-0-x7k2p"
    assert lookalike_pod.startswith(f"{mine_job}-")
    for pod in (mine_pod, lookalike_pod):
        _pod(cluster, pod, images["pause"])

    def token(pod: str | None) -> str:
        bound = ["--bound-object-kind=Pod", f"--bound-object-name={pod}"] if pod else []
        return cluster.kubectl("create", "token", account, "--duration=10m", *bound).stdout.strip()

    kubeconfig_path, mine = _as(cluster, tmp_path, token(mine_pod), "mine")
    progress = {"progress": {"requestsDone": 1, "requestsTotal": 2, "summary": "50%"}}
    assert _patch_status(mine, cluster, "mine", progress) == (0, "")
    assert cluster.evaluation("mine")["status"]["progress"]["requestsDone"] == 1

    # Another Evaluation's status: refused by the runner policy, which the refusal names.
    for target, runner in (("other", mine), (mine_job, mine)):
        code, said = _patch_status(runner, cluster, target, progress)
        assert code == 403 and POLICY in said and "a runner writes the status of its own run only" in said, said
    _, lookalike = _as(cluster, tmp_path, token(lookalike_pod), "lookalike")
    code, said = _patch_status(lookalike, cluster, "mine", progress)
    assert code == 403 and POLICY in said and f"pod {lookalike_pod} is not a pod of the Job {mine_job}" in said, said
    # Its own run's binding is the operator's to write.
    code, said = _patch_status(mine, cluster, "mine", {"jobName": other_job})
    assert code == 403 and "status.jobName is the operator's to write" in said, said
    # A token of the account bound to no pod writes nothing.
    _, unbound = _as(cluster, tmp_path, token(None), "unbound")
    code, said = _patch_status(unbound, cluster, "mine", {"progress": {"requestsDone": 2, "requestsTotal": 2}})
    assert code == 403 and "bound to no pod" in said, said
    for name in ("other", mine_job):
        assert "progress" not in (cluster.evaluation(name).get("status") or {})
    assert cluster.evaluation("mine")["status"]["jobName"] == mine_job
    assert cluster.evaluation("mine")["status"]["progress"]["requestsDone"] == 1

    # With the same token: no read of any spec, ConfigMap or Secret, and no write of a spec.
    def as_runner(*args: str) -> subprocess.CompletedProcess[str]:
        return cluster.kubectl(*args, kubeconfig=kubeconfig_path, check=False)

    for attempt in (
        ["get", "evaluation", "mine"],
        ["get", "evaluation", "other"],
        ["get", "evaluations"],
        ["get", "configmaps"],
        ["get", "secrets"],
        ["patch", "evaluation", "mine", "--type=merge", "-p", '{"spec": {"image": "attacker/runner:1"}}'],
    ):
        denied = as_runner(*attempt)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, (attempt, denied.stderr)


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
