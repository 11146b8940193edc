"""The runner's status sink: condensing lm-eval results, throttling, choosing a sink.

KubernetesStatusSink is exercised with a recording stand-in for its client, and its
retries of the last write, its identity test and its refusals through the real client
(assay.kube) against a local HTTP server (`ApiServer` applies JSON patches as the API server
does: all or nothing, 422 when a `test` fails); the e2e suite runs it against a real one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from assay.kube import api_session, credentials
from assay.kube import client as kube_client
from assay.run_results import RunResults
from assay.runner.results import status_sink
from assay.runner.results.status_sink import (
    FileStatusSink,
    KubernetesStatusSink,
    NullSink,
    ResultsNotRecorded,
    condense_results,
    sink_from_env,
)
from tests.status_api import ApiServer

LM_EVAL_RESULTS = {
    "results": {
        "arc_easy": {
            "alias": "arc_easy",
            "acc,none": 0.6,
            "acc_stderr,none": 0.01,
            "acc_norm,none": 0.55,
            "acc_norm_stderr,none": 0.011,
        },
        "lambada_openai": {
            "alias": "lambada_openai",
            "perplexity,none": float("inf"),
            "perplexity_stderr,none": "N/A",
            "acc,none": 0.4,
            "acc_stderr,none": 0.02,
        },
    },
    "groups": {"ai2_arc": {"acc,none": 0.5, "acc_stderr,none": 0.03}},
    "n-samples": {"arc_easy": {"original": 2376, "effective": 10}},
    "versions": {"arc_easy": 1.0, "lambada_openai": 1},
    "samples": {"arc_easy": [{"doc": "never in status"}]},
    "configs": {"arc_easy": {"big": "x" * 1000}},
}
RUN = RunResults.from_lmeval_dict(LM_EVAL_RESULTS)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class RecordingClient:
    """Stand-in for the sink's assay.kube client: records patches, serves one object."""

    def __init__(self, generation: int = 1) -> None:
        self.patches: list[dict[str, Any]] = []
        self.generation = generation

    def request(self, method: str, url: str, *, body: Any = None, content_type: str = "application/json") -> Any:
        _, group, version, _, namespace, plural, name, *subresource = url.split("/")[1:]
        assert (group, version, plural) == ("assay.dev", "v1alpha1", "evaluations")
        if method == "GET":
            return {"metadata": {"name": name, "generation": self.generation}}
        assert (method, subresource) == ("PATCH", ["status"])
        self.patches.append(
            {
                "namespace": namespace,
                "name": name,
                "body": _as_merge_patch(json.loads(json.dumps(body))),
                "content_type": content_type,
            }
        )


def _as_merge_patch(body: Any) -> dict[str, Any]:
    """A JSON patch of `add`s under /status, read as the merge patch it amounts to."""
    if isinstance(body, dict):
        return body
    assert body[0]["op"] == "test"
    return {"status": {op["path"].removeprefix("/status/"): op["value"] for op in body[1:]}}


def test_condense_keeps_metrics_and_stderr_never_samples() -> None:
    status = condense_results(RUN)
    assert status["results"]["arc_easy"] == {
        "acc,none": {"value": 0.6, "stderr": 0.01},
        "acc_norm,none": {"value": 0.55, "stderr": 0.011},
    }
    # JSON has no inf, lm-eval's "N/A" stderr becomes null.
    assert status["results"]["lambada_openai"]["perplexity,none"] == {"value": None, "stderr": None}
    assert status["groups"] == {"ai2_arc": {"acc,none": {"value": 0.5, "stderr": 0.03}}}
    assert status["nSamples"] == {"arc_easy": {"original": 2376, "effective": 10}}
    assert status["versions"] == {"arc_easy": "1.0", "lambada_openai": "1"}
    text = json.dumps(status, allow_nan=False)
    assert "never in status" not in text and "configs" not in text


def test_condense_bounds_the_size_and_says_so() -> None:
    many = {"results": {f"task_{i}": {f"m{j},none": 0.5 for j in range(20)} for i in range(200)}}
    status = condense_results(RunResults.from_lmeval_dict(many), max_bytes=20_000)
    assert all(len(metrics) == 1 for metrics in status["results"].values())
    assert len(json.dumps(status)) <= 20_000
    assert "truncated to headline metrics" in status["message"]
    tiny = condense_results(RunResults.from_lmeval_dict(many), max_bytes=100)
    assert tiny["results"] == {} and "too large" in tiny["message"]


def test_kubernetes_sink_writes_progress_on_a_visible_change_at_most_once_per_interval() -> None:
    api, clock = RecordingClient(), Clock()
    sink = KubernetesStatusSink(name="ev", namespace="team", generation=1, api=api, min_interval=5, clock=clock)
    sink.wall = lambda: 1_700_000_000.0 + clock.now
    for done, at in ((0, 0), (1, 1), (2, 6), (30, 6.5), (31, 12), (31, 13), (99, 14), (100, 21)):
        clock.now = at
        sink.progress(done, 100)
    # 0 (the first step); 1 and 30 too soon after a write; 2 %; 31 %; 31 again shows nothing new;
    # 99 too soon; 100, the last step, always.
    assert [p["body"]["status"]["progress"]["requestsDone"] for p in api.patches] == [0, 2, 31, 100]
    assert api.patches[2]["body"]["status"]["progress"] == {
        "requestsDone": 31,
        "requestsTotal": 100,
        "summary": "31/100 (31%)",
        "updated": "2023-11-14T22:13:32.000Z",
    }  # no ETA: readers compute it (tests/operator/decide/test_operator_progress_budget.py)
    assert api.patches[1]["body"]["status"]["timing"]["requestsStarted"] == "2023-11-14T22:13:20.000Z"
    assert api.patches[3]["body"]["status"]["progress"]["summary"] == "100/100 (100%)"
    sink.progress(100, 100)  # the end, reported twice, is written once
    assert len(api.patches) == 4
    sink.finished(RUN)
    final = api.patches[-1]
    assert final["name"] == "ev" and final["namespace"] == "team"
    assert final["body"]["status"]["results"]["arc_easy"]["acc,none"]["value"] == 0.6
    assert final["body"]["status"]["runnerMessage"] == final["body"]["status"]["message"] == "Evaluated 2 tasks."
    # Tested against the run's generation (no Job name known), sent as a JSON patch.
    assert {p["content_type"] for p in api.patches} == {"application/json-patch+json"}
    sink.failed("x" * 5000)
    failed = api.patches[-1]["body"]["status"]
    assert len(failed["message"]) == status_sink.MAX_MESSAGE_CHARS
    assert failed["runnerMessage"] == failed["message"]  # the copy only the runner writes


def test_kubernetes_sink_survives_api_errors() -> None:
    class Broken(RecordingClient):
        def request(self, *args: Any, **kwargs: Any) -> None:
            raise ConnectionRefusedError("connection refused")

    waits: list[float] = []
    sink = KubernetesStatusSink(name="ev", namespace="team", api=Broken(), sleep=waits.append, final_patience=60)
    sink.progress(1, 10)  # a progress write is not retried (and never fails the run)
    assert waits == []
    with pytest.raises(ResultsNotRecorded, match="connection refused"):
        sink.finished(RUN)  # retried while the patience lasts, then the run has failed
    assert waits == [1, 2, 4, 8, 15, 15, 15] and sum(waits) <= 60

    class Buggy(RecordingClient):
        def request(self, *args: Any, **kwargs: Any) -> None:
            raise TypeError("a bug, not an outage")

    waits.clear()
    with pytest.raises(ResultsNotRecorded, match="a bug, not an outage"):
        KubernetesStatusSink(name="ev", namespace="team", api=Buggy(), sleep=waits.append).finished(RUN)
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
            def do_PATCH(self) -> None:
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
        server = credentials.Credentials(server=f"http://127.0.0.1:{self.httpd.server_address[1]}")
        return kube_client.ApiClient(api_session.Session(server))


def test_the_last_write_outlasts_an_api_server_restart_over_real_http() -> None:
    server = FlakyApiServer(failures=3)
    waits: list[float] = []
    sink = KubernetesStatusSink(name="ev", namespace="team", api=server.api(), sleep=waits.append)
    sink.finished(RUN)
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
    assert isinstance(sink, FileStatusSink) and sink.gate.min_interval == 0
    sink.progress(5, 10)
    sink.finished(RUN)
    written = json.loads(path.read_text())
    assert written["progress"]["requestsDone"] == 5 and "arc_easy" in written["results"]
    assert isinstance(sink_from_env({}), NullSink)


def test_without_credentials_the_env_sink_reports_nowhere(tmp_path: Path) -> None:
    env = {"ASSAY_EVALUATION_NAME": "ev", "ASSAY_EVALUATION_NAMESPACE": "team"}
    # It reports nothing, and cannot call the run a success: the operator would find no scores.
    code = (
        "import os, sys; from assay.runner.results.status_sink import sink_from_env, NullSink, ResultsNotRecorded;"
        "from assay.run_results import RunResults;"
        f"sink = sink_from_env({env!r}); sink.progress(1, 2)\n"
        "try:\n    sink.finished(RunResults(tasks={}))\nexcept ResultsNotRecorded as error:\n"
        "    sys.exit(0 if isinstance(sink, NullSink) and 'credentials' in str(error) else 4)\n"
        "sys.exit(3)"
    )
    run_env = {"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "missing"), "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], env=run_env, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0


def test_the_runner_side_never_imports_the_operator_kopf_or_the_kubernetes_package() -> None:
    code = (
        "import sys, assay.spec, assay.runner.results.status_sink;"
        "bad = [m for m in sys.modules if m in ('kopf', 'kubernetes') or m.startswith('assay.operator')];"
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def test_the_runner_pod_knows_its_job_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.operator.build import builders
    from assay.spec import ENV_JOB_NAME, parse_spec

    ref = builders.EvaluationRef(namespace="ns", name="ev", uid="u", generation=1)
    job = builders.job(ref, parse_spec({"model": "dummy", "tasks": ["arc_easy"]}), name="ev-g1")
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[ENV_JOB_NAME] == "ev-g1"
    monkeypatch.setattr(status_sink, "_cluster_client", RecordingClient)
    sink = status_sink.sink_from_env(
        {
            "ASSAY_EVALUATION_NAME": "ev",
            "ASSAY_EVALUATION_NAMESPACE": "ns",
            "ASSAY_EVALUATION_GENERATION": "1",
            ENV_JOB_NAME: "ev-g1",
        }
    )
    assert isinstance(sink, status_sink.KubernetesStatusSink) and sink.job_name == "ev-g1"


# --- against a local HTTP server that applies patches as the API server does -------------


@pytest.fixture()
def api_server() -> Any:
    server = ApiServer()
    yield server
    server.httpd.shutdown()


def test_the_scores_land_in_the_runs_own_status_then_the_files_outcome(api_server: ApiServer) -> None:
    sink = api_server.sink()
    sink.progress(3, 10)
    assert sink.finished(RUN) is True
    sink.output(
        written=False, message="The results files could not be written under /output/ev/g1 (No space left on device)."
    )
    status = api_server.object["status"]
    assert status["progress"]["requestsDone"] == 3 and status["jobName"] == "ev-g1"
    assert status["results"]["arc_easy"]["acc,none"]["value"] == 0.6 and status["runnerMessage"] == "Evaluated 2 tasks."
    assert status["outputFiles"] == {
        "written": False,
        "message": "The results files could not be written under /output/ev/g1 (No space left on device).",
    }
    assert {kind for method, kind in api_server.requests if method == "PATCH"} == {"application/json-patch+json"}


def test_a_superseded_run_never_writes_into_the_newer_runs_status(api_server: ApiServer) -> None:
    """The check and the write are one request: the operator started ev-g2 (and cleared the
    results) after this run's last look; the API server refuses the whole patch."""
    sink = api_server.sink()
    sink.progress(1, 10)
    api_server.object["status"] = {"jobName": "ev-g2", "progress": {"requestsDone": 0}}
    sink.progress(9, 10)
    assert sink.finished(RUN) is False  # not recorded, and not this run's failure either
    sink.output(written=True, message="Results written to /output/ev/g1/x.json.")
    sink.failed("late")
    assert api_server.object["status"] == {"jobName": "ev-g2", "progress": {"requestsDone": 0}}
    assert api_server.waits == []


def test_a_resumed_run_keeps_its_job_and_its_outcome_counts() -> None:
    """A suspend/resume changes the generation but not the run (its Job name)."""
    server = ApiServer(generation=2)
    assert server.sink(generation=1).finished(RUN) is True
    assert server.object["status"]["results"]["arc_easy"]
    # Without a Job name the generation identifies the run: a newer one supersedes it.
    assert server.sink(job_name=None, generation=1).finished(RUN) is False
    server.httpd.shutdown()


def test_refused_scores_fail_the_run_at_once(api_server: ApiServer) -> None:
    api_server.refuse = 403  # the runner's RoleBinding was deleted
    sink = api_server.sink()
    sink.progress(1, 10)  # dropped, logged
    with pytest.raises(ResultsNotRecorded, match=r"HTTP 403 Forbidden: .*cannot patch resource"):
        sink.finished(RUN)
    assert api_server.waits == []  # a refusal is not retried
    assert "results" not in api_server.object["status"]


def test_an_invalid_status_is_not_mistaken_for_a_newer_run(api_server: ApiServer) -> None:
    """422 also means "invalid": the status still names this run, so the scores are lost."""
    api_server.invalid = True
    with pytest.raises(ResultsNotRecorded, match="is invalid"):
        api_server.sink().finished(RUN)
    assert ("GET", None) in api_server.requests  # looked before calling it lost


def test_an_api_server_away_past_the_patience_fails_the_run(api_server: ApiServer) -> None:
    api = api_server.api()
    api_server.httpd.shutdown()
    api_server.httpd.server_close()
    sink = KubernetesStatusSink(
        name="ev", namespace="team", job_name="ev-g1", api=api, sleep=api_server.waits.append, final_patience=5
    )
    with pytest.raises(ResultsNotRecorded):
        sink.finished(RUN)
    assert api_server.waits == [1, 2]


def test_a_file_sink_that_cannot_write_loses_the_scores(tmp_path: Path) -> None:
    sink = FileStatusSink(tmp_path / "no_such_dir" / "status.json", min_interval=0)
    sink.progress(1, 2)  # logged, not raised
    with pytest.raises(ResultsNotRecorded, match="No such file or directory"):
        sink.finished(RUN)


@pytest.mark.parametrize(
    ("given", "seconds"),
    [(None, 5.0), ("15", 15.0), (" 50 ", 50.0), ("0", 0.0), ("soon", 5.0), ("-3", 5.0), ("nan", 5.0)],
)
def test_the_progress_interval_is_the_operators_or_the_default(given: str | None, seconds: float) -> None:
    env = {"ASSAY_STATUS_FILE": "/nonexistent/status.json"}
    if given is not None:
        env["ASSAY_PROGRESS_INTERVAL"] = given
    sink = sink_from_env(env)
    assert isinstance(sink, FileStatusSink) and sink.gate.min_interval == seconds


def test_over_http_only_visible_changes_reach_the_status(api_server: ApiServer) -> None:
    """A run of 1,000 requests reported after every one, with the operator's 15 s interval and
    requests answered 2 a second: one write per 15 s (a percent passes in each), the last one
    always; every write lands as a JSON patch on the run's own status."""
    clock = Clock()
    sink = api_server.sink(min_interval=15, clock=clock)
    for done in range(0, 1_001):
        clock.now = done / 2
        sink.progress(done, 1_000)
    patches = [b for b in api_server.patches if isinstance(b, list)]
    written = [next(op["value"]["requestsDone"] for op in b if op["path"] == "/status/progress") for b in patches]
    assert written[0] == 0 and written[-1] == 1_000
    assert all(b - a >= 30 for a, b in zip(written, written[1:-1], strict=False))  # 15 s at 2 a second
    assert len(written) == 1 + 500 // 15 + 1
    assert api_server.object["status"]["progress"]["summary"] == "1000/1000 (100%)"
    assert "etaSeconds" not in api_server.object["status"]["progress"]
