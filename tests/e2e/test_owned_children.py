"""The operator changes only what it owns, on the real node: an Evaluation named after an
existing `<name>-runner` Role leaves it alone, and an object that holds one of its children's
names fails the run as InvalidSpec, unchanged; each run's NetworkPolicy fences its pods."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

RBAC = "rbac.authorization.k8s.io/v1"


def _role(name: str) -> dict[str, Any]:
    """A Role someone else made (a CI system's, say): no Evaluation's, with rules the runner must never get."""
    return {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": {"name": name, "labels": {"app": "gitlab"}},
        "rules": [{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list"]}],
    }


def test_an_object_under_a_childs_name_is_not_taken_over(cluster: Cluster) -> None:
    # The attack as it was: an Evaluation named after an existing `gitlab-runner` Role.
    cluster.apply(_role("gitlab-runner"))
    before = cluster.get("role", "gitlab-runner")
    cluster.apply(evaluation_manifest("gitlab", **dummy_spec(suspend=True)))
    cluster.wait_for("the suspended Job", lambda: cluster.items("jobs", "assay.dev/evaluation=gitlab"), timeout=60)
    account = cluster.runner_account("gitlab")
    assert account.startswith("gitlab-runner-") and account != "gitlab-runner"  # its uid's mark: no collision
    assert cluster.get("role", "gitlab-runner") == before

    # An object that holds the name of a child the operator will write: its own Role deleted,
    # someone else's made under the name, and a decision asked for (a re-run).
    cluster.kubectl("delete", "role", account)
    cluster.apply(_role(account))
    foreign = cluster.get("role", account)
    cluster.kubectl("annotate", "evaluation", "gitlab", "evaluations.assay.dev/rerun=take-over")
    status = cluster.wait("gitlab", "Failed", timeout=60)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "InvalidSpec", status
    assert status["message"] == (
        f"Role {account} exists and is not this Evaluation's; the operator changes only objects it made for this "
        "Evaluation: delete or rename that Role, or delete and create the Evaluation again (its children's names "
        "carry its uid)."
    )
    event = cluster.wait_for("the InvalidSpec Event", lambda: cluster.events("gitlab").get("InvalidSpec"), timeout=30)
    assert event == status["message"]
    # Nothing of it changed (not its rules, not an ownerReference: its resourceVersion is the same), and the
    # re-run has no Job.
    assert cluster.get("role", account) == foreign and "ownerReferences" not in foreign["metadata"]
    assert [j["metadata"]["name"] for j in cluster.items("jobs")] == [cluster.job_name("gitlab")]
    assert cluster.get("role", "gitlab-runner") == before


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
