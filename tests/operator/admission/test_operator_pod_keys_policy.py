"""The admin's lists of pod annotation keys, label keys and claims a spec may name.

The pod template's annotations and labels go onto the runner pod as written, and a claim is
mounted with the operator's rights: AppArmor `unconfined`, seccomp `unconfined` and a
Multus network were accepted from any tenant, as was any PersistentVolumeClaim of the
namespace. Each refusal is one sentence naming the key or claim and the Helm value.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from assay.errors import UserError
from assay.operator.admission import placement_policy, policy
from assay.operator.admission.placement_policy import Placement
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.spec import parse_spec
from tests.operator.helm_chart import needs_helm, render

BASE: dict[str, Any] = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}
REF = builders.EvaluationRef(name="tiny", namespace="evals", uid="u1", generation=1)
SECURITY = {
    "container.apparmor.security.beta.kubernetes.io/runner": "unconfined",
    "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
    "container.seccomp.security.alpha.kubernetes.io/runner": "unconfined",
    "k8s.v1.cni.cncf.io/networks": "host-net",
    "v1.multus-cni.io/default-network": "other-net",
}


def _refusal(spec: dict[str, Any], placement: Placement = Placement()) -> str:
    with pytest.raises(UserError) as caught:
        policy.check(parse_spec({**BASE, **spec}), AdminPolicy(placement=placement))
    message = str(caught.value)
    assert message.count(". ") == 0 and message.endswith("."), message
    return message


def _allowed(spec: dict[str, Any], placement: Placement = Placement()) -> None:
    policy.check(parse_spec({**BASE, **spec}), AdminPolicy(placement=placement))


@pytest.mark.parametrize(("key", "value"), SECURITY.items(), ids=list(SECURITY))
def test_security_and_network_annotations_are_refused_by_default(key: str, value: str) -> None:
    message = _refusal({"podTemplate": {"annotations": {"team": "a", key: value}}})
    assert message.startswith(f"spec.podTemplate.annotations key {key!r} is refused in this cluster")
    assert "policy.refusedPodAnnotations" in message and value not in message


def test_other_annotations_and_labels_pass_by_default_and_reach_the_pod() -> None:
    spec = {"podTemplate": {"annotations": {"example.com/cost-center": "42"}, "labels": {"team": "a"}}}
    _allowed(spec)
    pod = builders.job(REF, parse_spec({**BASE, **spec}))["spec"]["template"]["metadata"]
    assert pod["annotations"]["example.com/cost-center"] == "42" and pod["labels"]["team"] == "a"


def test_the_admin_may_lift_a_refusal_or_narrow_the_lists() -> None:
    apparmor = {"container.apparmor.security.beta.kubernetes.io/runner": "runtime/default"}
    _allowed({"podTemplate": {"annotations": apparmor}}, Placement(refused_pod_annotations=()))
    narrow = Placement(allowed_pod_annotations=("example.com/*",), allowed_pod_labels=("kueue.x-k8s.io/queue-name",))
    _allowed(
        {"podTemplate": {"annotations": {"example.com/a": "1"}, "labels": {"kueue.x-k8s.io/queue-name": "q"}}}, narrow
    )
    message = _refusal({"podTemplate": {"annotations": {"other.io/a": "1"}}}, narrow)
    assert message.startswith("spec.podTemplate.annotations key 'other.io/a' is not allowed in this cluster")
    assert "(allowed: example.com/*)" in message and "policy.allowedPodAnnotations" in message
    message = _refusal({"podTemplate": {"labels": {"app": "web"}}}, narrow)
    assert message.startswith("spec.podTemplate.labels key 'app' is not allowed in this cluster")
    assert "policy.allowedPodLabels" in message
    assert "(allowed: none)" in _refusal({"podTemplate": {"labels": {"a": "b"}}}, Placement(allowed_pod_labels=()))


@pytest.mark.parametrize("field", ["cache", "output"])
def test_claims_only_from_the_admins_names(field: str) -> None:
    evals_only = Placement(allowed_claim_names=("assay-*", "shared-results"))
    _allowed({field: {"pvc": "assay-cache"}}, evals_only)
    _allowed({field: {"pvc": "shared-results"}}, evals_only)
    message = _refusal({field: {"pvc": "postgres-data"}}, evals_only)
    assert message.startswith(f"spec.{field}.pvc 'postgres-data' is not a claim Evaluations may use in this cluster")
    assert "(allowed: assay-*, shared-results)" in message and "policy.allowedClaimNames" in message
    assert "(allowed: none)" in _refusal({field: {"pvc": "assay-cache"}}, Placement(allowed_claim_names=()))
    _allowed({}, Placement(allowed_claim_names=()))  # no claim: emptyDirs
    _allowed({field: {"pvc": "anything"}})  # the default: any claim of the namespace


def test_the_lists_read_from_the_policy_json() -> None:
    raw = {
        "allowedPodAnnotations": ["example.com/*"],
        "refusedPodAnnotations": [],
        "allowedPodLabels": ["team", "kueue.x-k8s.io/*"],
        "allowedClaimNames": [],
    }
    assert AdminPolicy.from_json(json.dumps(raw)).placement == Placement(
        allowed_pod_annotations=("example.com/*",),
        refused_pod_annotations=(),
        allowed_pod_labels=("team", "kueue.x-k8s.io/*"),
        allowed_claim_names=(),
    )
    assert AdminPolicy.from_json("{}").placement.refused_pod_annotations == placement_policy.SECURITY_ANNOTATIONS


@pytest.mark.parametrize("value", ["*", [""], ["a*b"], [3], {"a": 1}])
def test_a_bad_list_is_one_sentence_naming_it(value: Any) -> None:
    with pytest.raises(
        UserError, match=r"ASSAY_POLICY\.allowedClaimNames must be a list of names, each exact or ending in \*"
    ):
        AdminPolicy.from_json(json.dumps({"allowedClaimNames": value}))


def test_patterns_match_exactly_or_by_prefix() -> None:
    assert placement_policy.matches("k8s.v1.cni.cncf.io/networks", ("k8s.v1.cni.cncf.io/*",))
    assert not placement_policy.matches("k8s.v1.cni.cncf.io.evil/networks", ("k8s.v1.cni.cncf.io/*",))
    assert placement_policy.matches("team", ("team",)) and not placement_policy.matches("teams", ("team",))
    assert placement_policy.matches("anything", ("*",)) and not placement_policy.matches("x", ())


@needs_helm
def test_the_charts_lists_reach_the_operator() -> None:
    def placement(*args: str) -> Placement:
        deployment = next(d for d in render(*args) if d["kind"] == "Deployment")
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        return AdminPolicy.from_json(env[policy.POLICY_ENV]).placement

    defaults = placement()
    assert defaults.refused_pod_annotations == placement_policy.SECURITY_ANNOTATIONS
    assert defaults.allowed_pod_annotations == defaults.allowed_pod_labels == defaults.allowed_claim_names == ("*",)
    assert placement(
        "--set-json",
        'policy.allowedPodLabels=["kueue.x-k8s.io/queue-name"]',
        "--set-json",
        "policy.refusedPodAnnotations=[]",
        "--set-json",
        'policy.allowedClaimNames=["assay-*"]',
    ) == Placement(
        allowed_pod_labels=("kueue.x-k8s.io/queue-name",), refused_pod_annotations=(), allowed_claim_names=("assay-*",)
    )
