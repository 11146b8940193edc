"""The operator changes only what it owns, on the real node: a namespace's `assay-runner` Role
that someone else made fails every run as InvalidSpec and is left alone, an object that holds
one of a run's names fails that run, unchanged; each run's NetworkPolicy fences its pods."""

from __future__ import annotations

from typing import Any

import pytest

from assay.operator.build import builders
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

RBAC = "rbac.authorization.k8s.io/v1"


def _role(name: str) -> dict[str, Any]:
    """A Role someone else made (a CI system's, say): not the operator's, with rules the runner must never get."""
    return {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": {"name": name, "labels": {"app": "gitlab"}},
        "rules": [{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list"]}],
    }


def _refused(cluster: Cluster, name: str) -> str:
    status = cluster.wait(name, "Failed", timeout=60)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "InvalidSpec", status
    event = cluster.wait_for("the InvalidSpec Event", lambda: cluster.events(name).get("InvalidSpec"), timeout=30)
    assert event == status["message"]
    return str(status["message"])


def test_an_object_under_the_runner_identitys_or_a_childs_name_is_not_taken_over(cluster: Cluster) -> None:
    # Someone's Role `assay-runner` before the namespace's first run: its runners would run bound to it.
    cluster.apply(_role("assay-runner"))
    before = cluster.get("role", "assay-runner")
    cluster.apply(evaluation_manifest("gitlab", **dummy_spec(suspend=True)))
    assert _refused(cluster, "gitlab") == (
        "Role assay-runner exists and is not the Assay operator's (it lacks the label "
        "app.kubernetes.io/managed-by=assay-operator); the operator runs every runner of the namespace as "
        "assay-runner and changes only objects it made: delete or rename that Role."
    )
    # Nothing of it changed (not its rules, not a label: its resourceVersion is the same), and no Job, no
    # RoleBinding to it.
    assert cluster.get("role", "assay-runner") == before
    assert cluster.items("jobs") == [] and cluster.items("rolebindings") == []

    # Deleted: a re-run runs, as the operator's own `assay-runner`. An object under the name of that
    # re-run's NetworkPolicy (its Job's name, which ends in the Evaluation's uid mark) fails it.
    cluster.kubectl("delete", "role", "assay-runner")
    uid = cluster.evaluation("gitlab")["metadata"]["uid"]
    ref = builders.EvaluationRef(name="gitlab", namespace=cluster.namespace, uid=uid, generation=1, rerun="take-over")
    fence = builders.job_name(ref)
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": fence, "labels": {"app": "gitlab"}},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]},
    }
    cluster.apply(foreign)
    held = cluster.get("networkpolicy", fence)
    cluster.kubectl("annotate", "evaluation", "gitlab", "evaluations.assay.dev/rerun=take-over")
    cluster.wait_for(
        "the re-run's refusal",
        lambda: (
            (cluster.evaluation("gitlab").get("status") or {}).get("rerunToken") == "take-over"
            and cluster.evaluation("gitlab")["status"]["phase"] == "Failed"
        ),
        timeout=60,
    )
    assert cluster.evaluation("gitlab")["status"]["message"] == (
        f"NetworkPolicy {fence} exists and is not this Evaluation's; the operator changes only objects it made for "
        "this Evaluation: delete or rename that NetworkPolicy, or delete and create the Evaluation again (its "
        "children's names carry its uid)."
    )
    assert cluster.get("networkpolicy", fence) == held and "ownerReferences" not in held["metadata"]
    assert cluster.items("jobs") == []

    # That one deleted too, a re-run runs, its pod as the namespace's runner account.
    cluster.kubectl("delete", "networkpolicy", fence)
    cluster.kubectl("annotate", "--overwrite", "evaluation", "gitlab", "evaluations.assay.dev/rerun=after")
    cluster.wait_for("the re-run's Job", lambda: cluster.items("jobs", "assay.dev/evaluation=gitlab"), timeout=60)
    (job,) = cluster.items("jobs", "assay.dev/evaluation=gitlab")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "assay-runner"
    assert job["spec"]["completionMode"] == "Indexed"
    role = cluster.get("role", "assay-runner")
    assert role["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "assay-operator"
    assert role["rules"] == [{"apiGroups": ["assay.dev"], "resources": ["evaluations/status"], "verbs": ["patch"]}]


def test_each_run_has_a_network_policy_that_selects_its_jobs_pods(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("fenced", **dummy_spec()))
    cluster.wait("fenced", "Succeeded", timeout=180)
    job = cluster.job_name("fenced")
    policy = cluster.get("networkpolicy", job)
    owner = policy["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Evaluation" and owner["name"] == "fenced" and owner["controller"] is True
    selector = policy["spec"]["podSelector"]["matchLabels"]
    (pod,) = cluster.items("pods", "assay.dev/evaluation=fenced")
    assert selector.items() <= pod["metadata"]["labels"].items()
    # Ingress from that Job's pods alone: a `from` without a namespaceSelector is this namespace.
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]
    # The chart's network policies are on by default: its egress is those pods and the admin's rules.
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"][0] == {"to": [{"podSelector": {"matchLabels": selector}}]}
    # It selects no pod of another run.
    others = [p for p in cluster.items("pods") if p["metadata"]["name"] != pod["metadata"]["name"]]
    assert not any(selector.items() <= (p["metadata"].get("labels") or {}).items() for p in others)
