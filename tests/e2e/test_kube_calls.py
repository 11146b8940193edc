"""The operator's API calls (`assay.operator.kube.kube`) against the real API server.

They send plain dicts to fixed REST paths through the operator's own client (`api_client`,
credentials read from a kubeconfig by `credentials`); each call's answer and error mapping
is checked here, where a wrong path or verb would show (the unit tests replace the server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.kube import api_errors
from assay.operator.kube import api_client, kube
from tests.e2e.cluster import control_plane as cp

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kube-calls"


@pytest.fixture(scope="module")
def api(control_plane: cp.ControlPlane) -> Iterator[None]:
    """`kube` configured as the operator configures it, from a kubeconfig (the admin's here)."""
    control_plane.kubectl("apply", "-f", str(REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml"))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/evaluations.assay.dev")
    control_plane.kubectl("create", "namespace", NAMESPACE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api_client, "_loaded", None)  # the credentials before, back after
        api_client.load_config(str(control_plane.admin_kubeconfig))
        try:
            yield
        finally:
            api_client.client.cache_clear()
        control_plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def _config_map(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "data": {"k": "v"},
    }


def test_create_get_list_patch_and_delete_on_the_real_api_server(api: None) -> None:
    assert kube.create(_config_map("a", team="x")) is True
    assert kube.create(_config_map("a", team="x")) is False  # 409: already there, which is success too
    kube.create(_config_map("b", team="y"))
    assert kube.get("ConfigMap", "v1", namespace=NAMESPACE, name="a")["data"] == {"k": "v"}
    assert kube.get("ConfigMap", "v1", namespace=NAMESPACE, name="missing") is None
    listed = kube.list_objects("ConfigMap", "v1", namespace=NAMESPACE, label_selector="team=x")
    assert [(o["kind"], o["metadata"]["name"]) for o in listed] == [("ConfigMap", "a")]

    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "ev", "namespace": NAMESPACE},
        "spec": {"model": "dummy", "tasks": ["arc_easy"]},
    }
    assert kube.create(evaluation)
    written = kube.patch_evaluation_status(
        namespace=NAMESPACE, name="ev", status={"phase": "Pending", "jobName": "ev-g1"}
    )
    assert written["status"]["jobName"] == "ev-g1" and written["metadata"]["resourceVersion"]
    assert kube.get_evaluation(namespace=NAMESPACE, name="ev")["status"]["phase"] == "Pending"
    assert kube.get_evaluation(namespace=NAMESPACE, name="gone") is None

    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": NAMESPACE},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "localhost/none:x"}]}
            },
        },
    }
    assert kube.create(job)
    kube.patch_job_suspend(namespace=NAMESPACE, name="j", suspend=False)
    kube.end_job(namespace=NAMESPACE, name="j")
    spec = kube.get("Job", "batch/v1", namespace=NAMESPACE, name="j")["spec"]
    assert spec["suspend"] is False and spec["activeDeadlineSeconds"] == 1

    kube.create_event(written, type="Normal", reason="Checked", message="From the kube-calls test.")
    events = kube.list_events(namespace=NAMESPACE, kind="Evaluation", name="ev")
    assert [e["reason"] for e in events] == ["Checked"]

    kube.delete("ConfigMap", "v1", namespace=NAMESPACE, name="a")
    kube.delete("ConfigMap", "v1", namespace=NAMESPACE, name="a")  # 404: nothing to do
    assert kube.get("ConfigMap", "v1", namespace=NAMESPACE, name="a") is None


def test_an_error_names_its_status_and_the_servers_reason(api: None) -> None:
    bad = _config_map("Not_A_Valid_Name")
    with pytest.raises(api_errors.ApiError) as raised:
        kube.create(bad)
    assert (raised.value.code, raised.value.reason) == (422, "Invalid") and "Not_A_Valid_Name" in raised.value.message


def test_leader_elections_lease_calls_on_the_real_api_server(api: None) -> None:
    """What `runtime.leader` relies on: AlreadyExists for a second create, Conflict for an update
    of a Lease read before another write, NotFound for none; each call within its timeout."""
    import datetime

    from assay.operator.kube import leases

    calls = leases.Leases()
    now = datetime.datetime.now(datetime.timezone.utc)
    first = leases.new_lease(namespace=NAMESPACE, name="leader", identity="a", lease_seconds=15, now=now)
    created = calls.create(first, timeout=5.0)
    assert created["spec"]["holderIdentity"] == "a" and created["metadata"]["resourceVersion"]
    with pytest.raises(api_errors.ApiError) as raised:
        calls.create(first, timeout=5.0)
    assert raised.value.reason == api_errors.ALREADY_EXISTS
    read = calls.get(namespace=NAMESPACE, name="leader", timeout=5.0)
    stale = calls.get(namespace=NAMESPACE, name="leader", timeout=5.0)
    read["spec"]["holderIdentity"] = "b"
    assert calls.update(read, timeout=5.0)["spec"]["holderIdentity"] == "b"
    stale["spec"]["holderIdentity"] = "c"
    with pytest.raises(api_errors.ApiError) as raised:
        calls.update(stale, timeout=5.0)
    assert (raised.value.code, raised.value.reason) == (409, api_errors.CONFLICT)
    with pytest.raises(api_errors.ApiError) as raised:
        calls.get(namespace=NAMESPACE, name="none", timeout=5.0)
    assert raised.value.reason == api_errors.NOT_FOUND


def test_a_child_is_written_only_while_it_is_the_evaluations(api: None, control_plane: cp.ControlPlane) -> None:
    """`runtime.owned` against kube-apiserver: a JSON patch whose test fails is 422 Invalid and
    changes nothing; a child of the Evaluation is created and later tightened in one request;
    a Role someone else made under its name is refused and left as it was."""
    from assay.operator.build import builders, runner_identity
    from assay.operator.build import children as run_children
    from assay.operator.runtime import owned

    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "owner", "namespace": NAMESPACE},
        "spec": {"model": "dummy", "tasks": ["arc_easy"]},
    }
    kube.create(evaluation)
    uid = kube.get_evaluation(namespace=NAMESPACE, name="owner")["metadata"]["uid"]  # a real owner: no GC
    ref = builders.EvaluationRef(name="owner", namespace=NAMESPACE, uid=uid, generation=1)
    # A Role as a child of the Evaluation (the operator's own children are Jobs, Services and
    # NetworkPolicies; a Role's rules show a write most plainly), under a name the operator never uses.
    name = f"owner-access-{builders.owner_mark(ref)}"
    rules = runner_identity.role(NAMESPACE)["rules"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": builders.child_metadata(ref, name),
    }
    role["rules"] = rules
    assert owned.ensure(role, uid=uid) is True
    # Under a generation the Evaluation never has: the session's operator makes generation 1's itself.
    unused = builders.EvaluationRef(name="owner", namespace=NAMESPACE, uid=uid, generation=7)
    policy = run_children.network_policy(unused, job=builders.job_name(unused))
    assert owned.ensure(policy, uid=uid) is True  # the manifest as kube-apiserver validates it
    assert owned.ensure(policy, uid=uid, likely=True) is False

    wide = [{"apiGroups": ["assay.dev"], "resources": ["evaluations"], "verbs": ["get", "patch"]}]
    control_plane.kubectl("-n", NAMESPACE, "patch", "role", name, "--type=merge", "-p", json.dumps({"rules": wide}))
    assert owned.ensure(role, uid=uid, likely=True) is False
    assert kube.get("Role", role["apiVersion"], namespace=NAMESPACE, name=name)["rules"] == role["rules"]

    kube.delete("Role", role["apiVersion"], namespace=NAMESPACE, name=name)
    foreign = {"apiVersion": role["apiVersion"], "kind": "Role", "metadata": {"name": name, "namespace": NAMESPACE}}
    kube.create({**foreign, "rules": wide})
    before = kube.get("Role", role["apiVersion"], namespace=NAMESPACE, name=name)
    with pytest.raises(api_errors.ApiError) as raised:
        kube.json_patch(role, [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": uid}])
    assert (raised.value.code, raised.value.reason) == (422, api_errors.INVALID)
    for likely in (False, True):
        with pytest.raises(owned.NotOwned, match=f"^Role {name} exists and is not this Evaluation's;"):
            owned.ensure(role, uid=uid, likely=likely)
    assert kube.get("Role", role["apiVersion"], namespace=NAMESPACE, name=name) == before
