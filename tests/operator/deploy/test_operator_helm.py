"""The Helm chart: rendered by a real `helm` when one is installed, plus checks that need none."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.operator.helm_chart import CHART, HELM, REPO, needs_helm, render


def test_chart_metadata_and_values() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "assay"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["operator"]["replicas"] == 1 and values["watchNamespaces"] == []


def test_chart_ships_the_same_crd() -> None:
    assert (CHART / "crds" / "evaluations.assay.dev.yaml").read_text() == (
        REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml"
    ).read_text()


def test_dashboard_plots_scores_per_task_and_model() -> None:
    dashboard = json.loads((CHART / "dashboards" / "assay.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert any("assay_evaluation_score{" in e and "task" in e and "model" in e for e in exprs)
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"namespace", "model", "task"}
    from assay.operator.runtime.metrics import EvaluationMetrics

    exported = {m.name for m in EvaluationMetrics().registry.collect()}
    for expr in exprs:
        for name in re.findall(r"assay_[a-z_]+", expr):
            base = name.removesuffix("_total")
            assert base in exported, f"dashboard queries {name}, which the operator does not export"


def test_dashboard_panels_have_their_own_ids_and_places() -> None:
    panels = json.loads((CHART / "dashboards" / "assay.json").read_text())["panels"]
    assert len({p["id"] for p in panels}) == len(panels) and len({p["title"] for p in panels}) == len(panels)
    cells = [
        (p["title"], x, y)
        for p in panels
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    owners: dict[tuple[int, int], str] = {}
    for title, x, y in cells:
        assert x < 24 and owners.setdefault((x, y), title) == title, f"{title!r} overlaps {owners[(x, y)]!r}"


def test_templates_are_balanced() -> None:
    """Without helm: every block opened in a template is closed."""
    for path in (CHART / "templates").glob("*"):
        text = path.read_text()
        opened = len(re.findall(r"{{-?\s*(if|range|with|define)\b", text))
        closed = len(re.findall(r"{{-?\s*end\s*-?}}", text))
        assert opened == closed, path.name


def _validate(documents: list[dict[str, Any]]) -> None:
    from kubernetes import client

    models = {
        "Deployment": client.V1Deployment,
        "Service": client.V1Service,
        "ServiceAccount": client.V1ServiceAccount,
        "ClusterRole": client.V1ClusterRole,
        "ClusterRoleBinding": client.V1ClusterRoleBinding,
        "Role": client.V1Role,
        "RoleBinding": client.V1RoleBinding,
        "ConfigMap": client.V1ConfigMap,
    }
    for document in documents:
        if document["kind"] in models:
            models[document["kind"]].model_validate(document)


@needs_helm
def test_helm_lint() -> None:
    subprocess.run([HELM, "lint", str(CHART), "--strict"], check=True, capture_output=True)


@needs_helm
def test_cluster_wide_render() -> None:
    documents = render("--set", "metrics.serviceMonitor.enabled=true")
    _validate(documents)
    kinds = sorted(d["kind"] for d in documents)
    # ClusterRoles: the operator's, /metrics' reviews and readers (test_operator_chart_metrics).
    assert kinds == [
        "ClusterRole",
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["assay"] and container["args"][:2] == ["operator", "--standalone"]
    assert "--all-namespaces" in container["args"]
    role = next(d for d in documents if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "ev-assay")
    verbs = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
    # The namespace's runner identity is created, patched when checked again (while it is the operator's), and
    # read to see whose an object under its name is.
    for resource in (
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("", "serviceaccounts"),
    ):
        assert verbs[resource] == {"get", "create", "patch"}
    assert not any({"bind", "escalate", "*"} & v for v in verbs.values())
    assert verbs[("", "pods")] == {"get", "list", "watch"}
    # Status only: no annotation, finalizer or spec of an Evaluation is the operator's to write.
    assert verbs[("assay.dev", "evaluations")] == {"get", "list", "watch"}
    assert verbs[("assay.dev", "evaluations/status")] == {"get", "patch"}
    # Read only, by name: spec.taskSources. No run has a ConfigMap of its own (its spec is in its pod).
    assert verbs[("", "configmaps")] == {"get"}
    # Each run's NetworkPolicy: created with its Job, patched at later decisions, deleted with a superseded one.
    assert verbs[("networking.k8s.io", "networkpolicies")] == {"get", "create", "patch", "delete"}
    # Events: read (why a run is stuck) and written (the Evaluation's own Events).
    assert verbs[("", "events")] == {"get", "list", "watch", "create", "patch"}
    # What the runner Role grants, the operator must hold (no escalate needed).
    from assay.operator.build import runner_identity

    granted = runner_identity.role("ns")["rules"]
    runner = {(r["apiGroups"][0], res): set(r["verbs"]) for r in granted for res in r["resources"]}
    assert runner == {("assay.dev", "evaluations/status"): {"patch"}}
    assert all(needed <= verbs[key] for key, needed in runner.items())
    # Which Evaluation a runner writes: the admission policy, whatever API versions helm was told of.
    policies = {d["kind"]: d for d in documents if d["metadata"]["name"] == "ev-assay-runner-writes"}
    assert policies["ValidatingAdmissionPolicyBinding"]["spec"] == {
        "policyName": "ev-assay-runner-writes",
        "validationActions": ["Deny"],
    }
    assert policies["ValidatingAdmissionPolicy"]["spec"]["failurePolicy"] == "Fail"
    dashboard = next(d for d in documents if d["kind"] == "ConfigMap")
    assert json.loads(dashboard["data"]["assay.json"])["uid"] == "assay-evaluations"


@needs_helm
def test_namespaced_render() -> None:
    documents = render("--set", "watchNamespaces={team-a,team-b}", "--set", "grafana.dashboard.enabled=false")
    _validate(documents)
    roles = [d for d in documents if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-leader")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        verbs = {(r["apiGroups"][0], res): set(r["verbs"]) for r in role["rules"] for res in r["resources"]}
        assert verbs[("", "pods")] == {"get", "list", "watch"} and {"get", "list", "watch"} <= verbs[("", "events")]
    # Cluster-wide only what a secured /metrics needs (TokenReviews and the URL /metrics have no namespace).
    assert {d["metadata"]["name"] for d in documents if d["kind"].startswith("Cluster")} == {
        "ev-assay-metrics-auth",
        "ev-assay-metrics-reader",
    }
    args = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--all-namespaces" not in args


@needs_helm
def test_leader_election_holds_only_its_own_lease() -> None:
    documents = render("--set", "operator.replicas=2")
    _validate(documents)
    (role,) = [d for d in documents if d["kind"] == "Role"]
    assert role["metadata"]["name"] == "ev-assay-leader" and role["metadata"]["namespace"] == "assay-system"
    # create cannot be limited by name (the object does not exist yet); get and update can.
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["ev-assay-leader"],
            "verbs": ["get", "update"],
        },
    ]
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--leader-election=ev-assay-leader" in container["args"]
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Without leader election, several replicas would all reconcile: the chart refuses.
    result = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--set", "operator.replicas=2", "--set", "operator.leaderElection=false"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "needs operator.leaderElection: true" in result.stderr


def _stacked_bars(low: float, high: float) -> dict[str, float]:
    """What the bar panels' four queries give for one interval (PromQL's clamp_max/clamp_min)."""
    return {
        "offset below 0": min(high, 0),
        "interval below 0": min(low, 0) - min(high, 0),
        "offset above 0": max(low, 0),
        "interval above 0": max(high, 0) - max(low, 0),
    }


@pytest.mark.parametrize("low,high", [(-0.09, -0.03), (-0.02, 0.05), (0.59, 0.63)])
def test_the_bar_panels_stack_an_interval_on_each_side_of_0(low: float, high: float) -> None:
    panels = {p["title"]: p for p in json.loads((CHART / "dashboards" / "assay.json").read_text())["panels"]}
    for title, family in (
        ("Scores with 95% error bars", "assay_evaluation_score"),
        ("Versus baseline: delta with its interval (bars)", "assay_evaluation_delta"),
    ):
        panel = panels[title]
        assert panel["type"] == "barchart" and panel["options"]["stacking"] == "normal"
        assert panel["options"]["xField"] == "row"
        names = next(t for t in panel["transformations"] if t["id"] == "organize")["options"]["renameByName"]
        exprs = {names[f"Value #{t['refId']}"]: t["expr"] for t in panel["targets"]}
        assert all(
            e.startswith("label_join(") and e.endswith('"row", " ", "evaluation", "task", "metric", "filter")')
            for e in exprs.values()
        )
        low_series, high_series = f"{family}_ci_low{{", f"{family}_ci_high{{"
        assert exprs["offset below 0"].startswith(f"label_join(clamp_max({high_series}")
        assert exprs["interval below 0"].startswith(f"label_join(clamp_max({low_series}")
        assert exprs["offset above 0"].startswith(f"label_join(clamp_min({low_series}")
        assert exprs["interval above 0"].startswith(f"label_join(clamp_min({high_series}")
        # Stacked from 0 (negatives down, positives up), the visible parts cover exactly [low, high].
        parts = _stacked_bars(low, high)
        covered_below = (parts["offset below 0"] + parts["interval below 0"], parts["offset below 0"])
        covered_above = (parts["offset above 0"], parts["offset above 0"] + parts["interval above 0"])
        spans = [span for span in (covered_below, covered_above) if span[1] > span[0]]
        assert (min(s[0] for s in spans), max(s[1] for s in spans)) == pytest.approx((low, high))
        colours = {
            o["matcher"]["options"]: next(
                (p["value"]["fixedColor"] for p in o["properties"] if p["id"] == "color"), None
            )
            for o in panel["fieldConfig"]["overrides"]
        }
        assert colours["offset below 0"] == colours["offset above 0"] == "transparent"
