"""The chart's secured /metrics (RBAC, ServiceMonitor, Deployment) and its NetworkPolicies,
rendered by a real `helm template` and checked against the Kubernetes API models."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.operator.helm_chart import CHART, HELM, needs_helm, operator_container, render_values

pytestmark = needs_helm

RUNNER_PODS = {
    "matchLabels": {"app.kubernetes.io/managed-by": "assay-operator"},
    "matchExpressions": [{"key": "assay.dev/evaluation", "operator": "Exists"}],
}


def _render(*values: str) -> list[dict[str, Any]]:
    documents = render_values(*values)
    _validate(documents)
    return documents


def _validate(documents: list[dict[str, Any]]) -> None:
    from kubernetes import client

    models = {
        "NetworkPolicy": client.V1NetworkPolicy,
        "ClusterRole": client.V1ClusterRole,
        "ClusterRoleBinding": client.V1ClusterRoleBinding,
        "Deployment": client.V1Deployment,
    }
    for document in documents:
        if document["kind"] in models:
            models[document["kind"]].model_validate(document)  # raises on a wrong type or a missing field


def _named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_secure_metrics_by_default_reviews_for_the_operator_a_reader_role_for_scrapers() -> None:
    documents = _render("metrics.serviceMonitor.enabled=true")
    args = operator_container(documents)["args"]
    # HTTPS with a certificate the operator makes at start: no Secret to mount.
    assert "--metrics-secure" in args and "--metrics-https" in args
    assert not [a for a in args if a.startswith("--metrics-cert-dir")]
    env = {e["name"]: e.get("value") for e in operator_container(documents)["env"]}
    assert env["ASSAY_MAX_SERIES_PER_EVALUATION"] == "500"
    auth = _named(documents, "ClusterRole", "ev-assay-metrics-auth")
    assert auth["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    ]
    binding = _named(documents, "ClusterRoleBinding", "ev-assay-metrics-auth")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ev-assay", "namespace": "assay-system"}]
    reader = _named(documents, "ClusterRole", "ev-assay-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    # No one is bound to it unless the admin lists readers.
    assert not [d for d in documents if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"].endswith("-reader")]
    (endpoint,) = next(d for d in documents if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # The self-signed certificate is not checked (kubebuilder's ServiceMonitor does the same).
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}


def test_readers_tls_and_a_cap_from_values() -> None:
    documents = _render(
        "metrics.readers[0].kind=ServiceAccount",
        "metrics.readers[0].name=prometheus",
        "metrics.readers[0].namespace=monitoring",
        "metrics.tls.secretName=metrics-cert",
        "metrics.serviceMonitor.enabled=true",
        "metrics.maxSeriesPerEvaluation=2000",
    )
    binding = _named(documents, "ClusterRoleBinding", "ev-assay-metrics-reader")
    assert binding["roleRef"]["name"] == "ev-assay-metrics-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
    container = operator_container(documents)
    assert {"--metrics-https", "--metrics-cert-dir=/etc/assay/metrics-tls"} <= set(container["args"])
    assert {"name": "metrics-tls", "mountPath": "/etc/assay/metrics-tls", "readOnly": True} in container["volumeMounts"]
    volumes = next(d for d in documents if d["kind"] == "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "metrics-tls", "secret": {"secretName": "metrics-cert"}} in volumes
    assert {e["name"]: e.get("value") for e in container["env"]}["ASSAY_MAX_SERIES_PER_EVALUATION"] == "2000"
    (endpoint,) = next(d for d in documents if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": "ev-assay-metrics.assay-system.svc",
        "ca": {"secret": {"name": "metrics-cert", "key": "ca.crt"}},
    }


def test_plain_http_only_when_the_values_opt_out() -> None:
    documents = _render("metrics.tls.enabled=false", "metrics.serviceMonitor.enabled=true")
    assert "--metrics-https" not in operator_container(documents)["args"]
    (endpoint,) = next(d for d in documents if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert "scheme" not in endpoint and "tlsConfig" not in endpoint
    result = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--set", "metrics.tls.enabled=false", "--set", "metrics.tls.secretName=x"],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "metrics.tls.secretName is set and metrics.tls.enabled is false" in result.stderr


def test_metrics_secure_false_is_open_and_asks_for_no_cluster_rights() -> None:
    documents = _render("metrics.secure=false", "metrics.serviceMonitor.enabled=true")
    assert "--metrics-secure" not in operator_container(documents)["args"]
    assert not [d for d in documents if d["metadata"]["name"] == "ev-assay-metrics-auth"]
    (endpoint,) = next(d for d in documents if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert "bearerTokenFile" not in endpoint


def test_the_operator_network_policy_lets_in_metrics_only_and_out_to_the_api_server_and_dns() -> None:
    documents = _render()
    policy = _named(documents, "NetworkPolicy", "ev-assay-operator")
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == "assay-system"
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"ports": [{"protocol": "TCP", "port": "metrics"}]}]
    api_server, dns = spec["egress"]
    assert api_server == {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    # All namespaces watched and none listed: the chart cannot place runner policies itself; the
    # operator gets their egress rules for each runner Job's own (below).
    assert not [d for d in documents if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-runners")]
    assert "ASSAY_RUNNER_EGRESS" in {e["name"] for e in operator_container(documents)["env"]}


def test_addresses_and_scrapers_from_values() -> None:
    documents = _render(
        "networkPolicy.apiServerCIDRs={10.0.0.10/32}",
        "networkPolicy.dnsTo=null",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring",
    )
    spec = _named(documents, "NetworkPolicy", "ev-assay-operator")["spec"]
    assert spec["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    api_server, dns = spec["egress"]
    assert api_server["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    assert "to" not in dns


def test_runner_policies_in_each_watched_namespace() -> None:
    documents = _render("watchNamespaces={team-a,team-b}", "networkPolicy.apiServerCIDRs={10.0.0.10/32}")
    runners = [d for d in documents if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "ev-assay-runners"]
    assert sorted(d["metadata"]["namespace"] for d in runners) == ["team-a", "team-b"]
    spec = runners[0]["spec"]
    # Egress only: who reaches a runner is its own run's policy (the operator's, per Job); an
    # ingress rule here for all the namespace's runners would add to it and let other runs in.
    assert spec["podSelector"] == RUNNER_PODS and spec["policyTypes"] == ["Egress"] and "ingress" not in spec
    peers, api_server, dns = spec["egress"]
    assert peers == {"to": [{"podSelector": RUNNER_PODS}]}
    assert api_server["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}] and {p["port"] for p in dns["ports"]} == {53}
    assert api_server["ports"] == [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]
    # The operator's runner egress is the same rules, less the namespace's peers.
    assert _runner_egress(documents) == [api_server, dns]


def _runner_egress(documents: list[dict[str, Any]]) -> Any:
    import json

    return json.loads({e["name"]: e.get("value") for e in operator_container(documents)["env"]}["ASSAY_RUNNER_EGRESS"])


def test_runner_egress_goes_to_the_operator_by_default_and_not_without_network_policies() -> None:
    egress = _runner_egress(_render())
    api_server, dns = egress  # the API server (status) and DNS, nothing else: runners are offline
    assert {p["port"] for p in api_server["ports"]} == {443, 6443} and "to" not in api_server
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert _runner_egress(_render("policy.allowOnline=true"))[-1] == {}
    served = _runner_egress(_render("networkPolicy.runnerEgressCIDRs={10.20.0.0/16}"))
    assert served[-1] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}
    assert "ASSAY_RUNNER_EGRESS" not in {
        e["name"] for e in operator_container(_render("networkPolicy.enabled=false"))["env"]
    }


def test_runner_egress_to_model_servers_and_when_online_everywhere() -> None:
    documents = _render(
        "networkPolicy.runnerNamespaces={models}",
        "networkPolicy.runnerEgressCIDRs={10.20.0.0/16}",
        "networkPolicy.runnerEgressTo[0].namespaceSelector.matchLabels.name=serving",
    )
    egress = _named(documents, "NetworkPolicy", "ev-assay-runners")["spec"]["egress"]
    assert egress[3:] == [
        {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]},
        {"to": [{"namespaceSelector": {"matchLabels": {"name": "serving"}}}]},
    ]
    online = _render("networkPolicy.runnerNamespaces={models}", "policy.allowOnline=true")
    assert _named(online, "NetworkPolicy", "ev-assay-runners")["spec"]["egress"][-1] == {}


def test_network_policies_can_be_left_out() -> None:
    documents = _render("networkPolicy.enabled=false", "watchNamespaces={team-a}")
    assert not [d for d in documents if d["kind"] == "NetworkPolicy"]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("metrics.maxSeriesPerEvaluation=0", "maxSeriesPerEvaluation"),
        ("networkPolicy.apiServerPorts={0}", "apiServerPorts"),
        ("metrics.readers[0].kind=Robot", "kind"),
    ],
)
def test_the_schema_refuses_bad_values(value: str, named: str) -> None:
    result = subprocess.run([HELM, "template", "ev", str(CHART), "--set", value], capture_output=True, text=True)
    assert result.returncode != 0 and "values don't meet the specifications" in result.stderr
    assert any(named in line for line in result.stderr.splitlines() if line.startswith("- ")), result.stderr
