"""Endpoint URLs under the admin's policy: the operator's check and the chart's admission policy agree.

One table of URLs goes through `assay.endpoint_urls` / `policy.check` (the operator) and
through the CEL of the ValidatingAdmissionPolicy the chart renders (a real `helm template`,
evaluated by cel-python): what one refuses, the other refuses, for the same reason.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from assay import endpoint_urls
from assay.errors import UserError
from assay.operator.admission import policy
from assay.operator.admission.policy import AdminPolicy
from assay.spec import API_MODELS, parse_spec
from tests.operator.helm_chart import CHART, HELM, needs_helm

PREFIXES = ("http://vllm.models:8000/v1", "https://api.example.com/")
# url → what the operator says with PREFIXES: None (allowed), "userinfo" or "prefix".
CASES = {
    "http://vllm.models:8000/v1/completions": None,
    "http://vllm.models:8000/v1": None,
    "http://vllm.models:8000/v1?x=1": None,
    "https://api.example.com/v1/chat/completions": None,
    "http://vllm.models:8000/v10/completions": "prefix",
    "http://vllm.models:8000.evil.example/v1/completions": "prefix",
    "http://vllm.models:80001/v1": "prefix",
    "https://vllm.models:8000/v1/completions": "prefix",
    "http://vllm.models/v1/completions": "prefix",
    "http://vllm.models:8000/v1/../admin": "prefix",
    "http://vllm.models:8000/v1/%2e%2e/admin": "prefix",
    "https://api.example.com.evil.example/v1": "prefix",
    "http://user:pw@vllm.models:8000/v1/completions": "userinfo",
    "http://vllm.models:8000@evil.example/v1/completions": "userinfo",
    "https://token@api.example.com/v1": "userinfo",
}


def _operator_says(spec: dict[str, Any], prefixes: tuple[str, ...]) -> str | None:
    try:
        policy.check(parse_spec(spec), AdminPolicy(allowed_endpoint_prefixes=prefixes))
    except UserError as error:
        message = str(error)
        if "user name or password" in message:
            assert "pw" not in message and "token@" not in message  # never repeated
            return "userinfo"
        assert "policy.allowedEndpointPrefixes" in message, message
        return "default" if message.startswith("spec.model ") else "prefix"
    return None


def _endpoint(url: str) -> dict[str, Any]:
    return {"model": "local-completions", "tasks": ["arc_easy"], "endpoint": {"url": url}}


def _base_url(url: str) -> dict[str, Any]:
    return {"model": "local-completions", "tasks": ["arc_easy"], "modelArgs": {"base_url": url}}


@pytest.mark.parametrize("url", sorted(CASES))
def test_the_operator_bounds_endpoint_urls(url: str) -> None:
    assert _operator_says(_endpoint(url), PREFIXES) == CASES[url]
    assert _operator_says(_base_url(url), PREFIXES) == CASES[url]
    # Without prefixes any server is allowed; credentials in the URL never are.
    expected = "userinfo" if CASES[url] == "userinfo" else None
    assert _operator_says(_endpoint(url), ()) == expected


def test_an_api_model_without_a_url_is_refused_only_under_prefixes() -> None:
    spec = {"model": "openai-completions", "tasks": ["arc_easy"]}
    assert _operator_says(spec, PREFIXES) == "default" and _operator_says(spec, ()) is None
    assert _operator_says({"model": "dummy", "tasks": ["arc_easy"]}, PREFIXES) is None


def test_a_refused_urls_credentials_stay_out_of_the_model_label() -> None:
    spec = parse_spec(_endpoint("https://user:pw@vllm.example/v1/completions"))
    assert spec.model_label == "https://***@vllm.example/v1/completions"
    assert endpoint_urls.origin("HTTPS://Vllm.Example/v1") == ("https", "vllm.example", 443)
    assert endpoint_urls.show_origin("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000"


@pytest.mark.parametrize("prefixes", [["vllm:8000"], ["http://u:p@vllm/"], ["http:///v1"], "http://x/"])
def test_bad_endpoint_prefixes_in_the_policy_are_one_sentence(prefixes: Any) -> None:
    with pytest.raises(UserError, match=r"allowedEndpointPrefixes must be a list of http\(s\) URL prefixes"):
        AdminPolicy.from_json(json.dumps({"allowedEndpointPrefixes": prefixes}))


# --- the chart's ValidatingAdmissionPolicy ------------------------------------------------


VAP_API = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"


def _render(*args: str, served: bool = True) -> list[dict[str, Any]]:
    """The chart's admission documents; `served`: as `helm install` on a cluster (1.30+) that serves the API."""
    assert HELM is not None
    api = ["--api-versions", VAP_API] if served else []
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--namespace", "assay-system", *api, *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # The endpoint policy's documents (the runners' write policy is tests/operator/deploy/test_operator_runner_policy.py's).
    return [
        d
        for d in yaml.safe_load_all(out)
        if d and d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"] == "ev-assay-evaluations"
    ]


def _with_prefixes() -> list[str]:
    return ["--set-json", f"policy.allowedEndpointPrefixes={list(PREFIXES)!r}".replace("'", '"')]


class AdmissionPolicy:
    """The rendered policy's variables and validations, evaluated as the API server would (cel-python)."""

    def __init__(self, document: dict[str, Any]) -> None:
        import celpy

        self.celpy, self.env = celpy, celpy.Environment()
        self.spec = document["spec"]

    def _run(self, expression: str, activation: dict[str, Any]) -> Any:
        return self.env.program(self.env.compile(expression)).evaluate(activation)

    def refusals(self, evaluation: dict[str, Any]) -> list[str]:
        types = self.celpy.celtypes
        activation: dict[str, Any] = {"object": self.celpy.json_to_cel(evaluation)}
        variables: dict[Any, Any] = {}
        for variable in self.spec["variables"]:
            activation["variables"] = types.MapType(variables)
            variables[types.StringType(variable["name"])] = self._run(variable["expression"], activation)
        activation["variables"] = types.MapType(variables)
        found = []
        for validation in self.spec["validations"]:
            result = self._run(validation["expression"], activation)
            assert isinstance(result, types.BoolType), (validation["expression"], result)
            if not result:
                found.append(validation["message"])
        return found


def _vap_says(admission: AdmissionPolicy, spec: dict[str, Any]) -> str | None:
    refusals = admission.refusals(
        {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "metadata": {"name": "e", "namespace": "team-a"},
            "spec": spec,
        }
    )
    if not refusals:
        return None
    first = refusals[0]
    if "user name or password" in first:
        return "userinfo"
    return "default" if first.startswith("spec.endpoint.url is needed") else "prefix"


@needs_helm
def test_the_chart_renders_the_admission_policy_and_its_binding() -> None:
    policy_doc, binding = _render()
    assert policy_doc["kind"] == "ValidatingAdmissionPolicy" and binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert policy_doc["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"]["policyName"] == policy_doc["metadata"]["name"] == "ev-assay-evaluations"
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]
    assert policy_doc["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy_doc["spec"]["matchConstraints"]["resourceRules"]
    # Not evaluations/status: the runner's and the operator's status writes are not judged.
    assert rule["resources"] == ["evaluations"] and rule["operations"] == ["CREATE", "UPDATE"]
    # Without prefixes only the userinfo rule: a URL is otherwise free.
    assert [v["expression"] for v in policy_doc["spec"]["validations"]] == [
        "variables.urls.all(u, !u.matches('^[A-Za-z][-A-Za-z0-9+.]*://[^/?#]*@'))"
    ]
    assert [v["name"] for v in policy_doc["spec"]["variables"]] == ["urls"]
    assert _render("--set", "admissionPolicy.enabled=false") == []
    assert _render(served=False) == []  # a cluster before 1.30: nothing it would refuse to install
    scoped = _render("--set", "watchNamespaces={team-a,team-b}")[1]["spec"]["matchResources"]
    assert scoped["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
    ]


@needs_helm
def test_the_prefix_rules_are_the_ones_expected() -> None:
    policy_doc, _ = _render(*_with_prefixes())
    variables = {v["name"]: v["expression"] for v in policy_doc["spec"]["variables"]}
    assert yaml.safe_load(variables["prefixes"]) == list(PREFIXES)
    expressions = [v["expression"] for v in policy_doc["spec"]["validations"]]
    assert expressions[1] == (
        "variables.urls.all(u, !u.matches('/[.][.]?([/?#]|$)|%2[eE]') && variables.prefixes.exists(p, u == p || "
        "u.startsWith(p.endsWith('/') ? p : p + '/') || u.startsWith(p + '?')))"
    )
    # The API models named in CEL are the spec's.
    assert expressions[2].endswith(f"!(object.spec.model in [{', '.join(repr(m) for m in API_MODELS)}])")
    assert "http://vllm.models:8000/v1, https://api.example.com/" in policy_doc["spec"]["validations"][1]["message"]


@needs_helm
@pytest.mark.parametrize("where", [_endpoint, _base_url])
def test_the_admission_policy_refuses_what_the_operator_refuses(where: Any) -> None:
    pytest.importorskip("celpy", reason="cel-python evaluates the admission policy's CEL (pip install cel-python)")
    bounded = AdmissionPolicy(_render(*_with_prefixes())[0])
    free = AdmissionPolicy(_render()[0])
    for url, expected in CASES.items():
        assert _vap_says(bounded, where(url)) == expected == _operator_says(where(url), PREFIXES), url
        assert _vap_says(free, where(url)) == _operator_says(where(url), ()), url
    api_model = {"model": "openai-chat-completions", "tasks": ["arc_easy"]}
    assert _vap_says(bounded, api_model) == "default" == _operator_says(api_model, PREFIXES)
    assert _vap_says(free, api_model) is None and _vap_says(bounded, {"model": "hf", "tasks": ["arc_easy"]}) is None


@needs_helm
def test_the_operator_and_the_admission_policy_read_the_same_values() -> None:
    assert HELM is not None
    out = subprocess.run(
        [
            HELM,
            "template",
            "ev",
            str(CHART),
            "--namespace",
            "assay-system",
            *_with_prefixes(),
            "--set",
            "policy.secretConsentLabel=example.com/evals=yes",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    deployment = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    admin = AdminPolicy.from_json(env[policy.POLICY_ENV])
    assert admin.allowed_endpoint_prefixes == PREFIXES and admin.secret_consent_label == "example.com/evals=yes"
    assert AdminPolicy().secret_consent_label == policy.DEFAULT_SECRET_CONSENT_LABEL == "assay.dev/evaluations=allowed"
