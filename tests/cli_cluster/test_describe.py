"""`assay describe`: what happened, why and what to do, then conditions and the recent Events
about the Evaluation, its Job and its pods (not the namespace's others)."""

from __future__ import annotations

import datetime
from typing import Any

from tests.cli_cluster.conftest import ClusterCli, stamp
from tests.operator.local_apiserver import status

MINUTES = datetime.timedelta(minutes=1)
OOM = (
    "The runner (container runner of pod ev-g1-0-abcde) was OOMKilled: it needed more than its memory limit of "
    "1Gi; raise spec.resources.memory."
)


def _condition(type: str, value: str, reason: str, message: str, ago: datetime.timedelta) -> dict[str, Any]:
    return {
        "type": type,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(ago),
        "observedGeneration": 1,
    }


def _failed(kube: ClusterCli) -> None:
    kube.evaluation(
        "ev",
        age=30 * MINUTES,
        spec={"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["hellaswag", "arc_easy"]},
        status={
            "phase": "Failed",
            "reason": "OOMKilled",
            "message": OOM,
            "jobName": "ev-g1",
            "model": "EleutherAI/pythia-160m",
            "runnerMessage": "Killed while scoring hellaswag.",
            "startTime": stamp(28 * MINUTES),
            "completionTime": stamp(20 * MINUTES),
            "progress": {"summary": "120/400 (30%)"},
            "conditions": [
                _condition("Accepted", "True", "SpecValid", "Job ev-g1 created.", 30 * MINUTES),
                _condition("Running", "False", "OOMKilled", OOM, 20 * MINUTES),
                _condition("Succeeded", "False", "OOMKilled", "Not finished.", 20 * MINUTES),
                _condition("Failed", "True", "OOMKilled", OOM, 20 * MINUTES),
            ],
        },
    )
    kube.pod("ev-g1-0-abcde", job="ev-g1", rank=0, phase="Failed")
    kube.event("e1", kind="Evaluation", about="ev", reason="JobCreated", message="Created Job ev-g1.", age=30 * MINUTES)
    kube.event(
        "e2",
        kind="Pod",
        about="ev-g1-0-abcde",
        reason="Pulled",
        message='Container image "runner:1" already present',
        age=29 * MINUTES,
        count=2,
    )
    kube.event(
        "e3",
        kind="Job",
        about="ev-g1",
        reason="BackoffLimitExceeded",
        type="Warning",
        message="Job has reached the specified backoff limit",
        age=21 * MINUTES,
    )
    kube.event("e4", kind="Evaluation", about="ev", reason="Failed", type="Warning", message=OOM, age=20 * MINUTES)
    kube.event("x1", kind="Pod", about="other-g1-0-zzzzz", reason="Pulled", message="someone else's", age=MINUTES)


def test_a_failed_run_says_what_happened_why_and_what_to_do(kube: ClusterCli) -> None:
    _failed(kube)
    code, out, err = kube.run("describe", "ev")
    assert (code, err) == (0, "")
    summary, story, conditions, events = out.split("\n\n")
    assert summary.splitlines()[:5] == [
        "Name:      ev",
        "Namespace: team",
        "Model:     EleutherAI/pythia-160m (hf)",
        "Tasks:     hellaswag, arc_easy",
        "Phase:     Failed (OOMKilled)",
    ]
    assert "Started:   " in summary and "(28m ago)" in summary and "Progress:  120/400 (30%)" in summary
    assert summary.splitlines()[-2:] == ["Job:       ev-g1", "Pods:      ev-g1-0-abcde (rank 0, Failed)"]
    assert story.splitlines() == [
        "What happened: The run failed (OOMKilled).",
        f"Why: {OOM}",
        "The runner said: Killed while scoring hellaswag.",
        "What to do: Give the runner more memory (spec.resources.memory) or smaller batches (spec.batchSize), then apply "
        "the fixed spec, or set the annotation evaluations.assay.dev/rerun to run it again as it is.",
    ]
    rows = conditions.splitlines()
    assert rows[0] == "Conditions:" and rows[1].split() == ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]
    assert rows[2].split()[:4] == ["Accepted", "True", "SpecValid", "30m"] and rows[5].split()[:4] == [
        "Failed",
        "True",
        "OOMKilled",
        "20m",
    ]
    lines = events.splitlines()
    assert lines[0] == "Events (oldest first):"
    assert [line.split()[0:1] + line.split()[-1:] for line in lines[2:]] == [
        ["30m", "ev-g1."],
        ["29m", "present"],
        ["21m", "limit"],
        ["20m", "spec.resources.memory."],
    ]
    assert "29m (x2)" in lines[3] and "pod/ev-g1-0-abcde" in lines[3] and "job/ev-g1" in lines[4]
    assert "someone else's" not in out


def test_a_regression_is_told_with_its_next_step(kube: ClusterCli) -> None:
    said = "Regressed against base: arc_easy acc -0.1000 [-0.1800, -0.0200], Holm p = 0.012."
    kube.evaluation(
        "ev",
        status={
            "phase": "Succeeded",
            "reason": "JobComplete",
            "message": "ev-g1 completed.",
            "jobName": "ev-g1",
            "conditions": [_condition("Regressed", "True", "Regressed", said, MINUTES)],
        },
    )
    out = kube.run("describe", "ev")[1]
    assert "What happened: The run succeeded (JobComplete).\nWhy: ev-g1 completed.\n" in out
    assert "What to do: Nothing: the scores are in status; print them with `assay results ev`.\n" in out
    assert f"Against the baseline: Regressed is True (Regressed): {said}\nWhat to do: Compare the metrics" in out
    assert out.endswith("Events: none (the API server keeps Events for an hour by default).\n")


def test_events_it_may_not_read_are_said_not_fatal(kube: ClusterCli) -> None:
    kube.evaluation(
        "ev",
        status={
            "phase": "Pending",
            "reason": "Unschedulable",
            "jobName": "ev-g1",
            "message": "Runner pod ev-g1-x cannot be scheduled: 0/1 nodes are available.",
        },
    )
    answer = kube.server.handle

    def no_events(method: str, url: str, body: Any, content_type: str) -> tuple[int, Any]:
        if "/events" in url:
            return status(403, "Forbidden", 'events is forbidden: User "tester" cannot list resource "events"')
        return answer(method, url, body, content_type)

    kube.server.handle = no_events  # type: ignore[method-assign]
    code, out, _ = kube.run("describe", "ev")
    assert code == 0
    assert "What to do: Ask for less (spec.resources) or for nodes that fit" in out
    assert out.endswith(
        'Events: not read (Forbidden: events is forbidden: User "tester" cannot list resource "events"; '
        "ask your cluster admin for that permission.)\n"
    )
