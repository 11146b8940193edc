"""Secrets by consent, endpoints by policy (issue 23), on the real node with the chart's defaults.

- A Secret an Evaluation names is used only with the admin's label
  (`policy.secretConsentLabel`, default assay.dev/evaluations=allowed): without it the
  Evaluation fails before any Job or ServiceAccount exists; with it, it runs.
- The runner never sends the API key to another server: an endpoint that redirects to
  another host (the bridge's Service address, 10.244.255.1, where the host answers too)
  fails the run, and that host never sees a request.
- The chart's ValidatingAdmissionPolicy refuses an endpoint URL with a password in it at
  `kubectl apply`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.e2e.cluster.network import API_ADDRESS, GATEWAY
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import MODEL_IN_POD, SEED, VOLUMES, dummy_spec

pytestmark = pytest.mark.e2e

TOKEN = "hf_" + "Wm4" * 12
API_KEY = "sk-" + "e2eKey9" * 4
CONSENT = "assay.dev/evaluations=allowed"


def _secret(cluster: Cluster, name: str, *, key: str, value: str, consent: bool) -> None:
    cluster.kubectl("create", "secret", "generic", name, f"--from-literal={key}={value}")
    if consent:
        cluster.kubectl("label", "secret", name, CONSENT)


def _refused(cluster: Cluster, name: str, spec: dict[str, Any]) -> str:
    """Apply `spec`; wait until it is refused; check that nothing ran. Returns the message."""
    cluster.apply(evaluation_manifest(name, **spec))
    status = cluster.wait(name, "Failed", timeout=60)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "InvalidSpec", status
    assert status["message"].count(". ") == 0 and status["message"].endswith("."), status["message"]
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
    assert cluster.items("serviceaccounts", f"assay.dev/evaluation={name}") == []
    return str(status["message"])


def test_a_secret_is_used_only_with_the_consent_label(cluster: Cluster) -> None:
    _secret(cluster, "hf", key="token", value=TOKEN, consent=False)
    message = _refused(cluster, "tenant", dummy_spec(hfTokenSecret={"name": "hf"}))
    assert message == (
        f"spec.hfTokenSecret names Secret 'hf', which lacks the label {CONSENT} that lets Evaluations use it: label "
        f"it with `kubectl label secret hf -n {cluster.namespace} {CONSENT}` if the namespace's admin consents, "
        "then rerun the Evaluation."
    )
    missing = _refused(cluster, "missing", dummy_spec(hfTokenSecret={"name": "nowhere"}))
    assert missing.startswith(
        f"spec.hfTokenSecret names Secret 'nowhere', which does not exist in namespace "
        f"{cluster.namespace}: create it, then label it"
    )

    # The fix the message names; the next generation (suspended: nothing needs to run) is accepted.
    cluster.kubectl("label", "secret", "hf", CONSENT)
    cluster.apply(evaluation_manifest("tenant", **dummy_spec(hfTokenSecret={"name": "hf"}, suspend=True)))
    (job,) = cluster.wait_for("the suspended Job", lambda: cluster.items("jobs", "assay.dev/evaluation=tenant"))
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
    status = cluster.evaluation("tenant")["status"]
    assert {c["type"]: c for c in status["conditions"]}["Accepted"]["status"] == "True", status
    # Labels were read, never the value: the token is nowhere the operator writes.
    texts = [json.dumps(cluster.items("evaluations")), json.dumps(cluster.items("events")), cluster.operator.logs()]
    assert not [t for t in texts if TOKEN in t]


class _Recorder:
    """An HTTP server on the host, at an address pods reach, recording each request's headers."""

    def __init__(self, host: str, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.seen: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append(dict(self.headers))
                answer(self)

            do_GET = do_POST

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.base = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def two_hosts() -> Iterator[tuple[_Recorder, _Recorder]]:
    """`endpoint` on the bridge's gateway redirects every request to `other`, on another address."""

    def completion(handler: BaseHTTPRequestHandler) -> None:
        data = json.dumps({"choices": [{"text": "", "logprobs": None}]}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    other = _Recorder(API_ADDRESS, completion)

    def redirect(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"{other.base}{handler.path}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    endpoint = _Recorder(GATEWAY, redirect)
    try:
        yield endpoint, other
    finally:
        endpoint.close()
        other.close()


def test_an_endpoint_redirecting_to_another_host_never_hands_it_the_key(
    cluster: Cluster, two_hosts: tuple[_Recorder, _Recorder]
) -> None:
    endpoint, other = two_hosts
    _secret(cluster, "vllm-key", key="api-key", value=API_KEY, consent=True)
    spec = {
        "model": "local-completions",
        "modelArgs": {"max_retries": 1},
        "endpoint": {
            "url": f"{endpoint.base}/v1/completions",
            "servedModel": "tiny",
            "tokenizer": MODEL_IN_POD,
            "apiKeySecret": {"name": "vllm-key"},
        },
        "tasks": ["arc_easy"],
        "limit": 2,
        "seed": SEED,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        **VOLUMES,
        "backoffLimit": 0,
    }
    cluster.apply(evaluation_manifest("redirected", **spec))
    status = cluster.wait("redirected", "Failed", timeout=300)["status"]
    assert f"redirected to another server, {other.base} (not {endpoint.base})" in status["message"], status["message"]
    assert endpoint.seen and all(h.get("Authorization") == f"Bearer {API_KEY}" for h in endpoint.seen)
    assert other.seen == []
    assert API_KEY not in json.dumps(status)


def test_an_endpoint_url_with_a_password_is_refused_at_admission(cluster: Cluster) -> None:
    spec = dummy_spec(
        model="local-completions",
        endpoint={"url": f"http://user:s3cret@{GATEWAY}:9/v1/completions", "tokenizer": MODEL_IN_POD},
    )
    deadline = time.monotonic() + 60
    while True:
        # A new ValidatingAdmissionPolicy takes a moment to be enforced; until then the operator refuses it.
        applied = cluster.apply(evaluation_manifest("userinfo", **spec), check=False)
        if applied.returncode != 0 or time.monotonic() > deadline:
            break
        cluster.kubectl("delete", "evaluation", "userinfo", "--wait=true")
        time.sleep(2)
    assert applied.returncode != 0, applied.stdout
    assert "ValidatingAdmissionPolicy" in applied.stderr and "denied request" in applied.stderr, applied.stderr
    assert "must not hold a user name or password" in applied.stderr, applied.stderr
    assert cluster.kubectl("get", "evaluation", "userinfo", check=False).returncode != 0
