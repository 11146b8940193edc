"""What the watches showed (`watched`) replaces reads: a Job or pod event costs no GET or LIST.

No API server runs in unit tests, so `kube`'s reads are replaced by a stand-in that counts
them and fails the test if an unexpected one happens; tests/e2e and bench/operator_scale.py
run the same handlers against a real API server (the bench counts requests in its audit log).
"""

from __future__ import annotations

import copy
import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest

from assay import spec as spec_module
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions, diagnosis
from assay.operator.kube import kube
from assay.operator.runtime import converge, observe
from assay.operator.runtime.state import OperatorState
from assay.operator.runtime.watched import Watched, WatchedObjects

RECORDED = Path(__file__).parents[1] / "recorded"
T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def load(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


def _versioned(body: dict[str, Any], version: int, **meta: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"].update(resourceVersion=str(version), **meta)
    return body


def test_the_newest_version_is_kept_and_a_late_older_event_is_ignored() -> None:
    store = WatchedObjects()
    pod = load("pod_running")
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    store.observe(_versioned(pod, 10))
    store.observe(_versioned(pod, 12, labels={"x": "new"}))
    store.observe(_versioned(pod, 11, labels={"x": "late"}))  # a watch event older than our own write
    assert store.get(ns, name)["metadata"]["labels"] == {"x": "new"}
    store.forget(pod)
    assert store.get(ns, name) is None and len(store) == 0


def test_pods_are_grouped_by_their_job_label_and_leave_the_group_they_left() -> None:
    store = WatchedObjects(group_label=builders.LABEL_JOB)
    pod = load("pod_running")
    ns, job = pod["metadata"]["namespace"], pod["metadata"]["labels"][builders.LABEL_JOB]
    other = _versioned(pod, 5, name="second")
    store.observe(_versioned(pod, 4))
    store.observe(other)
    assert [p["metadata"]["name"] for p in store.in_group(ns, job)] == sorted([pod["metadata"]["name"], "second"])
    moved = _versioned(other, 6)
    moved["metadata"]["labels"] = {builders.LABEL_JOB: "another-job"}
    store.observe(moved)
    assert [p["metadata"]["name"] for p in store.in_group(ns, job)] == [pod["metadata"]["name"]]
    assert [p["metadata"]["name"] for p in store.in_group(ns, "another-job")] == ["second"]
    assert store.in_group("elsewhere", job) == []


def test_plain_unwraps_kopfs_view_without_managed_fields_and_without_copying() -> None:
    import kopf

    raw = {
        "metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}], "labels": {"k": "v"}},
        "spec": {"tasks": ["arc_easy"]},
    }
    unwrapped = observe.plain(kopf.Body(raw))
    assert type(unwrapped) is dict and type(unwrapped["metadata"]) is dict
    assert unwrapped == {"metadata": {"name": "a", "labels": {"k": "v"}}, "spec": {"tasks": ["arc_easy"]}}
    # The event's own dicts below the top: nothing deep-copied (each event is decoded afresh).
    assert unwrapped["spec"] is raw["spec"] and unwrapped["metadata"]["labels"] is raw["metadata"]["labels"]
    assert "managedFields" in raw["metadata"]


class NoReads:
    """`kube` with every read failing the test, and status writes echoed back as the server would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.patches: list[dict[str, Any]] = []
        self.evaluation: dict[str, Any] | None = None
        for read in ("get", "list_objects", "list_children", "get_evaluation"):
            monkeypatch.setattr(kube, read, self._read(read))
        monkeypatch.setattr(kube, "list_events", lambda **_: self.reads.append("list_events") or [])
        monkeypatch.setattr(kube, "patch_evaluation_status", self.patch_status)
        monkeypatch.setattr(kube, "create", lambda manifest: True)
        monkeypatch.setattr(kube, "json_patch", lambda manifest, operations: manifest)

    def _read(self, name: str) -> Any:
        def read(*args: Any, **kwargs: Any) -> Any:
            self.reads.append(name)
            return copy.deepcopy(self.evaluation) if name == "get_evaluation" else ([] if "list" in name else None)

        return read

    def patch_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(status)
        assert self.evaluation is not None
        written = copy.deepcopy(self.evaluation)
        written["status"] = {**(written.get("status") or {}), **status}
        written["metadata"]["resourceVersion"] = str(int(written["metadata"].get("resourceVersion", "1")) + 1)
        self.evaluation = written
        return written


def _state() -> OperatorState:
    return OperatorState(watched=Watched(job_label=builders.LABEL_JOB))


def _evaluation(job_name: str, **status: Any) -> dict[str, Any]:
    accepted = conditions.accepted(None, job_name=job_name, generation=1, now=T0, new_run=True)
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "tiny", "namespace": "evals", "uid": "e1", "generation": 1, "resourceVersion": "7"},
        "spec": {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}},
        "status": {**{k: v for k, v in accepted.items() if v is not None}, **status},
    }


def test_a_job_event_reads_the_evaluation_and_pods_from_the_watches_and_writes_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = NoReads(monkeypatch)
    job, pod = load("job_pods_pending"), load("pod_image_pull_backoff")
    job["kind"] = "Job"
    job_name = job["metadata"]["name"]
    evaluation = _evaluation(job_name)
    api.evaluation = evaluation
    state = _state()
    state.watched.evaluations.observe(evaluation)
    state.watched.pods.observe(pod)
    found = observe.evaluation_of(job, state=state)
    assert found is not None and api.reads == []  # from the watch: its status names this Job
    patch = observe.observe_run(found, job=job, state=state, emit=lambda *a, **k: None, now=T0)
    assert patch["reason"] == "ImagePullBackOff"
    assert api.reads == ["list_events"]  # the pull's Events: what no status carries
    # The status write's answer is what the next event reads, not the body from before it.
    assert state.watched.evaluations.get("evals", "tiny")["status"]["reason"] == "ImagePullBackOff"


def test_the_api_is_read_when_the_watch_shows_another_run_or_a_fresh_read_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = NoReads(monkeypatch)
    job = load("job_pods_pending")
    job["kind"] = "Job"
    state = _state()
    state.watched.evaluations.observe(_evaluation("an-older-run"))
    api.evaluation = _evaluation(job["metadata"]["name"])
    assert observe.evaluation_of(job, state=state)["status"]["jobName"] == job["metadata"]["name"]
    assert api.reads == ["get_evaluation"]
    assert observe.evaluation_of(job, state=state) is not None and api.reads == ["get_evaluation"]  # now cached
    observe.evaluation_of(job, state=state, fresh=True)
    assert api.reads == ["get_evaluation", "get_evaluation"]


def test_a_new_jobs_first_events_write_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    api = NoReads(monkeypatch)
    job = load("job_no_pods")
    job["kind"] = "Job"
    job["metadata"]["creationTimestamp"] = T0.strftime("%Y-%m-%dT%H:%M:%SZ")
    job["status"] = {}  # as created: the Job controller has not synced it yet
    evaluation = _evaluation(job["metadata"]["name"])
    api.evaluation = evaluation
    state = _state()
    state.watched.evaluations.observe(evaluation)
    assert observe.observe_run(evaluation, job=job, state=state, emit=lambda *a, **k: None, now=T0) == {}
    assert api.patches == [] and api.reads == []  # nor reads its Events in its first seconds
    later = T0 + datetime.timedelta(seconds=diagnosis.JOB_EVENTS_GRACE + 1)
    observe.observe_run(evaluation, job=job, state=state, emit=lambda *a, **k: None, now=later)
    assert api.reads == ["list_events"]  # a Job still without pods: FailedCreate would say why


def test_a_new_evaluation_lists_no_children_and_one_that_named_a_job_does(monkeypatch: pytest.MonkeyPatch) -> None:
    api = NoReads(monkeypatch)
    evaluation = _evaluation("x")
    del evaluation["status"]
    api.evaluation = evaluation
    spec = spec_module.parse_spec(evaluation["spec"])
    written: list[Any] = []
    steps = converge.carry_out(
        evaluation,
        spec,
        now=T0,
        runner=RunnerSettings(default_image="img"),
        emit=lambda *a, **k: None,
        written=written.append,
    )
    assert steps.new_run and api.reads == []
    assert written and written[0]["status"]["jobName"] == steps.status["jobName"]
    converge.carry_out(written[0], spec, now=T0, runner=RunnerSettings(default_image="img"), emit=lambda *a, **k: None)
    assert api.reads == ["list_children", "list_children"]  # its Jobs and Services: a restart adopts them


def test_an_event_is_copied_once_the_index_handlers_copy_is_reused_for_the_same_version() -> None:
    state = _state()
    pod = _versioned(load("pod_running"), 20)
    kept = observe.plain(pod)
    state.watched.pods.observe(kept)
    assert observe.latest(state, "pods", pod) is kept  # what the index handler just stored
    newer = _versioned(pod, 21, labels={"x": "y"})
    copied = observe.latest(state, "pods", newer)  # not stored yet (a DELETED event never is)
    assert copied is not kept and copied["metadata"]["labels"] == {"x": "y"}


def test_a_periodic_sweep_runs_on_its_clock_until_stopped() -> None:
    import threading

    from assay.operator.runtime.periodic import PeriodicSweep

    ran = threading.Event()
    count: list[int] = []

    class Counting(PeriodicSweep):
        def sweep(self) -> None:
            count.append(1)
            ran.set()

    sweep = Counting(interval=0.01, name="test-sweep")
    sweep.start()
    assert ran.wait(5)
    sweep.stop()
    sweep._thread.join(5)
    assert not sweep._thread.is_alive() and sweep.stopping
    after = len(count)
    time.sleep(0.05)
    assert len(count) == after


def test_kept_jobs_and_pods_drop_the_spec_their_pods_carry() -> None:
    """A runner pod carries its spec as an annotation, and its Job's template too; what the operator
    keeps of them leaves it out (a thousand runs of a large spec would keep it twice each)."""
    ref = builders.EvaluationRef(name="big", namespace="evals", uid="u", generation=1)
    spec = spec_module.parse_spec(
        {"model": "dummy", "tasks": ["arc_easy"], "samples": {"arc_easy": list(range(9_000))}}
    )
    job = builders.job(ref, spec)
    job["metadata"]["resourceVersion"] = "5"
    pod = {"metadata": {**copy.deepcopy(job["spec"]["template"]["metadata"]), "name": "p", "namespace": "evals"}}
    before = copy.deepcopy(job)
    watched = Watched(job_label=builders.LABEL_JOB)
    watched.jobs.observe(job)
    watched.pods.observe(pod)
    kept_job = watched.jobs.get("evals", job["metadata"]["name"])
    kept_pod = watched.pods.get("evals", "p")
    assert kept_job is not None and kept_pod is not None
    assert builders.ANNOTATION_SPEC not in kept_job["spec"]["template"]["metadata"]["annotations"]
    assert builders.ANNOTATION_SPEC not in kept_pod["metadata"]["annotations"]
    assert kept_pod["metadata"]["annotations"][builders.ANNOTATION_EVALUATION] == "big"
    assert len(json.dumps(kept_job)) < 16 * 1024 < len(json.dumps(job))
    assert job == before  # the body kopf handed over is not changed
    assert watched.pods.in_group("evals", job["metadata"]["name"]) == [kept_pod]
