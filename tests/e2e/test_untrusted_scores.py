"""Untrusted scores on the real node: an Evaluation of a served model whose endpoint gives
every prompt token the same logprob (llama.cpp's server without echoed prompt logprobs:
every choice scores alike, accuracy at chance, exit 0) ends Succeeded with the condition
ScoresTrusted False and its reason, a Prometheus-visible 0, and a gate that names it as its
baseline is not NoRegression.

The endpoint is a stdlib HTTP server on the bridge's gateway address, where the runner pod
reaches it (as tests/e2e/test_served.py's vLLM server); the runner tokenizes with the tiny
GPT-2 from its cache volume and sends token ids, as it would to vLLM.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.e2e.cluster.network import GATEWAY
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import MODEL_IN_POD, SEED, VOLUMES, hf_spec

pytestmark = pytest.mark.e2e

LIMIT = 24


class _EqualLogprobs(BaseHTTPRequestHandler):
    """/v1/completions with echo: every prompt token at logprob 0, so every choice, whatever its
    length, sums alike."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for index, prompt in enumerate(prompts):
            tokens = prompt if isinstance(prompt, list) else list(range(len(str(prompt).split()) + 1))
            values = [None] + [0.0] * len(tokens)
            choices.append(
                {
                    "index": index,
                    "text": "",
                    "logprobs": {"token_logprobs": values, "top_logprobs": [None] + [{"t": 0.0}] * len(tokens)},
                    "finish_reason": "length",
                }
            )
        raw = json.dumps({"choices": choices}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def degenerate_endpoint(cluster: Cluster) -> Iterator[str]:
    httpd = ThreadingHTTPServer((GATEWAY, 0), _EqualLogprobs)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://{GATEWAY}:{httpd.server_address[1]}/v1/completions"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _condition(evaluation: dict[str, Any], kind: str) -> tuple[str, str, str]:
    (condition,) = [c for c in evaluation["status"]["conditions"] if c["type"] == kind]
    return condition["status"], condition["reason"], condition["message"]


def test_a_degenerate_endpoint_is_succeeded_but_untrusted_and_gates_nothing(
    cluster: Cluster, degenerate_endpoint: str
) -> None:
    served = {
        "model": "local-completions",
        "modelArgs": {"max_length": 64, "max_retries": 1},
        "endpoint": {"url": degenerate_endpoint, "servedModel": "tiny-gpt2", "tokenizer": MODEL_IN_POD},
        "tasks": ["arc_easy"],
        "limit": LIMIT,
        "seed": SEED,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        **VOLUMES,
        "backoffLimit": 0,
    }
    cluster.apply(evaluation_manifest("echoless", **served))
    run = cluster.wait("echoless", "Succeeded", timeout=300)
    status, reason, message = _condition(run, "ScoresTrusted")
    assert (status, reason) == ("False", "SentinelsFailed"), message
    assert message.startswith(f"arc_easy: 100% of {LIMIT} documents scored every choice alike"), message
    assert run["status"]["sentinels"]["trusted"] is False
    assert run["status"]["results"]["arc_easy"]["acc,none"]["value"] is not None  # the scores still landed

    # A strict spec fails the same run, its scores kept.
    cluster.apply(evaluation_manifest("echoless-strict", **{**served, "sentinels": {"strict": True}}))
    strict = cluster.wait("echoless-strict", "Failed", timeout=300)
    assert strict["status"]["reason"] == "ScoresUntrusted" and strict["status"]["results"]

    # The tiny GPT-2 gated against the untrusted run: never a pass.
    cluster.apply(
        evaluation_manifest("gated", **hf_spec(tasks=["arc_easy"], limit=LIMIT, baseline={"evaluation": "echoless"}))
    )
    gated = cluster.wait("gated", "Succeeded", timeout=420)
    status, reason, message = _condition(gated, "Regressed")
    assert reason != "NoRegression" and status != "False", (status, reason, message)
    comparison = gated["status"]["comparison"]
    if comparison["verdict"] == "inconclusive":
        assert "The baseline's scores are not trusted: arc_easy:" in comparison["message"]
    # The doubt comes first among the notes, whatever the verdict.
    assert "The baseline's scores are not trusted: arc_easy:" in comparison["notes"][0], comparison["notes"]
    assert _condition(gated, "ScoresTrusted")[:2] == ("True", "ChecksPassed")
