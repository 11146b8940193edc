"""The operator changes only what it owns: an object under a child's name that is not this
Evaluation's, or under the name of the namespace's runner identity (`assay-runner`) that is
not the operator's, fails the run as InvalidSpec, and is left exactly as it was.

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
from assay.operator.build import builders, runner_identity
from assay.operator.build import children as run_children
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.kube import kube
from assay.operator.runtime import converge, namespace_identity, owned
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
EVALUATION = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations/gitlab"
UID = "5d1f6c1e-8a0b-4f55-9d7e-2f1c0f9b7a11"
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 2, "gpusPerNode": 0}}
REF = builders.EvaluationRef(name="gitlab", namespace="evals", uid=UID, generation=1)
KINDS = ["Service", "NetworkPolicy", "Job"]
"""A multi-node run's children; its runner identity is the namespace's."""
IDENTITY = {m["kind"]: m for m in runner_identity.manifests("evals")}


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
    if decided_before:  # a run decided before: its Jobs and Services are listed first
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
    foreign = _foreign("NetworkPolicy", how)
    api.put(foreign, _path(foreign))
    steps = _carry_out(_evaluation(api))
    assert steps.refused is not None and steps.refused.startswith(f"NetworkPolicy {foreign['metadata']['name']} exists")
    assert api.get(_path(foreign)) == foreign


@pytest.mark.parametrize("kind", ["ServiceAccount", "Role", "RoleBinding"])
def test_a_runner_identity_that_is_not_the_operators_fails_the_run_and_changes_nothing(
    api: LocalApiServer, kind: str
) -> None:
    """`assay-runner` made by someone else (no managed-by label): every runner of the namespace
    would run as it, with whatever it is bound to. The run fails naming it; it stays as it was."""
    foreign = copy.deepcopy(IDENTITY[kind])
    foreign["metadata"]["labels"] = {"app": "someone"}
    foreign["metadata"]["resourceVersion"] = "7"
    if kind == "Role":
        foreign["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    api.put(foreign, _path(foreign))
    steps = _carry_out(_evaluation(api))
    message = (
        f"{kind} assay-runner exists and is not the Assay operator's (it lacks the label "
        "app.kubernetes.io/managed-by=assay-operator); the operator runs every runner of the namespace as "
        f"assay-runner and changes only objects it made: delete or rename that {kind}."
    )
    assert steps.refused == message
    stored = api.get(EVALUATION) or {}
    assert (stored["status"]["reason"], stored["status"]["message"]) == ("InvalidSpec", message)
    assert api.get(_path(foreign)) == foreign
    assert api.get(_path(_children()["Job"])) is None  # no runner runs as an account it does not own


def test_a_runner_binding_of_ours_to_another_role_is_not_ours(api: LocalApiServer) -> None:
    """A RoleBinding's Role cannot change: one labelled as ours that binds another Role is left alone."""
    binding = copy.deepcopy(IDENTITY["RoleBinding"])
    binding["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}
    api.put(binding, _path(binding))
    steps = _carry_out(_evaluation(api))
    assert steps.refused is not None and steps.refused.startswith("RoleBinding assay-runner exists")
    assert api.get(_path(binding)) == binding


def _requests(api: LocalApiServer) -> list[tuple[str, str]]:
    """(verb, resource) of each request, as the API server's audit log would count them."""
    verbs = {"POST": "create", "PATCH": "patch", "GET": "get", "DELETE": "delete", "PUT": "update"}
    out = []
    for method, path in api.requests:
        after = path.split("/namespaces/", 1)[1].split("/")  # <namespace>/<resource>[/<name>[/<sub>]]
        resource = after[1] + (f"/{after[3]}" if len(after) > 3 else "")
        out.append((verbs[method], resource))
    return out


def test_a_new_evaluation_costs_four_requests_and_the_namespaces_identity_is_made_once(api: LocalApiServer) -> None:
    """The first run of a namespace makes its runner identity (three creates, once); then each new
    Evaluation costs four requests: its status, its NetworkPolicy, its Job and the Event saying so."""
    identity = [("create", "serviceaccounts"), ("create", "roles"), ("create", "rolebindings")]
    for index, name in enumerate(["first", "second", "third"]):
        api.requests.clear()
        evaluation = {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "metadata": {"name": name, "namespace": "evals", "uid": f"uid-{name}", "generation": 1},
            "spec": {**SPEC, "resources": {"nodes": 1, "gpusPerNode": 0}},
        }
        api.put(evaluation, EVALUATION.replace("gitlab", name))
        _carry_out(evaluation)
        assert _requests(api) == [
            ("patch", "evaluations/status"),
            ("create", "networkpolicies"),
            *(identity if index == 0 else []),
            ("create", "jobs"),
            ("create", "events"),
        ]


def test_a_decision_again_patches_the_fence_and_asks_for_nothing_it_listed(api: LocalApiServer) -> None:
    """A decision of the same run again patches its NetworkPolicy in one request (the test and the
    write together), creates nothing and lists only its Jobs and Services."""
    _carry_out(_evaluation(api))
    made = _children()
    fence = api.get(_path(made["NetworkPolicy"]))
    assert fence is not None
    fence["spec"] = {"podSelector": {}, "policyTypes": []}  # loosened by hand
    api.requests.clear()
    _carry_out(api.get(EVALUATION) or {})
    assert [m for m, _ in api.requests if m == "POST"] == []
    assert sorted(p.rsplit("/", 2)[-2] for m, p in api.requests if m == "PATCH") == ["networkpolicies"]
    assert [p for m, p in api.requests if m == "GET"] == [  # the two lists of every decided run
        "/apis/batch/v1/namespaces/evals/jobs",
        "/api/v1/namespaces/evals/services",
    ]
    assert (api.get(_path(made["NetworkPolicy"])) or {})["spec"] == made["NetworkPolicy"]["spec"]


def test_the_identity_is_checked_again_later_and_a_wider_role_tightened(api: LocalApiServer) -> None:
    """Known, it costs nothing; after `recheck` seconds one patch each (test and write together)
    brings back what was changed by hand; one deleted meanwhile is made again."""
    now = [0.0]
    identities = namespace_identity.RunnerIdentities(clock=lambda: now[0], recheck=600.0)
    identities.ensure("evals")
    role_path = _path(IDENTITY["Role"])
    role = api.get(role_path)
    assert role is not None
    role["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    api.objects.pop(_path(IDENTITY["ServiceAccount"]))
    api.requests.clear()
    now[0] = 599.0
    identities.ensure("evals")
    assert api.requests == []
    now[0] = 601.0
    identities.ensure("evals")
    assert _requests(api) == [
        ("patch", "serviceaccounts"),  # NotFound: made again
        ("create", "serviceaccounts"),
        ("patch", "roles"),
        ("patch", "rolebindings"),
    ]
    assert (api.get(role_path) or {})["rules"] == IDENTITY["Role"]["rules"]
    assert api.get(_path(IDENTITY["ServiceAccount"])) is not None


def test_a_burst_in_a_new_namespace_makes_its_identity_once(api: LocalApiServer) -> None:
    """Decisions of one namespace on many threads at once: the first makes the identity, the
    others wait for it and send nothing for it."""
    import concurrent.futures

    identities = namespace_identity.RunnerIdentities()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: identities.ensure("evals"), range(32)))
    assert sorted(_requests(api)) == [("create", "rolebindings"), ("create", "roles"), ("create", "serviceaccounts")]


def test_a_child_of_ours_with_its_reference_further_down_the_list_is_still_written(api: LocalApiServer) -> None:
    """The one-request test looks at the first reference; where another tool put one before
    ours, the object is read once, found ours, and written on its resourceVersion."""
    fence = copy.deepcopy(_children()["NetworkPolicy"])
    fence["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x"})
    fence["spec"] = {}
    fence["metadata"]["resourceVersion"] = "3"
    api.put(fence, _path(fence))
    made = owned.ensure(_children()["NetworkPolicy"], uid=UID, likely=True)
    stored = api.get(_path(fence))
    assert made is False and stored is not None and stored["spec"] == _children()["NetworkPolicy"]["spec"]
    assert stored["metadata"]["ownerReferences"] == fence["metadata"]["ownerReferences"]


def test_a_child_that_went_missing_is_made_again(api: LocalApiServer) -> None:
    fence = _children()["NetworkPolicy"]
    assert owned.ensure(fence, uid=UID, likely=True) is True  # patch: NotFound, then create
    assert [m for m, _ in api.requests] == ["PATCH", "POST"]
    assert owned.ensure(fence, uid=UID, likely=False) is False  # create: AlreadyExists, then patch
    assert [m for m, _ in api.requests][2:] == ["POST", "PATCH"]


def test_owned_by_needs_the_controller_reference_and_the_label() -> None:
    child = _children()["NetworkPolicy"]
    assert owned.owned_by(child, UID)
    assert not owned.owned_by(child, "another-uid")
    not_controller = copy.deepcopy(child)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not owned.owned_by(not_controller, UID)
    unlabelled = copy.deepcopy(child)
    unlabelled["metadata"]["labels"][builders.LABEL_MANAGED_BY] = "helm"
    assert not owned.owned_by(unlabelled, UID)


def test_a_namespace_object_of_ours_needs_the_label_only() -> None:
    account = IDENTITY["ServiceAccount"]
    assert owned.owned_by(account, None)
    assert not owned.owned_by({**account, "metadata": {**account["metadata"], "labels": {}}}, None)


def test_a_run_of_an_older_operator_keeps_its_job_and_per_run_objects_across_an_upgrade(api: LocalApiServer) -> None:
    """An Evaluation running under an older operator: its own ServiceAccount, Role and RoleBinding
    (`gitlab-runner-<mark>`) and spec ConfigMap (`<job>-spec`), its pods running as that account.
    Its next decision finds its Job by the spec's hash and keeps it; the old objects are left to
    the Evaluation (garbage-collected with it), nothing is created but its NetworkPolicy's patch."""
    evaluation = _evaluation(api)
    job = copy.deepcopy(_children()["Job"])
    old_account = f"gitlab-runner-{builders.owner_mark(REF)}"
    job["spec"]["template"]["spec"]["serviceAccountName"] = old_account
    job["metadata"]["resourceVersion"] = "1"
    olds = [job, _children()["NetworkPolicy"], _children()["Service"]]
    for kind, version in (
        ("ServiceAccount", "v1"),
        ("Role", "rbac.authorization.k8s.io/v1"),
        ("RoleBinding", "rbac.authorization.k8s.io/v1"),
        ("ConfigMap", "v1"),
    ):
        name = f"{job['metadata']['name']}-spec" if kind == "ConfigMap" else old_account
        olds.append({"apiVersion": version, "kind": kind, "metadata": builders.child_metadata(REF, name)})
    for child in olds:
        api.put(child, _path(child))
    evaluation["status"] = {"jobName": job["metadata"]["name"], "observedGeneration": 1, "phase": "Running"}
    api.put(evaluation, EVALUATION)
    steps = _carry_out(evaluation)
    assert not steps.new_run and steps.refused is None and not steps.delete_jobs
    assert [m for m, p in api.requests if m in ("POST", "DELETE") and "/events" not in p] == []
    assert api.get(_path(job)) == job  # running on, as the old ServiceAccount
    for child in olds[3:]:
        assert api.get(_path(child)) == child  # still the Evaluation's, for the garbage collector


def test_an_account_deleted_by_hand_is_made_again_when_a_pod_cannot_be_created(api: LocalApiServer) -> None:
    namespace_identity.identities.ensure("evals")
    api.objects.pop(_path(IDENTITY["ServiceAccount"]))
    said = 'pods "x-0-abcde" is forbidden: error looking up service account evals/assay-runner: '
    assert namespace_identity.restore_if_missing("evals", said + 'serviceaccount "assay-runner" not found')
    assert api.get(_path(IDENTITY["ServiceAccount"])) is not None
    api.requests.clear()
    assert not namespace_identity.restore_if_missing("evals", "exceeded quota: gpu-quota")
    namespace_identity.identities.ensure("evals")
    assert api.requests == []  # made just now: known again
