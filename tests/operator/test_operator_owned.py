"""The operator changes only what it owns: an object under a child's name that is not this
Evaluation's fails the run as InvalidSpec, and is left exactly as it was.

Over HTTP to the local API server (tests/operator/local_apiserver.py), which applies JSON
patches all or none and answers a failed `test` with 422 Invalid as kube-apiserver does;
tests/e2e/test_owned_children.py does the same against kube-apiserver on the real node.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from assay import spec as spec_module
from assay.operator.build import builders
from assay.operator.build import children as run_children
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.kube import kube
from assay.operator.runtime import converge, owned
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
EVALUATION = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations/gitlab"
UID = "5d1f6c1e-8a0b-4f55-9d7e-2f1c0f9b7a11"
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 2, "gpusPerNode": 0}}
REF = builders.EvaluationRef(name="gitlab", namespace="evals", uid=UID, generation=1)
KINDS = ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service", "NetworkPolicy", "Job"]


def _evaluation(api: LocalApiServer) -> dict[str, Any]:
    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "gitlab", "namespace": "evals", "uid": UID, "generation": 1},
        "spec": SPEC,
    }
    api.put(evaluation, EVALUATION)
    return evaluation


def _carry_out(evaluation: dict[str, Any]) -> Any:
    spec = spec_module.parse_spec(evaluation["spec"])
    return converge.carry_out(
        evaluation, spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=kube.create_event
    )


def _children() -> dict[str, dict[str, Any]]:
    return {
        c["kind"]: c
        for c in run_children.children(
            REF, spec_module.parse_spec(SPEC), runner=RunnerSettings(default_image="runner:1")
        )
    }


def _path(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    return kube.path(manifest["apiVersion"], manifest["kind"], namespace=meta["namespace"], name=meta["name"])


def _foreign(kind: str, how: str) -> dict[str, Any]:
    """An object under the name the operator gives its `kind` child that is not this Evaluation's:
    someone's own (no reference), another Evaluation's, or ours in name only (no managed-by label)."""
    child = copy.deepcopy(_children()[kind])
    meta = child["metadata"]
    if how == "someone's":
        meta.pop("ownerReferences")
        meta["labels"] = {"app": "gitlab"}
        child.update({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]} if kind == "Role" else {})
    elif how == "another Evaluation's":
        meta["ownerReferences"][0]["uid"] = "another-uid"
    else:
        del meta["labels"][builders.LABEL_MANAGED_BY]
    meta["resourceVersion"] = "7"
    return child


@pytest.mark.parametrize("decided_before", [False, True], ids=["new", "decided-before"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_child_name_held_by_another_object_fails_the_run_and_changes_nothing(
    api: LocalApiServer, kind: str, decided_before: bool
) -> None:
    evaluation = _evaluation(api)
    if decided_before:  # a run decided before: the runner's access is patched first, not created
        evaluation["status"] = {"jobName": "gitlab-g0-00000"}
    foreign = _foreign(kind, "someone's")
    api.put(foreign, _path(foreign))
    steps = _carry_out(evaluation)
    name = foreign["metadata"]["name"]
    message = (
        f"{kind} {name} exists and is not this Evaluation's; the operator changes only objects it made for this "
        f"Evaluation: delete or rename that {kind}, or delete and create the Evaluation again (its children's "
        "names carry its uid)."
    )
    stored = api.get(EVALUATION)
    assert stored is not None
    assert (stored["status"]["phase"], stored["status"]["reason"], stored["status"]["message"]) == (
        "Failed",
        "InvalidSpec",
        message,
    )
    assert steps.refused == message
    assert api.get(_path(foreign)) == foreign  # not a field changed, not its resourceVersion
    warnings = [o for p, o in api.objects.items() if "/events/" in p and o.get("reason") == "InvalidSpec"]
    assert [w["message"] for w in warnings] == [message]
    job = _children()["Job"]
    if kind != "Job":
        assert api.get(_path(job)) is None  # no run starts beside an object it does not own
    # Decided again (a retry, a restarted operator): the run stays failed, nothing more is tried.
    requests = len(api.requests)
    assert _carry_out(api.get(EVALUATION) or {}).is_noop
    assert {method for method, _ in api.requests[requests:]} <= {"GET"}  # its lists, and no write


@pytest.mark.parametrize("how", ["another Evaluation's", "no managed-by label"])
def test_a_reference_to_another_evaluation_or_a_missing_label_is_not_ours(api: LocalApiServer, how: str) -> None:
    foreign = _foreign("Role", how)
    api.put(foreign, _path(foreign))
    steps = _carry_out(_evaluation(api))
    assert steps.refused is not None and steps.refused.startswith(f"Role {foreign['metadata']['name']} exists")
    assert api.get(_path(foreign)) == foreign


def test_a_new_evaluation_costs_one_create_per_child_and_a_decision_again_one_patch(api: LocalApiServer) -> None:
    """Checking ownership adds no request where a decision usually goes: the first decision
    creates each child, a decision of the same run again patches the kept-up-to-date ones in
    one request each (the test and the write together), and asks for nothing it listed."""
    evaluation = _evaluation(api)
    _carry_out(evaluation)
    creates = [p for m, p in api.requests if m == "POST" and not p.endswith("/events")]
    made = {c["kind"]: c for c in _children().values()}
    assert len(creates) == len(KINDS) and [m for m, _ in api.requests].count("GET") == 0
    assert all(api.get(_path(child)) is not None for child in made.values())
    # The Role an older operator made wider is brought back to today's rules, in the same one request.
    role = api.get(_path(made["Role"]))
    assert role is not None
    role["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    api.requests.clear()
    _carry_out(api.get(EVALUATION) or {})
    patched = sorted(p.rsplit("/", 2)[-2] for m, p in api.requests if m == "PATCH")
    assert patched == ["configmaps", "networkpolicies", "rolebindings", "roles", "serviceaccounts"]
    assert [m for m, _ in api.requests if m == "POST"] == []
    assert [p for m, p in api.requests if m == "GET"] == [  # the two lists of every decided run
        "/apis/batch/v1/namespaces/evals/jobs",
        "/api/v1/namespaces/evals/services",
    ]
    assert (api.get(_path(made["Role"])) or {})["rules"] == made["Role"]["rules"]


def test_a_child_of_ours_with_its_reference_further_down_the_list_is_still_written(api: LocalApiServer) -> None:
    """The one-request test looks at the first reference; where another tool put one before
    ours, the object is read once, found ours, and written on its resourceVersion."""
    role = copy.deepcopy(_children()["Role"])
    role["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x"})
    role["rules"] = []
    role["metadata"]["resourceVersion"] = "3"
    api.put(role, _path(role))
    made = owned.ensure(_children()["Role"], uid=UID, likely=True)
    stored = api.get(_path(role))
    assert made is False and stored is not None and stored["rules"] == _children()["Role"]["rules"]
    assert stored["metadata"]["ownerReferences"] == role["metadata"]["ownerReferences"]


def test_a_child_that_went_missing_is_made_again(api: LocalApiServer) -> None:
    config_map = _children()["ConfigMap"]
    assert owned.ensure(config_map, uid=UID, likely=True) is True  # patch: NotFound, then create
    assert [m for m, _ in api.requests] == ["PATCH", "POST"]
    assert owned.ensure(config_map, uid=UID, likely=False) is False  # create: AlreadyExists, then patch
    assert [m for m, _ in api.requests][2:] == ["POST", "PATCH"]


def test_owned_by_needs_the_controller_reference_and_the_label() -> None:
    child = _children()["Role"]
    assert owned.owned_by(child, UID)
    assert not owned.owned_by(child, "another-uid")
    not_controller = copy.deepcopy(child)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not owned.owned_by(not_controller, UID)
    unlabelled = copy.deepcopy(child)
    unlabelled["metadata"]["labels"][builders.LABEL_MANAGED_BY] = "helm"
    assert not owned.owned_by(unlabelled, UID)


def test_a_run_from_before_the_uid_marks_keeps_its_job_across_an_operator_upgrade(api: LocalApiServer) -> None:
    """An Evaluation running under an older operator, its children named without the mark
    (`gitlab-g1`, `gitlab-runner`): its next decision finds its Job by the spec's hash, keeps
    it and its spec ConfigMap, and makes the new-named access and the run's NetworkPolicy
    beside the old ones, which stay the Evaluation's (garbage-collected with it)."""
    evaluation = _evaluation(api)
    old = {kind: copy.deepcopy(child) for kind, child in _children().items()}
    for kind, child in old.items():
        suffix = "-spec" if kind == "ConfigMap" else ""
        child["metadata"]["name"] = (
            "gitlab-runner" if kind in run_children.PER_EVALUATION_KINDS else "gitlab-g1"
        ) + suffix
        child["metadata"]["resourceVersion"] = "1"
    old["Job"]["spec"]["template"]["spec"]["serviceAccountName"] = "gitlab-runner"
    del old["NetworkPolicy"]  # older operators made none
    for child in old.values():
        api.put(child, _path(child))
    evaluation["status"] = {"jobName": "gitlab-g1", "observedGeneration": 1, "phase": "Running"}
    api.put(evaluation, EVALUATION)
    steps = _carry_out(evaluation)
    assert not steps.new_run and steps.refused is None and not steps.delete_jobs
    assert (api.get(EVALUATION) or {})["status"]["jobName"] == "gitlab-g1"
    created = [p.rsplit("/", 1)[-1] for m, p in api.requests if m == "POST" and "/events" not in p]
    assert created == ["serviceaccounts", "roles", "rolebindings", "networkpolicies"]
    for kind in run_children.PER_EVALUATION_KINDS:  # the new access, under the new name
        assert api.get(_path(_children()[kind])) is not None
    fence = api.get(kube.path("networking.k8s.io/v1", "NetworkPolicy", namespace="evals", name="gitlab-g1"))
    assert fence is not None and fence["spec"]["podSelector"]["matchLabels"] == {builders.LABEL_JOB: "gitlab-g1"}
    assert api.get(_path(old["Job"])) == old["Job"]  # running on, as the old ServiceAccount
    for kind in run_children.PER_EVALUATION_KINDS:
        assert api.get(_path(old[kind])) == old[kind]  # still the Evaluation's, for the garbage collector
