"""How often runners write progress: the operator's interval rule and the Job environment that carries it,
and the ETA that readers compute instead of the runner (`progress_budget`, `progress_eta`)."""

from __future__ import annotations

import datetime

import pytest

from assay.operator.build import children
from assay.operator.build.builders import EvaluationRef
from assay.operator.decide import progress_budget, progress_eta
from assay.spec import parse_spec

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(("in_flight", "seconds"), [(0, 5), (1, 5), (100, 5), (101, 6), (300, 15), (1_000, 50)])
def test_the_interval_grows_with_the_runs_in_flight(in_flight: int, seconds: float) -> None:
    assert progress_budget.interval_seconds(in_flight) == seconds


@pytest.mark.parametrize("in_flight", [1, 7, 99, 100, 101, 299, 300, 301, 999, 1_000, 4_321, 20_000])
def test_the_runs_in_flight_write_at_most_the_budget_together(in_flight: int) -> None:
    """Each run writes at most once per interval: all of them, at most 20 writes a second
    (and a handful never less often than every 5 s)."""
    interval = progress_budget.interval_seconds(in_flight)
    assert in_flight / interval <= progress_budget.WRITES_PER_SECOND
    assert interval >= progress_budget.MIN_INTERVAL_SECONDS


def test_the_interval_reaches_every_container_of_the_job_and_nothing_else() -> None:
    ref = EvaluationRef(namespace="team", name="ev", uid="u-1", generation=3)
    spec = parse_spec({"model": "hf", "tasks": ["arc_easy"], "resources": {"nodes": 2, "gpusPerNode": 1}})
    made = children.children(ref, spec)
    changed = progress_budget.with_interval(made, 15.0)
    for before, after in zip(made, changed, strict=False):
        if before["kind"] != "Job":
            assert after is before
            continue
        pod = after["spec"]["template"]["spec"]
        containers = [*pod.get("initContainers", ()), *pod["containers"]]
        assert len(containers) == 2  # torchrun's spec check and the runner
        for container in containers:
            env = [e for e in container["env"] if e["name"] == "ASSAY_PROGRESS_INTERVAL"]
            assert env == [{"name": "ASSAY_PROGRESS_INTERVAL", "value": "15"}]
        untouched = before["spec"]["template"]["spec"]["containers"][0]["env"]
        assert "ASSAY_PROGRESS_INTERVAL" not in {e["name"] for e in untouched}  # a copy was changed
    again = progress_budget.with_interval(changed, 50.0)  # replaced, not added twice
    job = next(m for m in again if m["kind"] == "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "ASSAY_PROGRESS_INTERVAL"] == ["50"]


def _running(done: int, total: int, *, started: float | None = 0, updated: float | None = 60) -> dict[str, object]:
    progress: dict[str, object] = {"requestsDone": done, "requestsTotal": total, "summary": f"{done}/{total}"}
    if updated is not None:
        progress["updated"] = (T0 + datetime.timedelta(seconds=updated)).isoformat().replace("+00:00", "Z")
    status: dict[str, object] = {"phase": "Running", "progress": progress}
    if started is not None:
        status["timing"] = {"requestsStarted": (T0 + datetime.timedelta(seconds=started)).isoformat()}
    return status


def test_the_eta_is_the_mean_rate_since_the_first_request_counted_down_from_the_report() -> None:
    status = _running(25, 100)  # 25 in the 60 s since the first request: 75 more take 180 s
    at = T0 + datetime.timedelta(seconds=60)
    assert progress_eta.eta_seconds(status, now=at) == 180.0
    assert progress_eta.eta_seconds(status, now=at + datetime.timedelta(seconds=20)) == 160.0
    assert progress_eta.eta_seconds(status, now=at + datetime.timedelta(hours=1)) == 0.0  # late, never negative
    assert progress_eta.summary(status, now=at) == "25/100 ETA 3m00s"
    # Without `updated` (an older runner): the report is taken as current.
    assert progress_eta.eta_seconds(_running(25, 100, updated=None), now=at) == 180.0


@pytest.mark.parametrize(
    "status",
    [
        _running(0, 100),  # no request answered: no rate yet
        _running(100, 100),  # done
        _running(25, 100, started=None),  # no start time
        _running(25, 100, started=90),  # a start after the report: a clock apart
        {**_running(25, 100), "phase": "Failed"},  # not running
        {"phase": "Running", "progress": {"requestsDone": "25", "requestsTotal": 100}},  # not counts
        {},
    ],
)
def test_no_eta_until_it_is_known_nor_after_the_run(status: dict[str, object]) -> None:
    assert progress_eta.eta_seconds(status, now=T0 + datetime.timedelta(seconds=60)) is None


def test_durations_read_as_kubectl_users_expect() -> None:
    assert [progress_eta.duration(s) for s in (0, 42, 200, 3_900, -5)] == ["0s", "42s", "3m20s", "1h05m", "0s"]


def test_a_new_run_made_with_300_in_flight_is_told_15_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler counts the unfinished runs (and the decisions queued), and `carry_out` puts
    the interval on the Job it creates: what the runner reads (`progress_gate.interval_from_env`)."""
    from assay import spec as spec_module
    from assay.operator import handlers
    from assay.operator.build.runner_settings import RunnerSettings
    from assay.operator.runtime import converge
    from assay.operator.runtime.state import OperatorState
    from assay.runner.results import progress_gate
    from tests.operator.converge_store import SPEC, Store
    from tests.operator.converge_store import T0 as NOW
    from tests.operator.converge_store import tiny_evaluation as _evaluation

    unfinished = converge.UnfinishedRuns()
    for i in range(300):
        unfinished.observe(_evaluation(f"run-{i}"))  # each with its Job named, Pending
    unfinished.observe(_evaluation("done", phase="Succeeded"))  # not in flight
    in_flight = handlers._runs_in_flight(OperatorState(unfinished=unfinished))
    assert in_flight == 300 and handlers._runs_in_flight(OperatorState()) == 0

    store = Store(monkeypatch)
    evaluation = _evaluation("new")
    evaluation["status"] = {}  # never decided: a new run
    interval = progress_budget.interval_seconds(in_flight)
    converge.carry_out(
        evaluation,
        spec_module.parse_spec(SPEC),
        now=NOW,
        runner=RunnerSettings(default_image="runner:1"),
        emit=store.emit,
        progress_interval=interval,
    )
    (job,) = [m for (kind, _), m in store.objects.items() if kind == "Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert progress_gate.interval_from_env(env) == 15.0
