"""A Secret serves an Evaluation only with the admin's consent label (`secret_consent`).

The operator's own client (`kube`, `api_session`) talks real HTTP to a local server that
answers Secrets the way kube-apiserver does: the whole object for `application/json`, the
metadata alone for the PartialObjectMetadata media type. `decide_run` runs on top of it,
from the Evaluation to the status write, so the refusal is seen where a user sees it.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from assay.errors import UserError
from assay.kube import client as kube_client
from assay.kube import credentials
from assay.kube.api_session import Session
from assay.operator import handlers
from assay.operator.admission import secret_consent, validation
from assay.operator.admission.policy import AdminPolicy
from assay.operator.kube import api_client, kube
from assay.operator.runtime.state import OperatorState
from assay.spec import parse_spec
from tests.operator.helm_chart import CHART, HELM, needs_helm

NAMESPACE = "team-a"
CONSENT = {"assay.dev/evaluations": "allowed"}
TOKEN = "hf_" + "Kq9" * 12
_SECRET_PATH = re.compile(rf"^/api/v1/namespaces/{NAMESPACE}/secrets/([^/]+)$")
_STATUS_PATH = re.compile(rf"^/apis/assay.dev/v1alpha1/namespaces/{NAMESPACE}/evaluations/([^/]+)/status$")


class FakeApiServer:
    """Secrets, Evaluation status writes and object creation (POST or server-side apply), over HTTP on 127.0.0.1."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.evaluations: dict[str, dict[str, Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.answers: list[bytes] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append({"method": self.command, "path": self.path, "accept": self.headers.get("Accept")})
                status, data = outer.answer(self.command, self.path, self.headers.get("Accept") or "", body)
                raw = json.dumps(data).encode()
                outer.answers.append(raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def add_secret(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.secrets[name] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "data": {"token": TOKEN},
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        }

    def answer(self, method: str, path: str, accept: str, body: Any) -> tuple[int, Any]:
        secret = _SECRET_PATH.match(path)
        if method == "GET" and secret:
            if secret.group(1) not in self.secrets:
                return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            found = self.secrets[secret.group(1)]
            if accept == kube.PARTIAL_METADATA:
                return 200, {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": found["metadata"],
                }
            return 200, found
        status = _STATUS_PATH.match(path)
        if method == "PATCH" and status:
            evaluation = self.evaluations[status.group(1)]
            evaluation["status"] = {**(evaluation.get("status") or {}), **body["status"]}
            return 200, evaluation
        if method == "POST" or method == "PATCH" and "fieldManager=" in path:  # a create, or a server-side apply
            self.created.append(body)
            return 201, body
        return 404, {"kind": "Status", "reason": "NotFound", "code": 404}

    def kinds_created(self) -> list[str]:
        return [c["kind"] for c in self.created]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    session = Session(credentials.Credentials(server=server.url, authorization=lambda: "Bearer operator"))
    monkeypatch.setattr(api_client, "client", lambda: kube_client.ApiClient(session))
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


def _spec(**fields: Any) -> dict[str, Any]:
    return {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}, **fields}


def _endpoint_spec(secret: str) -> dict[str, Any]:
    return _spec(
        model="local-completions",
        endpoint={"url": "http://vllm.models:8000/v1/completions", "apiKeySecret": {"name": secret}},
    )


def _check(
    spec: dict[str, Any], secrets: dict[str, dict[str, str] | None], *, label: str = "assay.dev/evaluations=allowed"
) -> list[str]:
    """secret_consent.check over a dict of Secret name → labels (None: no such Secret); the names read."""
    reads: list[str] = []

    def get(name: str) -> dict[str, Any] | None:
        reads.append(name)
        labels = secrets.get(name)
        return None if name not in secrets else {"name": name, "labels": labels}

    secret_consent.check(parse_spec(spec), label=label, namespace=NAMESPACE, get=get)
    return reads


def test_every_secret_reference_must_carry_the_label() -> None:
    assert _check(_spec(hfTokenSecret={"name": "hf"}), {"hf": CONSENT}) == ["hf"]
    assert _check(_endpoint_spec("key"), {"key": CONSENT}) == ["key"]
    # The same Secret named twice is read once.
    both = {**_endpoint_spec("shared"), "hfTokenSecret": {"name": "shared"}}
    assert _check(both, {"shared": CONSENT}) == ["shared"]
    assert _check(_spec(), {}) == []  # no Secret named, nothing read
    # caBundle names a ConfigMap (public data): not a Secret reference.
    spec = _endpoint_spec("key")
    spec["endpoint"]["caBundle"] = {"configMap": "vllm-ca"}
    assert _check(spec, {"key": CONSENT}) == ["key"]


@pytest.mark.parametrize("labels", [{}, {"assay.dev/evaluations": "denied"}, {"assay.dev/other": "allowed"}])
def test_a_secret_without_the_label_is_refused_in_one_sentence(labels: dict[str, str]) -> None:
    with pytest.raises(UserError) as refused:
        _check(_spec(hfTokenSecret={"name": "hf"}), {"hf": labels})
    message = str(refused.value)
    assert message == (
        "spec.hfTokenSecret names Secret 'hf', which lacks the label assay.dev/evaluations=allowed that lets "
        "Evaluations use it: label it with `kubectl label secret hf -n team-a assay.dev/evaluations=allowed` if "
        "the namespace's admin consents, then rerun the Evaluation."
    )


def test_a_missing_secret_and_the_second_reference_are_named() -> None:
    with pytest.raises(
        UserError,
        match=r"^spec.endpoint.apiKeySecret names Secret 'gone', which does not exist in "
        r"namespace team-a: create it, then label it with `kubectl label secret gone",
    ):
        _check({**_endpoint_spec("gone"), "hfTokenSecret": {"name": "hf"}}, {"hf": CONSENT})


def test_the_admins_label_is_the_one_asked_for() -> None:
    label = "example.com/eval-ok=yes"
    assert _check(_spec(hfTokenSecret={"name": "hf"}), {"hf": {"example.com/eval-ok": "yes"}}, label=label) == ["hf"]
    with pytest.raises(UserError, match="example.com/eval-ok=yes"):
        _check(_spec(hfTokenSecret={"name": "hf"}), {"hf": CONSENT}, label=label)


@pytest.mark.parametrize(
    "raw",
    [
        '{"secretConsentLabel": "no-value"}',
        '{"secretConsentLabel": "a b=c"}',
        '{"secretConsentLabel": ""}',
        '{"secretConsentLabel": "k=v=w"}',
    ],
)
def test_a_bad_consent_label_in_the_policy_is_one_sentence(raw: str) -> None:
    with pytest.raises(UserError, match=r"secretConsentLabel must be one Kubernetes label as key=value"):
        AdminPolicy.from_json(raw)
    assert (
        AdminPolicy.from_json('{"secretConsentLabel": "team.example/ok="}').secret_consent_label == "team.example/ok="
    )


def test_only_the_metadata_is_asked_for_and_kept(api: FakeApiServer) -> None:
    api.add_secret("hf", CONSENT)
    metadata = kube.get_metadata("Secret", "v1", namespace=NAMESPACE, name="hf")
    assert metadata == {"name": "hf", "namespace": NAMESPACE, "labels": CONSENT}
    assert api.requests == [
        {
            "method": "GET",
            "path": f"/api/v1/namespaces/{NAMESPACE}/secrets/hf",
            "accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        }
    ]
    # The server held the value, and never sent it: the operator's memory never had it.
    assert not [a for a in api.answers if TOKEN.encode() in a]
    assert kube.get_metadata("Secret", "v1", namespace=NAMESPACE, name="absent") is None


def _evaluation(api: FakeApiServer, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "spec": spec,
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "generation": 1},
    }
    api.evaluations[name] = json.loads(json.dumps(evaluation))
    return evaluation


@pytest.fixture
def known_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's task index is not what is tested here; `arc_easy` and `dummy` are known."""
    monkeypatch.setattr(validation, "validate_with_sources", lambda spec, **_: [])


@pytest.mark.usefixtures("known_tasks")
def test_an_unlabelled_secret_fails_the_evaluation_before_any_child_exists(api: FakeApiServer) -> None:
    api.add_secret("hf")
    state = OperatorState(policy=AdminPolicy())
    handlers.decide_run(_evaluation(api, "tiny", _spec(hfTokenSecret={"name": "hf"})), state=state)
    status = api.evaluations["tiny"]["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert status["phase"] == "Failed" and accepted["status"] == "False" and accepted["reason"] == "InvalidSpec"
    assert status["message"].startswith("spec.hfTokenSecret names Secret 'hf', which lacks the label ")
    assert "`kubectl label secret hf -n team-a assay.dev/evaluations=allowed`" in status["message"]
    assert api.kinds_created() == ["Event"]  # the InvalidSpec Event; no ServiceAccount, Role or Job
    assert api.created[0]["reason"] == "InvalidSpec" and api.created[0]["message"] == status["message"]


@pytest.mark.usefixtures("known_tasks")
def test_a_labelled_secret_is_used(api: FakeApiServer) -> None:
    api.add_secret("hf", CONSENT)
    state = OperatorState(policy=AdminPolicy())
    handlers.decide_run(_evaluation(api, "tiny", _spec(hfTokenSecret={"name": "hf"})), state=state)
    assert api.evaluations["tiny"]["status"]["phase"] != "Failed"
    (job,) = [c for c in api.created if c["kind"] == "Job"]
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
    assert "ServiceAccount" in api.kinds_created()


@needs_helm
def test_the_chart_lets_the_operator_get_secrets_and_nothing_more() -> None:
    assert HELM is not None
    for args in ([], ["--set", "watchNamespaces={team-a}"]):
        out = subprocess.run(
            [HELM, "template", "ev", str(CHART), "--namespace", "assay-system", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (role,) = [
            d
            for d in yaml.safe_load_all(out)
            if d and d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] == "ev-assay"
        ]
        verbs = {res: set(r["verbs"]) for r in role["rules"] if r["apiGroups"] == [""] for res in r["resources"]}
        # `get` by name, for the labels: no list or watch, which would bring every Secret's values.
        assert verbs["secrets"] == {"get"}
