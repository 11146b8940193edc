"""The chart's API Priority and Fairness objects for the operator: a FlowSchema and
PriorityLevelConfiguration of its own, its Lease renewals at leader-election priority
(`helm template`; tests/e2e/test_flowcontrol.py has a real API server admit them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.operator.helm_chart import needs_helm
from tests.operator.helm_chart import render as _render

FLOWCONTROL = ("--api-versions", "flowcontrol.apiserver.k8s.io/v1/FlowSchema")
LEASES = Path(__file__).resolve().parents[3] / "assay" / "operator" / "kube" / "leases.py"
VERB_OF = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@needs_helm
def test_the_operator_has_its_own_priority_level_and_its_leases_the_leader_elections() -> None:
    documents = _render(*FLOWCONTROL)
    by_kind = {
        (d["kind"], d["metadata"]["name"]): d
        for d in documents
        if d["kind"] in ("FlowSchema", "PriorityLevelConfiguration")
    }
    assert set(by_kind) == {
        ("PriorityLevelConfiguration", "ev-assay-operator"),
        ("FlowSchema", "ev-assay-operator"),
        ("FlowSchema", "ev-assay-operator-leader-election"),
    }
    level = by_kind[("PriorityLevelConfiguration", "ev-assay-operator")]["spec"]
    assert level["type"] == "Limited" and level["limited"]["nominalConcurrencyShares"] == 40
    assert level["limited"]["limitResponse"]["type"] == "Queue"  # a burst waits in line, not 429s at once

    deployment = next(d for d in documents if d["kind"] == "Deployment")
    operator = {
        "kind": "ServiceAccount",
        "serviceAccount": {
            "name": deployment["spec"]["template"]["spec"]["serviceAccountName"],
            "namespace": "assay-system",
        },
    }
    schema = by_kind[("FlowSchema", "ev-assay-operator")]["spec"]
    leases = by_kind[("FlowSchema", "ev-assay-operator-leader-election")]["spec"]
    assert schema["priorityLevelConfiguration"] == {"name": "ev-assay-operator"}
    assert [r["subjects"] for r in schema["rules"]] == [[operator]]
    assert schema["distinguisherMethod"] == {"type": "ByNamespace"}  # one tenant's flood queues behind itself
    rule = schema["rules"][0]["resourceRules"][0]
    assert (
        rule["verbs"] == rule["apiGroups"] == rule["resources"] == rule["namespaces"] == ["*"] and rule["clusterScope"]
    )
    # Before the built-in service-accounts schema (9000), which would put it in workload-low.
    assert schema["matchingPrecedence"] < 9000

    assert leases["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert leases["matchingPrecedence"] < schema["matchingPrecedence"]  # the lower number matches first
    assert [r["subjects"] for r in leases["rules"]] == [[operator]]
    (lease_rule,) = leases["rules"][0]["resourceRules"]
    assert lease_rule["apiGroups"] == ["coordination.k8s.io"] and lease_rule["resources"] == ["leases"]
    assert lease_rule["namespaces"] == ["assay-system"]
    # Every verb the operator's Lease calls use (kube/leases.py) is one the schema matches.
    used = {VERB_OF[m] for m in re.findall(r'request_once\(\s*"([A-Z]+)"', LEASES.read_text())}
    assert used and used <= set(lease_rule["verbs"])


@needs_helm
@pytest.mark.parametrize("args", [("--set", "apiPriority.enabled=false", *FLOWCONTROL), ()])
def test_no_flowcontrol_objects_when_switched_off_or_the_api_server_lacks_the_api(args: tuple[str, ...]) -> None:
    assert not [d for d in _render(*args) if d["kind"] in ("FlowSchema", "PriorityLevelConfiguration")]


@needs_helm
def test_the_priority_values_reach_the_objects() -> None:
    documents = _render(
        *FLOWCONTROL,
        "--set",
        "apiPriority.nominalConcurrencyShares=10,apiPriority.matchingPrecedence=500,apiPriority.queueLengthLimit=20",
    )
    by_name = {d["metadata"]["name"]: d["spec"] for d in documents if d["kind"] in ("FlowSchema",)}
    (level,) = [d["spec"]["limited"] for d in documents if d["kind"] == "PriorityLevelConfiguration"]
    assert level["nominalConcurrencyShares"] == 10 and level["limitResponse"]["queuing"]["queueLengthLimit"] == 20
    assert by_name["ev-assay-operator"]["matchingPrecedence"] == 500
    assert by_name["ev-assay-operator-leader-election"]["matchingPrecedence"] == 499
