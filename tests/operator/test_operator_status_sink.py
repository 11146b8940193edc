"""The runner's status sink: condensing lm-eval results, throttling, choosing a sink.

KubernetesStatusSink is exercised with a recording stand-in for CustomObjectsApi, and its
retries of the last write through the real kubernetes client against a local HTTP server
that fails on purpose; the e2e suite runs it against a real API server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay.runner.results import status_sink
from assay.runner.results.status_sink import (
    FileStatusSink,
    KubernetesStatusSink,
    NullSink,
    condense_results,
    sink_from_env,
)

LM_EVAL_RESULTS = {
    "results": {
        "arc_easy": {"alias": "arc_easy", "acc,none": 0.6, "acc_stderr,none": 0.01, "acc_norm,none": 0.55,
                     "acc_norm_stderr,none": 0.011},
        "lambada_openai": {"alias": "lambada_openai", "perplexity,none": float("inf"), "perplexity_stderr,none": "N/A",
                           "acc,none": 0.4, "acc_stderr,none": 0.02},
    },
    "groups": {"ai2_arc": {"acc,none": 0.5, "acc_stderr,none": 0.03}},
    "n-samples": {"arc_easy": {"original": 2376, "effective": 10}},
    "versions": {"arc_easy": 1.0, "lambada_openai": 1},
    "samples": {"arc_easy": [{"doc": "never in status"}]},
    "configs": {"arc_easy": {"big": "x" * 1000}},
}  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingCustomObjectsApi:
    """Stand-in for kubernetes.client.CustomObjectsApi: records patches, serves one object."""

    def __init__(self, generation: int = 1) -> None:
        self.patches: list[dict[str, Any]] = []
        self.generation = generation

    def patch_namespaced_custom_object_status(self, group, version, namespace, plural, name, body):  # noqa: ANN001
        assert (group, version, plural) == ("assay.dev", "v1alpha1", "evaluations")
        self.patches.append({"namespace": namespace, "name": name, "body": json.loads(json.dumps(body))})

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):  # noqa: ANN001
        return {"metadata": {"name": name, "generation": self.generation}}


def test_condense_keeps_metrics_and_stderr_never_samples() -> None:
    status = condense_results(LM_EVAL_RESULTS)
    assert status["results"]["arc_easy"] == {
        "acc,none": {"value": 0.6, "stderr": 0.01}, "acc_norm,none": {"value": 0.55, "stderr": 0.011},
    }  # fmt: skip
    # JSON has no inf, lm-eval's "N/A" stderr becomes null.
    assert status["results"]["lambada_openai"]["perplexity,none"] == {"value": None, "stderr": None}
    assert status["groups"] == {"ai2_arc": {"acc,none": {"value": 0.5, "stderr": 0.03}}}
    assert status["nSamples"] == {"arc_easy": {"original": 2376, "effective": 10}}
    assert status["versions"] == {"arc_easy": "1.0", "lambada_openai": "1"}
    text = json.dumps(status, allow_nan=False)
    assert "never in status" not in text and "configs" not in text


def test_condense_bounds_the_size_and_says_so() -> None:
    many = {"results": {f"task_{i}": {f"m{j},none": 0.5 for j in range(20)} for i in range(200)}}
    status = condense_results(many, max_bytes=20_000)
    assert all(len(metrics) == 1 for metrics in status["results"].values())
    assert len(json.dumps(status)) <= 20_000
    assert "truncated to headline metrics" in status["message"]
    tiny = condense_results(many, max_bytes=100)
    assert tiny["results"] == {} and "too large" in tiny["message"]


def test_kubernetes_sink_throttles_progress_and_reports_the_end() -> None:
    api, clock = RecordingCustomObjectsApi(), Clock()
    sink = KubernetesStatusSink(name="ev", namespace="team", generation=1, api=api, min_interval=5, clock=clock)
    sink.progress(1, 100)
    clock.now = 1
    sink.progress(2, 100)  # throttled
    clock.now = 6
    sink.progress(30, 100)
    clock.now = 6.5
    sink.progress(100, 100)  # the last step always goes
    assert [p["body"]["status"]["progress"]["requestsDone"] for p in api.patches] == [1, 30, 100]
    # 29 requests in 6 s since the first report: 70 left take 14 s more.
    assert api.patches[1]["body"]["status"]["progress"] == {"requestsDone": 30, "requestsTotal": 100, "etaSeconds": 14,
                                                            "summary": "30/100 (30%) ETA 14s"}  # fmt: skip
    assert api.patches[0]["body"]["status"]["progress"]["summary"] == "1/100 (1%)"  # no rate yet
    assert api.patches[2]["body"]["status"]["progress"] == {"requestsDone": 100, "requestsTotal": 100,
                                                            "summary": "100/100 (100%)"}  # fmt: skip
    sink.finished(LM_EVAL_RESULTS)
    final = api.patches[-1]
    assert final["name"] == "ev" and final["namespace"] == "team"
    assert final["body"]["status"]["results"]["arc_easy"]["acc,none"]["value"] == 0.6
    assert final["body"]["status"]["runnerMessage"] == final["body"]["status"]["message"] == "Evaluated 2 tasks."
    sink.failed("x" * 5000)
    failed = api.patches[-1]["body"]["status"]
    assert len(failed["message"]) == status_sink.MAX_MESSAGE_CHARS
    assert failed["runnerMessage"] == failed["message"]  # the copy only the runner writes


def test_kubernetes_sink_drops_a_superseded_runs_outcome() -> None:
    api = RecordingCustomObjectsApi(generation=2)
    sink = KubernetesStatusSink(name="ev", namespace="team", generation=1, api=api)
    sink.finished(LM_EVAL_RESULTS)
    assert api.patches == []


def test_kubernetes_sink_survives_api_errors() -> None:
    class Broken(RecordingCustomObjectsApi):
        def patch_namespaced_custom_object_status(self, *args: Any) -> None:
            raise ConnectionRefusedError("connection refused")

    waits: list[float] = []
    sink = KubernetesStatusSink(name="ev", namespace="team", api=Broken(), sleep=waits.append, final_patience=60)
    sink.progress(1, 10)  # a progress write is not retried
    assert waits == []
    sink.finished(LM_EVAL_RESULTS)  # no raise: retried while the patience lasts, then dropped
    assert waits == [1, 2, 4, 8, 15, 15, 15] and sum(waits) <= 60

    class Buggy(RecordingCustomObjectsApi):
        def patch_namespaced_custom_object_status(self, *args: Any) -> None:
            raise TypeError("a bug, not an outage")

    waits.clear()
    KubernetesStatusSink(name="ev", namespace="team", api=Buggy(), sleep=waits.append).finished(LM_EVAL_RESULTS)
    assert waits == []  # not retried


class FlakyApiServer:
    """A real HTTP server for the status subresource: answers the first `failures` PATCHes
    with `status` (503: restarting), then 200; records each body it was sent."""

    def __init__(self, *, failures: int, status: int = 503) -> None:
        import http.server
        import threading

        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PATCH(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                code = status if len(server.bodies) <= failures else 200
                payload = json.dumps({"kind": "Status", "code": code} if code != 200 else body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def api(self) -> Any:
        from kubernetes import client

        configuration = client.Configuration(host=f"http://127.0.0.1:{self.httpd.server_address[1]}")
        return client.CustomObjectsApi(client.ApiClient(configuration))


def test_the_last_write_outlasts_an_api_server_restart_over_real_http() -> None:
    server = FlakyApiServer(failures=3)
    waits: list[float] = []
    sink = KubernetesStatusSink(name="ev", namespace="team", api=server.api(), sleep=waits.append)
    sink.finished(LM_EVAL_RESULTS)
    assert waits == [1, 2, 4] and len(server.bodies) == 4
    assert server.bodies[-1]["status"]["results"]["arc_easy"]["acc,none"]["value"] == 0.6
    server.httpd.shutdown()


def test_a_refused_last_write_is_not_repeated() -> None:
    server = FlakyApiServer(failures=5, status=403)
    waits: list[float] = []
    KubernetesStatusSink(name="ev", namespace="team", api=server.api(), sleep=waits.append).failed("boom")
    assert waits == [] and len(server.bodies) == 1
    server.httpd.shutdown()


def test_file_sink_and_env_selection(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    sink = sink_from_env({"ASSAY_STATUS_FILE": str(path), "ASSAY_PROGRESS_INTERVAL": "0"})
    assert isinstance(sink, FileStatusSink)
    sink.progress(5, 10)
    sink.finished(LM_EVAL_RESULTS)
    written = json.loads(path.read_text())
    assert written["progress"]["requestsDone"] == 5 and "arc_easy" in written["results"]
    assert isinstance(sink_from_env({}), NullSink)


def test_without_credentials_the_env_sink_reports_nowhere(tmp_path: Path) -> None:
    env = {"ASSAY_EVALUATION_NAME": "ev", "ASSAY_EVALUATION_NAMESPACE": "team"}
    code = (
        "import os, sys; from assay.runner.results.status_sink import sink_from_env, NullSink;"
        f"sys.exit(0 if isinstance(sink_from_env({env!r}), NullSink) else 3)"
    )
    run_env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], env=run_env, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0


def test_the_runner_side_never_imports_the_operator_or_kopf() -> None:
    code = (
        "import sys, assay.spec, assay.runner.results.status_sink;"
        "bad = [m for m in sys.modules if m == 'kopf' or m.startswith('assay.operator')];"
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def test_kubernetes_sink_reports_a_resumed_runs_outcome_by_its_job_name() -> None:
    """A suspend/resume changes the generation but not the run: its results must count."""

    class Serving(RecordingCustomObjectsApi):
        def __init__(self, job_name: str) -> None:
            super().__init__(generation=2)
            self.job_name = job_name

        def get_namespaced_custom_object(self, group, version, namespace, plural, name):  # noqa: ANN001
            return {"metadata": {"name": name, "generation": 2}, "status": {"jobName": self.job_name}}

    resumed = Serving("ev-g1")
    KubernetesStatusSink(name="ev", namespace="team", generation=1, job_name="ev-g1", api=resumed).finished(LM_EVAL_RESULTS)
    assert resumed.patches and resumed.patches[-1]["body"]["status"]["results"]["arc_easy"]
    replaced = Serving("ev-g2")
    KubernetesStatusSink(name="ev", namespace="team", generation=1, job_name="ev-g1", api=replaced).finished(LM_EVAL_RESULTS)
    assert replaced.patches == []


def test_the_runner_pod_knows_its_job_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.operator import builders
    from assay.spec import ENV_JOB_NAME, parse_spec

    ref = builders.EvaluationRef(namespace="ns", name="ev", uid="u", generation=1)
    job = builders.job(ref, parse_spec({"model": "dummy", "tasks": ["arc_easy"]}), name="ev-g1")
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[ENV_JOB_NAME] == "ev-g1"
    monkeypatch.setattr(status_sink, "_custom_objects_api", RecordingCustomObjectsApi)
    sink = status_sink.sink_from_env({"ASSAY_EVALUATION_NAME": "ev", "ASSAY_EVALUATION_NAMESPACE": "ns",
                                      "ASSAY_EVALUATION_GENERATION": "1", ENV_JOB_NAME: "ev-g1"})  # fmt: skip
    assert isinstance(sink, status_sink.KubernetesStatusSink) and sink.job_name == "ev-g1"
