"""/metrics over HTTPS with a self-signed certificate made at start (`metrics_tls`), and its
token reviews under a flood of made-up tokens (`metrics_auth`).

Everything is real: the certificate is made by the openssl command as in the operator image,
served by the operator's metrics server on 127.0.0.1 and read by urllib's TLS client, and the
reviews go through the operator's API client to a local stand-in for the API server's review
endpoints (`ReviewServer`, which can hold made-up tokens' reviews as a slow API server would).
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.errors import UserError
from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.operator.kube import api_client, rate_limit
from assay.operator.runtime import metrics_tls
from assay.operator.runtime.metrics import EvaluationMetrics
from assay.operator.runtime.metrics_auth import MAX_IN_FLIGHT, TOKEN_REVIEWS, TokenAuthorizer
from tests.e2e.cluster.control_plane import die_with_parent, free_port
from tests.operator import local_prometheus
from tests.operator.helm_chart import CHART, HELM
from tests.operator.review_server import READER, ReviewServer, get, serve

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")


class CountingBucket(rate_limit.TokenBucket):
    """The operator's own API budget, counting the tokens taken from it."""

    taken = 0

    def wait(self) -> float:
        self.taken += 1
        return super().wait()


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ReviewServer, CountingBucket]]:
    reviews = ReviewServer()
    session = api_session.Session(
        credentials.Credentials(server=reviews.url, authorization=lambda: "Bearer operator-token")
    )
    operator_budget = CountingBucket(qps=100, burst=2000)
    monkeypatch.setattr(api_client, "client", lambda: kube_client.ApiClient(session, limiter=operator_budget))
    yield reviews, operator_budget
    reviews.hold.set()
    reviews.server.shutdown()
    reviews.server.server_close()


@pytest.fixture(scope="module")
def made_at_start(tmp_path_factory: pytest.TempPathFactory) -> metrics_tls.TlsFiles:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    return metrics_tls.self_signed(tmp_path_factory.mktemp("self-signed"), names=["ev-assay-metrics", "localhost"])


@needs_openssl
def test_a_self_signed_certificate_is_made_served_and_checked_by_a_real_client(
    made_at_start: metrics_tls.TlsFiles,
) -> None:
    assert (made_at_start.key.stat().st_mode & 0o077) == 0  # the key is the operator's alone
    trusting = ssl.create_default_context(cafile=str(made_at_start.cert))  # verifies the chain and 127.0.0.1
    metrics = EvaluationMetrics()
    metrics.record_completion("team", "succeeded")
    for url in serve(metrics, tls=made_at_start):
        assert url.startswith("https://")
        status, body = get(f"{url}/metrics", context=trusting)
        assert status == 200 and 'assay_evaluations_completed_total{namespace="team",result="succeeded"}' in body
        # What the chart's ServiceMonitor does without a CA: TLS, the certificate not checked.
        skipping = ssl.create_default_context()
        skipping.check_hostname, skipping.verify_mode = False, ssl.CERT_NONE
        assert get(f"{url}/metrics", context=skipping)[0] == 200
        # A client that checks certificates against the system's CAs refuses it: it is self-signed.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"{url}/metrics", timeout=10, context=ssl.create_default_context())
        with pytest.raises(OSError):  # plain HTTP gets no answer
            urllib.request.urlopen(url.replace("https:", "http:") + "/metrics", timeout=10)
    names = ssl._ssl._test_decode_cert(str(made_at_start.cert))  # type: ignore[attr-defined]
    assert ("DNS", "ev-assay-metrics") in names["subjectAltName"] and ("IP Address", "127.0.0.1") in names[
        "subjectAltName"
    ]


def test_without_openssl_the_operator_says_how_else_to_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no openssl on it
    with pytest.raises(UserError, match="openssl command .* is not installed.*metrics.tls.secretName"):
        metrics_tls.self_signed(tmp_path)


@needs_openssl
def test_the_operator_serves_https_unless_told_otherwise_by_its_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.operator import main

    monkeypatch.delenv("ASSAY_METRICS_CERT_DIR", raising=False)
    _, tls = main._metrics_settings(main.parse_args(["--metrics-https"]))
    assert isinstance(tls, metrics_tls.TlsFiles) and tls.cert.is_file()
    assert main._metrics_settings(main.parse_args([]))[1] is None  # the CLI alone: plain HTTP (the chart asks)
    assert main._metrics_settings(main.parse_args(["--metrics-https", "--metrics-port", "0"]))[1] is None


def _until(done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@needs_openssl
def test_a_flood_of_made_up_tokens_neither_holds_up_the_reader_nor_spends_the_operators_budget(
    api: tuple[ReviewServer, CountingBucket], made_at_start: metrics_tls.TlsFiles
) -> None:
    reviews, operator_budget = api
    trusting = ssl.create_default_context(cafile=str(made_at_start.cert))
    for url in serve(EvaluationMetrics(), tls=made_at_start, authorizer=TokenAuthorizer()):
        assert get(f"{url}/metrics", READER, context=trusting)[0] == 200  # reviewed once, then kept
        reviews.hold.clear()  # the API server now sits on every made-up token's review
        answers: dict[int, int] = {}

        def junk(i: int) -> None:
            answers[i] = get(f"{url}/metrics", f"made-up-{i}", context=trusting)[0]  # noqa: B023 - called within this iteration

        callers = [threading.Thread(target=junk, args=(i,)) for i in range(200)]
        for caller in callers:
            caller.start()
        # Each of the 200 is answered, or its review sits in the API server.
        _until(lambda: len(answers) + reviews.held >= 200)  # noqa: B023 - called within this iteration
        held = reviews.held
        # Meanwhile the reader is answered from the cache (a lock held during a review would keep
        # this waiting until the API server lets go, past urllib's 10 s).
        status, body = get(f"{url}/metrics", READER, context=trusting)
        assert status == 200 and "assay_" in body
        # The rest were turned away at once (429), not queued behind the held ones.
        assert 0 < held <= MAX_IN_FLIGHT and set(answers.values()) == {429}
        reviews.hold.set()
        for caller in callers:
            caller.join(60)
        assert sorted(answers.values()).count(401) == held and len(answers) == 200
        assert [p for p, _ in reviews.reviews].count(TOKEN_REVIEWS) == held + 1  # + the reader's
    assert operator_budget.taken == 0  # the reviews have their own budget


def test_callers_with_one_token_share_its_review(api: tuple[ReviewServer, CountingBucket]) -> None:
    reviews, _ = api
    for url in serve(EvaluationMetrics(), authorizer=TokenAuthorizer()):
        reviews.hold.clear()
        answers: list[int] = []
        callers = [
            threading.Thread(target=lambda: answers.append(get(f"{url}/metrics", "the-same-guess")[0]))  # noqa: B023 - called within this iteration
            for _ in range(10)
        ]
        for caller in callers:
            caller.start()
        _until(lambda: reviews.held == 1)
        reviews.hold.set()
        for caller in callers:
            caller.join(60)
        assert answers == [401] * 10 and len(reviews.reviews) == 1


@needs_openssl
@pytest.mark.slow  # a real Prometheus started and waited for until it scrapes: about 6 s
def test_a_real_prometheus_scrapes_the_self_signed_https_as_the_charts_service_monitor_says(
    api: tuple[ReviewServer, CountingBucket], made_at_start: metrics_tls.TlsFiles, tmp_path: Path
) -> None:
    """The ServiceMonitor the chart renders by default (https, insecureSkipVerify, the scraper's own
    token), as a Prometheus Operator would turn it into a scrape job, against the operator's server."""
    if not local_prometheus.BINARY.is_file() or HELM is None:
        pytest.skip(f"{local_prometheus.BINARY} (tests/e2e/cluster/build.sh builds it) or helm is missing")
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--set", "metrics.serviceMonitor.enabled=true"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (monitor,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True} and endpoint["bearerTokenFile"]
    token = tmp_path / "token"
    token.write_text(READER)
    metrics = EvaluationMetrics()
    metrics.record_completion("team", "succeeded")
    for url in serve(metrics, tls=made_at_start, authorizer=TokenAuthorizer()):
        config = tmp_path / "prometheus.yml"
        job = {
            "job_name": "assay-operator",
            "scheme": endpoint["scheme"],
            "metrics_path": endpoint["path"],
            "tls_config": {"insecure_skip_verify": endpoint["tlsConfig"]["insecureSkipVerify"]},
            "authorization": {"credentials_file": str(token)},
            "static_configs": [{"targets": [url.removeprefix("https://")]}],
        }
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}))
        port = free_port()
        log = tmp_path / "prometheus.log"
        with open(log, "wb") as output:
            process = subprocess.Popen(
                [
                    local_prometheus.BINARY,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            try:
                base = f"http://127.0.0.1:{port}"
                series = local_prometheus.wait(
                    lambda: local_prometheus.query(base, 'assay_evaluations_completed_total{namespace="team"}'),  # noqa: B023 - called within this iteration
                    lambda: f"Prometheus scraped nothing: {log.read_text()[-2000:]}",  # noqa: B023 - called within this iteration
                    timeout=60,
                )
                assert float(series[0]["value"][1]) == 1.0
                (target,) = local_prometheus.api(f"{base}/api/v1/targets")["activeTargets"]
                assert target["health"] == "up" and target["scrapeUrl"].startswith("https://"), target
            finally:
                process.terminate()
                process.wait(15)
