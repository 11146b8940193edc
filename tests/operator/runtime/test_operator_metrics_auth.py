"""/metrics for bearer tokens the API server vouches for (`metrics_auth`, `metrics_server`).

Both ends are real HTTP: the operator's metrics server on 127.0.0.1, and a local stand-in
for the API server's TokenReview and SubjectAccessReview endpoints, reached through the
operator's own API client (`api_client.request` over `api_session`). The e2e suite
(tests/e2e/test_tenant_metrics.py) runs the same against kube-apiserver's real reviews.
"""

from __future__ import annotations

import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import api_client, rate_limit
from assay.operator.runtime.metrics import EvaluationMetrics
from assay.operator.runtime.metrics_auth import (
    ACCESS_REVIEWS,
    ALLOWED_TTL,
    DENIED_TTL,
    MAX_DENIED,
    TOKEN_REVIEWS,
    TokenAuthorizer,
    Verdict,
)
from assay.operator.runtime.metrics_tls import TlsFiles
from tests.operator.review_server import READER, STRANGER, USERS, ReviewServer, get, serve


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReviewServer]:
    reviews = ReviewServer()
    session = api_session.Session(
        credentials.Credentials(server=reviews.url, authorization=lambda: "Bearer operator-token")
    )
    monkeypatch.setattr(api_client, "client", lambda: kube_client.ApiClient(session))
    yield reviews
    reviews.server.shutdown()
    reviews.server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def secured(api: ReviewServer, clock: Clock) -> Iterator[str]:
    metrics = EvaluationMetrics()
    metrics.record_completion("team", "succeeded")
    yield from serve(metrics, authorizer=TokenAuthorizer(clock=clock))


def test_no_token_401_a_stranger_403_the_reader_200(secured: str, api: ReviewServer) -> None:
    status, body = get(f"{secured}/metrics")
    assert status == 401 and "bearer token" in body and not api.reviews  # nothing to ask the API server
    assert get(f"{secured}/metrics", "made-up")[0] == 401
    assert get(f"{secured}/metrics", STRANGER)[0] == 403
    status, body = get(f"{secured}/metrics", READER)
    assert status == 200 and 'assay_evaluations_completed_total{namespace="team",result="succeeded"} 1.0' in body
    # The reviews the operator sent, as controller-runtime's filter sends them.
    ((path, access),) = [r for r in api.reviews if r[0] == ACCESS_REVIEWS and r[1]["spec"]["user"] == USERS[READER]]
    assert access["spec"] == {
        "user": USERS[READER],
        "uid": "u-1",
        "groups": ["g"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert get(f"{secured}/other", READER)[0] == 404


def test_an_allowed_answer_is_kept_five_minutes_a_refusal_thirty_seconds(
    secured: str, api: ReviewServer, clock: Clock
) -> None:
    for _ in range(5):
        assert get(f"{secured}/metrics", READER)[0] == 200
        assert get(f"{secured}/metrics", STRANGER)[0] == 403
        assert get(f"{secured}/metrics", "made-up")[0] == 401
    assert [p for p, _ in api.reviews] == [TOKEN_REVIEWS, ACCESS_REVIEWS] * 2 + [TOKEN_REVIEWS]
    clock.now += DENIED_TTL  # the refusals are asked again; the reader is not
    for token in (READER, STRANGER, "made-up"):
        get(f"{secured}/metrics", token)
    assert [b["spec"].get("token") or b["spec"]["user"] for _, b in api.reviews[5:]] == [
        STRANGER,
        USERS[STRANGER],
        "made-up",
    ]
    clock.now += ALLOWED_TTL - DENIED_TTL  # five minutes after its review: the reader is asked again
    assert get(f"{secured}/metrics", READER)[0] == 200
    assert len(api.reviews) == 10


def test_an_api_server_that_cannot_answer_is_503_and_not_remembered(secured: str, api: ReviewServer) -> None:
    api.failing = True
    status, body = get(f"{secured}/metrics", READER)
    assert status == 503 and "could not check" in body
    api.failing = False
    assert get(f"{secured}/metrics", READER)[0] == 200


def test_without_an_authorizer_metrics_are_open() -> None:
    for url in serve(EvaluationMetrics()):
        assert get(f"{url}/metrics")[0] == 200


def test_the_authorizer_keeps_no_token_and_a_flood_of_refusals_pushes_out_no_reader() -> None:
    def post(path: str, body: dict[str, Any]) -> Any:
        if path == ACCESS_REVIEWS:
            return {"status": {"allowed": True}}
        known = body["spec"]["token"] == READER
        return {"status": {"authenticated": known, "user": {"username": USERS[READER]} if known else {}}}

    unlimited = rate_limit.TokenBucket(qps=1e9, burst=10**9)
    authorizer = TokenAuthorizer(post=post, budget=unlimited)
    assert authorizer.verdict(READER) is Verdict.ALLOWED
    for i in range(MAX_DENIED + 500):
        assert authorizer.verdict(f"guess-{i}") is Verdict.UNAUTHENTICATED
    assert authorizer.cached() == (1, MAX_DENIED)  # bounded, and the reader is still there
    kept = [*authorizer._allowed, *authorizer._denied]
    assert all(isinstance(k, bytes) and len(k) == 32 for k in kept)  # digests, not tokens


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-subj",
            "/CN=assay-metrics.test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return root


def test_https_with_the_mounted_certificate(certificate: Path, api: ReviewServer) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate / "tls.crt"))
    for url in serve(EvaluationMetrics(), tls=TlsFiles(certificate), authorizer=TokenAuthorizer()):
        assert get(f"{url}/metrics", READER, context=trusted)[0] == 200
        assert get(f"{url}/metrics", context=trusted)[0] == 401
        with pytest.raises(OSError):  # plain HTTP gets no answer
            urllib.request.urlopen(url.replace("https:", "http:") + "/metrics", timeout=10)


def test_a_certificate_directory_without_the_files_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no tls.crt and tls.key"):
        TlsFiles(tmp_path)


def test_the_operator_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.operator import main

    monkeypatch.delenv("ASSAY_METRICS_SECURE", raising=False)
    monkeypatch.delenv("ASSAY_METRICS_CERT_DIR", raising=False)
    args = main.parse_args([])
    assert args.metrics_secure is False and args.metrics_cert_dir is None
    args = main.parse_args(["--metrics-secure", "--metrics-cert-dir", "/etc/assay/metrics-tls"])
    assert args.metrics_secure is True and args.metrics_cert_dir == "/etc/assay/metrics-tls"
    monkeypatch.setenv("ASSAY_METRICS_SECURE", "true")
    assert main.parse_args([]).metrics_secure is True
    assert main.parse_args(["--no-metrics-secure"]).metrics_secure is False
    monkeypatch.setenv("ASSAY_METRICS_SECURE", "perhaps")
    with pytest.raises(UserError, match="ASSAY_METRICS_SECURE='perhaps' is neither true nor false"):
        main.parse_args([])
