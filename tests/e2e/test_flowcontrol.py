"""The chart's API Priority and Fairness objects on a real API server: admitted, not dangling,
and classifying the operator's requests (the API server names the FlowSchema and priority
level of each request in its X-Kubernetes-PF-* response headers): everything the operator's
ServiceAccount asks goes to its own level, its Lease calls to the built-in leader-election.

The suite's control plane runs without priority and fairness (one process less busy on a small
machine); this test starts one of its own with it on, as every Kubernetes 1.29+ API server
has it, and no node (it runs no pod)."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import control_plane as cp
from tests.e2e.conftest import CHART, find_helm, skip_or_fail

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE = "apf", "apf-system"


class FairControlPlane(cp.ControlPlane):
    """The e2e control plane with API Priority and Fairness on, as in a cluster."""

    def _spawn(self, name: str, args: list[str]) -> Any:
        if name == "kube-apiserver":
            args = [a for a in args if not a.startswith("--enable-priority-and-fairness")]
            args.append("--enable-priority-and-fairness=true")
        return super()._spawn(name, args)


@pytest.fixture(scope="module")
def fair_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cp.ControlPlane]:
    bin_dir = cp.cache_dir() / cp.k8s_version() / "bin"
    if not (bin_dir / ".complete").is_file():
        skip_or_fail(f"Kubernetes {cp.k8s_version()} binaries are not built yet: run tests/e2e/cluster/build.sh")
    plane = FairControlPlane(Path(tmp_path_factory.mktemp("apf-k8s")), bin_dir=bin_dir)
    plane.start()
    yield plane
    plane.stop()


def _rendered() -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            find_helm(),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--api-versions",
            "flowcontrol.apiserver.k8s.io/v1/FlowSchema",
            "--show-only",
            "templates/flowcontrol.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _classified(plane: cp.ControlPlane, path: str, token: str) -> tuple[str, str]:
    """(FlowSchema UID, priority level UID) the API server gave one request of `token`'s."""
    request = urllib.request.Request(plane.server + path, headers={"Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            headers = response.headers
    except urllib.error.HTTPError as refused:  # the account has no RBAC here: 403, classified all the same
        headers = refused.headers
    return headers.get("X-Kubernetes-PF-FlowSchema-UID", ""), headers.get("X-Kubernetes-PF-PriorityLevel-UID", "")


def _uid(plane: cp.ControlPlane, kind: str, name: str) -> str:
    return json.loads(plane.kubectl("get", kind, name, "-o", "json").stdout)["metadata"]["uid"]


def test_the_api_server_admits_the_charts_flowschemas_and_classifies_the_operator_by_them(
    fair_plane: cp.ControlPlane,
) -> None:
    plane = fair_plane
    documents = _rendered()
    assert sorted(d["kind"] for d in documents) == ["FlowSchema", "FlowSchema", "PriorityLevelConfiguration"]
    schemas = {d["metadata"]["name"]: d for d in documents if d["kind"] == "FlowSchema"}
    account = schemas[f"{RELEASE}-assay-operator"]["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["name"]
    plane.kubectl("create", "namespace", NAMESPACE)
    try:
        plane.kubectl("create", "serviceaccount", account, "-n", NAMESPACE)
        applied = plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(documents))
        assert applied.stdout.count("serverside-applied") == 3, applied.stdout

        deadline = time.monotonic() + 60
        while True:  # the API server's config controller marks each schema's level found
            dangling = {
                name: next(
                    (c["status"] for c in (s.get("status") or {}).get("conditions", ()) if c["type"] == "Dangling"),
                    None,
                )
                for name in schemas
                for s in [json.loads(plane.kubectl("get", "flowschema", name, "-o", "json").stdout)]
            }
            if set(dangling.values()) == {"False"} or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert set(dangling.values()) == {"False"}, dangling

        token = plane.kubectl("create", "token", account, "-n", NAMESPACE, "--duration=10m").stdout.strip()
        own = (
            _uid(plane, "flowschema", f"{RELEASE}-assay-operator"),
            _uid(plane, "prioritylevelconfiguration", f"{RELEASE}-assay-operator"),
        )
        elections = (
            _uid(plane, "flowschema", f"{RELEASE}-assay-operator-leader-election"),
            _uid(plane, "prioritylevelconfiguration", "leader-election"),
        )
        for path in (
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            "/apis/assay.dev/v1alpha1/evaluations",
            "/apis/batch/v1/namespaces/team/jobs",
        ):
            assert _classified(plane, path, token) == own, path
        assert (
            _classified(plane, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/assay", token) == elections
        )
        # Another account's requests are not the operator's.
        plane.kubectl("create", "serviceaccount", "someone-else", "-n", NAMESPACE)
        other = plane.kubectl("create", "token", "someone-else", "-n", NAMESPACE, "--duration=10m").stdout.strip()
        assert _classified(plane, f"/api/v1/namespaces/{NAMESPACE}/configmaps", other)[0] not in {own[0], elections[0]}
    finally:  # the plane goes with the module; a failure's objects stay for its diagnostics until then
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
