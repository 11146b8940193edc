"""`converge`: which runs need their Job again, and re-creating it from the same pure plan.

`kube`'s calls are replaced by an in-memory store of the objects created (JSON patches
applied by the local API server's RFC 6902 code); tests/operator/runtime/test_operator_owned.py
runs the ownership rules over HTTP, and tests/e2e/test_hardening.py deletes a real Job on
the real node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from assay import spec as spec_module
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions
from assay.operator.kube import kube
from assay.operator.runtime import converge
from tests.operator.converge_store import SPEC, T0, Store, tiny_evaluation, tiny_job_name


def test_which_runs_await_their_job() -> None:
    assert converge.awaits_job(tiny_evaluation())
    assert converge.awaits_job(tiny_evaluation(), tiny_job_name()) and not converge.awaits_job(
        tiny_evaluation(), "tiny-g0"
    )
    assert not converge.awaits_job(tiny_evaluation(phase="Succeeded"))
    deleting = tiny_evaluation()
    deleting["metadata"]["deletionTimestamp"] = "2025-05-01T12:00:00Z"
    assert not converge.awaits_job(deleting)
    rejected = tiny_evaluation()
    rejected["status"].update(conditions.rejected(rejected["status"], message="No.", generation=1, now=T0))
    assert not converge.awaits_job(rejected)


def test_the_tracker_follows_watch_events() -> None:
    runs = converge.UnfinishedRuns(clock=lambda: 100.0)
    for name in ("a", "b", "c"):
        runs.observe(tiny_evaluation(name))
    runs.observe(tiny_evaluation("c", phase="Failed"))
    assert runs.snapshot() == {("evals", "a"): tiny_job_name("a"), ("evals", "b"): tiny_job_name("b")}
    runs.observe(tiny_evaluation("b"), deleted=True)
    assert runs.snapshot() == {("evals", "a"): tiny_job_name("a")}


def test_recreate_makes_the_same_job_once(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(monkeypatch)
    evaluation = tiny_evaluation()
    assert converge.recreate(
        evaluation, admin=AdminPolicy(), runner=RunnerSettings(default_image="runner:1"), emit=store.emit, now=T0
    )
    job = store.objects[("Job", tiny_job_name())]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_HUB_OFFLINE"] == "1"  # the policy still holds for the Job made again
    assert store.events[0] == ("Warning", "JobLost") and ("Normal", "JobCreated") in store.events
    # Seen by both the DELETED event and the sweep: the second finds the Job and does nothing.
    assert not converge.recreate(
        evaluation, admin=AdminPolicy(), runner=RunnerSettings(default_image="runner:1"), emit=store.emit, now=T0
    )
    assert [k for k in store.objects if k[0] == "Job"] == [("Job", tiny_job_name())]


def _job(name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"parallelism": 1},
        "status": status,
        "metadata": {"name": name, "namespace": "evals", "labels": {builders.LABEL_EVALUATION: name.split("-")[0]}},
    }


def test_the_sweep_recreates_only_lost_jobs_and_reads_nothing_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(monkeypatch)
    calls: list[str] = []
    # Listed Jobs of a namespace: one list for all its runs, not one read per run.
    monkeypatch.setattr(
        converge, "runner_jobs", lambda ns: calls.append(ns) or {tiny_job_name("a"): _job(tiny_job_name("a"))}
    )
    evaluations = {name: tiny_evaluation(name) for name in ("a", "b")}
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: evaluations[name])
    now = [0.0]
    runs = converge.UnfinishedRuns(clock=lambda: now[0])
    errors: list[tuple[str, str]] = []
    sweeper = converge.LostJobSweeper(
        runs=runs,
        admin=AdminPolicy(),
        runner=RunnerSettings(default_image="runner:1"),
        on_error=lambda *e: errors.append(e),
        emit=store.emit,
        interval=30,
    )
    sweeper.sweep()
    assert calls == []  # idle: no API call
    for evaluation in evaluations.values():
        runs.observe(evaluation)
    now[0] = 29.0
    sweeper.sweep()
    assert calls == []  # just accepted: its Job may be on its way
    now[0] = 30.0
    runs.observe(evaluations["a"])  # a later event of the same run keeps its first sighting
    sweeper.sweep()
    assert calls == ["evals"] and list(store.objects) and not errors
    assert {name for kind, name in store.objects if kind == "Job"} == {tiny_job_name("b")}
    assert store.events.count(("Warning", "JobLost")) == 1  # through the poster it was given


def test_a_rerun_token_on_a_finished_run_replaces_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """carry_out as the annotation handler calls it: the status written, the new Job created, the old one deleted."""
    store = Store(monkeypatch)
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(kube, "patch_evaluation_status", lambda *, namespace, name, status: written.append(status))
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(
        kube,
        "delete",
        lambda kind, v, *, namespace, name: deleted.append((kind, name)) or store.objects.pop((kind, name), None),
    )
    spec = spec_module.parse_spec(SPEC)
    evaluation = tiny_evaluation(phase="Succeeded")
    first = tiny_job_name()
    store.objects[("Job", first)] = {"kind": "Job", "metadata": {"name": first, "annotations": {}}}
    assert converge.carry_out(
        evaluation, spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=store.emit
    ).is_noop
    evaluation["metadata"]["annotations"] = {builders.ANNOTATION_RERUN: "sha-1234"}
    steps = converge.carry_out(
        evaluation, spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=store.emit
    )
    rerun = builders.job_name(builders.EvaluationRef.from_body(evaluation))
    assert steps.new_run and rerun.startswith("tiny-g1-r") and rerun.endswith(first.removeprefix("tiny-g1"))
    assert [name for kind, name in store.objects if kind == "Job"] == [rerun]
    # The superseded run's Job went first, then its NetworkPolicy; the new run has its own.
    assert deleted == [("Job", first), ("NetworkPolicy", first)]
    assert [name for kind, name in store.objects if kind == "NetworkPolicy"] == [rerun]
    (status,) = written
    assert status["jobName"] == rerun and status["rerunToken"] == "sha-1234" and status["phase"] == "Pending"
    assert ("Normal", "JobCreated") in store.events and ("Normal", "JobReplaced") in store.events


def test_the_namespaces_runner_identity_is_made_once_and_each_job_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first decision makes the namespace's runner identity, the run's NetworkPolicy and its Job;
    a decision again patches the NetworkPolicy only (tested to be this Evaluation's in the same
    request): the identity is known, the Job is created once."""
    store = Store(monkeypatch)
    spec = spec_module.parse_spec(SPEC)
    evaluation = tiny_evaluation()
    del evaluation["status"]  # never decided: nothing to list, everything to create
    created = []
    monkeypatch.setattr(kube, "create", lambda m: created.append((m["kind"], m["metadata"]["name"])) or store.create(m))
    converge.carry_out(evaluation, spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=store.emit)
    job = builders.job_name(builders.EvaluationRef.from_body(evaluation))
    identity = [("ServiceAccount", "assay-runner"), ("Role", "assay-runner"), ("RoleBinding", "assay-runner")]
    assert created == [("NetworkPolicy", job), *identity, ("Job", job)] and store.patched == []
    assert store.objects[("Job", job)]["spec"]["template"]["spec"]["serviceAccountName"] == "assay-runner"
    created.clear()
    converge.carry_out(
        tiny_evaluation(), spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=store.emit
    )
    assert created == [] and store.patched == [("NetworkPolicy", job)]
    assert [key for key in store.objects if key[0] == "Job"] == [("Job", job)]
    assert store.events.count(("Normal", "JobCreated")) == 1


def test_a_new_run_naming_a_baseline_evaluation_carries_what_it_showed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner may read no Evaluation: its Job carries the baseline's phase, volume and results
    folder as the operator read them (one GET, for such runs only), and nothing else of its spec."""
    store = Store(monkeypatch)
    read: list[str] = []
    base = {
        "metadata": {"name": "base", "namespace": "evals"},
        "spec": {"model": "dummy", "output": {"pvc": "results"}, "hfTokenSecret": {"name": "hf", "key": "token"}},
        "status": {"phase": "Succeeded", "outputDir": "/output/base/g1", "results": {"x": {}}},
    }
    monkeypatch.setattr(kube, "get_evaluation", lambda *, namespace, name: read.append(name) or base)
    raw = {**SPEC, "output": {"pvc": "results"}, "baseline": {"evaluation": "base"}}
    evaluation = {**tiny_evaluation(), "spec": raw}
    del evaluation["status"]
    converge.carry_out(
        evaluation,
        spec_module.parse_spec(raw),
        now=T0,
        runner=RunnerSettings(default_image="runner:1"),
        emit=store.emit,
    )
    job = store.objects[("Job", tiny_job_name())]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert read == ["base"]
    assert json.loads(env[spec_module.ENV_BASELINE_EVALUATION]) == {
        "metadata": {"name": "base"},
        "spec": {"output": {"pvc": "results"}},
        "status": {"outputDir": "/output/base/g1", "phase": "Succeeded"},
    }
    plain = tiny_evaluation("plain")
    del plain["status"]
    converge.carry_out(
        plain, spec_module.parse_spec(SPEC), now=T0, runner=RunnerSettings(default_image="runner:1"), emit=store.emit
    )
    assert read == ["base"] and ("Job", tiny_job_name("plain")) in store.objects  # no baseline named: nothing read
    plain_env = store.objects[("Job", tiny_job_name("plain"))]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert spec_module.ENV_BASELINE_EVALUATION not in {e["name"] for e in plain_env}
