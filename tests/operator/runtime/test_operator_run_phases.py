"""A run's cold path: rank 0's marks in status.timing, the phases between them and
`assay_run_phase_seconds`, from a real status sink to a real Prometheus registry."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from assay.operator.decide import run_phases
from assay.operator.runtime.run_phase_metrics import RunPhaseMetrics
from assay.run_results import RunResults
from assay.runner import doc_work
from assay.runner.results import run_timing
from assay.runner.results.status_sink import FileStatusSink

RESULTS = RunResults.from_lmeval_dict(
    {
        "results": {"arc_easy": {"acc,none": 0.5, "acc_stderr,none": 0.01}},
        "n-samples": {"arc_easy": {"original": 4, "effective": 4}},
        "versions": {"arc_easy": 1},
    }
)


def _at(seconds: float) -> str:
    return run_timing.iso(seconds)


def test_a_process_knows_when_it_started() -> None:
    before = time.time()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(0.5); "
            "from assay.runner.results.run_timing import process_start_time; print(process_start_time())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = time.time()
    started = float(out)
    # /proc/stat's boot time is in whole seconds: the start is known to within one.
    assert before - 1.0 <= started <= after - 0.5 + 0.05, (before, started, after)


def test_the_sink_marks_each_moment_once_and_sends_them_with_every_write(tmp_path: Path) -> None:
    sink = FileStatusSink(tmp_path / "status.json", min_interval=0)
    wall = iter([1000.0, 1500.0, 2000.0, 3000.0])  # one read per report, one at the end
    sink.wall = lambda: next(wall)
    sink.progress(0, 8)
    written = json.loads((tmp_path / "status.json").read_text())
    assert written["timing"]["requestsStarted"] == "1970-01-01T00:16:40.000Z"
    assert written["timing"]["runnerStarted"] <= _at(time.time())  # this test process's own start
    sink.progress(0, 8)  # a second start changes nothing
    sink.progress(4, 8)
    assert sink.status["timing"]["requestsStarted"] == "1970-01-01T00:16:40.000Z"
    assert sink.finished(RESULTS)
    assert sink.status["timing"]["finished"] == "1970-01-01T00:50:00.000Z"


def test_the_model_is_told_nothing_before_rank_0_reports_the_start() -> None:
    calls: list[tuple[str, int]] = []

    class Model:
        def loglikelihood(self, requests: list[object]) -> list[tuple[float, bool]]:
            calls.append(("model", len(requests)))
            return [(-1.0, True) for _ in requests]

    class Instance:
        request_type, repeats, task_name, request = "loglikelihood", 1, "t", ("a", "b")

        def __init__(self) -> None:
            self.resps: list[object] = []

    doc_work.run_requests(
        Model(), [Instance(), Instance()], lambda done, total: calls.append(("progress", done)), global_total=2
    )
    assert calls == [("progress", 0), ("model", 2), ("progress", 2)]


STATUS = {
    "phase": "Succeeded",
    "jobName": "ev-g1",
    "startTime": "2026-12-03T10:00:00Z",
    "timing": {
        "runnerStarted": "2026-12-03T10:00:07.500Z",
        "requestsStarted": "2026-12-03T10:00:12Z",
        "finished": "2026-12-03T10:01:00Z",
    },
    "completionTime": "2026-12-03T10:01:02Z",
}


def test_the_phases_add_up_to_the_run() -> None:
    assert run_phases.phase_seconds(STATUS) == {"pending": 7.5, "startup": 4.5, "evaluating": 48.0, "finishing": 2.0}
    skewed = {**STATUS, "timing": {**STATUS["timing"], "runnerStarted": "2026-12-03T09:59:59Z"}}
    assert run_phases.phase_seconds(skewed)["pending"] == 0.0
    for missing in ("startTime", "completionTime"):
        assert run_phases.phase_seconds({k: v for k, v in STATUS.items() if k != missing}) is None
    assert run_phases.phase_seconds({**STATUS, "timing": {"runnerStarted": "2026-12-03T10:00:07Z"}}) is None
    assert run_phases.phase_seconds({**STATUS, "timing": "soon"}) is None


def _counts(registry: CollectorRegistry) -> dict[str, float]:
    return {
        phase: registry.get_sample_value("assay_run_phase_seconds_count", {"phase": phase}) or 0.0
        for phase in run_phases.PHASES
    }


def test_each_run_is_counted_once_and_only_when_it_succeeded_while_watched() -> None:
    registry = CollectorRegistry()
    metrics = RunPhaseMetrics(registry, since=datetime.datetime(2026, 12, 3, 9, tzinfo=datetime.timezone.utc))
    key = ("team-a", "ev")
    metrics.observe(key, {**STATUS, "phase": "Running"}, succeeded=False)
    assert _counts(registry) == dict.fromkeys(run_phases.PHASES, 0.0)
    for _ in range(3):  # every later status event of the same run
        metrics.observe(key, STATUS, succeeded=True)
    assert _counts(registry) == dict.fromkeys(run_phases.PHASES, 1.0)
    assert registry.get_sample_value("assay_run_phase_seconds_sum", {"phase": "evaluating"}) == 48.0
    assert registry.get_sample_value("assay_run_phase_seconds_bucket", {"phase": "startup", "le": "5.0"}) == 1.0
    metrics.observe(key, {**STATUS, "jobName": "ev-g2"}, succeeded=True)  # a re-run
    assert _counts(registry)["pending"] == 2.0
    metrics.forget(key)
    metrics.observe(key, STATUS, succeeded=True)  # deleted and made again with the same name
    assert _counts(registry)["pending"] == 3.0


def test_a_run_that_finished_before_the_operator_started_is_not_counted_again() -> None:
    registry = CollectorRegistry()
    metrics = RunPhaseMetrics(registry, since=datetime.datetime(2026, 12, 3, 11, tzinfo=datetime.timezone.utc))
    metrics.observe(("team-a", "ev"), STATUS, succeeded=True)
    assert _counts(registry) == dict.fromkeys(run_phases.PHASES, 0.0)


@pytest.mark.parametrize("phase", ["Failed", "Running"])
def test_the_operator_metrics_count_only_succeeded_runs(phase: str) -> None:
    from assay.operator.runtime.metrics import EvaluationMetrics

    metrics = EvaluationMetrics()
    metrics.run_phases.since = datetime.datetime(2026, 12, 3, 9, tzinfo=datetime.timezone.utc)
    body = {"metadata": {"namespace": "team-a", "name": "ev"}, "spec": {"model": "dummy", "tasks": ["arc_easy"]}}
    metrics.observe({**body, "status": {**STATUS, "phase": phase}})
    assert _counts(metrics.registry)["startup"] == 0.0
    metrics.observe({**body, "status": STATUS})
    assert _counts(metrics.registry)["startup"] == 1.0
