"""The bound on exit 75 (a rank that stopped because a peer reported its failure), which the
Job's podFailurePolicy ignores: counted by the operator from the pods the Job keeps, per
rank and less the Job's counted failures; past policy.maxPeerFailureRetries the run fails."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from assay import spec as spec_module
from assay.operator.admission.placement_policy import Placement
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.decide import diagnosis, peer_failures
from assay.operator.kube import kube
from assay.operator.runtime import observe
from assay.operator.runtime.state import OperatorState
from assay.operator.runtime.watched import Watched
from tests.operator.observed_cluster import FakeApi, accepted_evaluation, at, load


def _stopped(index: int | None, *, exit_code: int = spec_module.PEER_FAILED_EXIT_CODE, n: int = 0) -> dict[str, Any]:
    """A runner pod of Job tiny-g1 that ended with `exit_code` (at completion `index`, if Indexed)."""
    pod = copy.deepcopy(load("pod_running"))
    pod["metadata"]["name"] = f"tiny-g1-{index}-{n}"
    pod["metadata"]["uid"] = f"uid-{index}-{n}"
    if index is not None:
        pod["metadata"]["annotations"][peer_failures.COMPLETION_INDEX] = str(index)
    pod["status"]["phase"] = "Failed"
    (status,) = pod["status"]["containerStatuses"]
    status["ready"] = False
    status["state"] = {
        "terminated": {
            "exitCode": exit_code,
            "reason": "Error",
            "startedAt": "2025-05-01T12:00:09Z",
            "finishedAt": "2025-05-01T12:01:09Z",
        }
    }
    return pod


def _job(*, failed: int = 0, ready: int = 0, parallelism: int = 2) -> dict[str, Any]:
    job = copy.deepcopy(load("job_pods_pending"))
    job["kind"] = "Job"
    job["spec"]["parallelism"] = job["spec"]["completions"] = parallelism
    job["status"].update({"active": parallelism, "ready": ready, "failed": failed})
    return job


def test_ranks_stopping_for_peers_past_the_bound_are_a_fatal_problem() -> None:
    # Index 1 stopped 5 times; the Job counted 1 failure (index 0's own, which made index 1 stop once).
    pods = [_stopped(1, n=n) for n in range(5)] + [_stopped(0, exit_code=1)]
    problem = peer_failures.exceeded(_job(failed=1), pods, max_retries=3)
    assert problem is not None and problem.fatal and problem.reason == diagnosis.PEER_FAILURES_EXCEEDED
    assert problem.message.startswith("Rank 1 of Job tiny-g1 stopped 5 times for a peer's reported failure")
    assert "policy.maxPeerFailureRetries (3)" in problem.message and problem.message.count(". ") == 0
    # Within the bound: 5 stops less 1 counted failure is 4.
    assert peer_failures.exceeded(_job(failed=1), pods, max_retries=4) is None
    assert peer_failures.exceeded(_job(failed=2), pods, max_retries=3) is None
    assert peer_failures.exceeded(_job(failed=1), pods, max_retries=0) is None  # 0: no bound


def test_only_exit_75_counts_per_rank_and_one_pod_jobs_are_rank_0() -> None:
    # Two ranks stopping twice each is two stops per rank, not four.
    spread = [_stopped(i, n=n) for i in (0, 1) for n in range(2)]
    assert peer_failures.exceeded(_job(), spread, max_retries=2) is None
    other_exits = [_stopped(0, exit_code=code, n=n) for n, code in enumerate((1, 78, 137, 0))]
    assert peer_failures.exceeded(_job(), other_exits, max_retries=1) is None
    single = [_stopped(None, n=n) for n in range(2)]
    problem = peer_failures.exceeded(_job(parallelism=1), single, max_retries=1)
    assert problem is not None and problem.message.startswith("Rank 0 of Job tiny-g1 stopped 2 times")


def _state(max_retries: int, *, watched: bool = False) -> OperatorState:
    return OperatorState(
        policy=AdminPolicy(placement=Placement(max_peer_failure_retries=max_retries)),
        watched=Watched(job_label=builders.LABEL_JOB) if watched else None,
    )


def test_the_run_fails_and_its_job_ends_once_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi(_job(), [_stopped(1, n=n) for n in range(3)] + [load("pod_running")])
    api.install(monkeypatch)
    assert (
        observe.observe_run(accepted_evaluation(), state=_state(3), emit=api.emit, now=at(5)).get("phase") != "Failed"
    )
    assert not api.ended
    patch = observe.observe_run(accepted_evaluation(), state=_state(2), emit=api.emit, now=at(5))
    assert patch["phase"] == "Failed" and patch["reason"] == diagnosis.PEER_FAILURES_EXCEEDED
    assert api.ended == ["tiny-g1"] and api.posted[-1][:2] == ("Warning", "Failed")


def test_the_bound_holds_while_every_rank_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacements may all be ready by the time the operator looks: the pods it watches still count."""
    api = FakeApi(_job(ready=2), [])
    api.install(monkeypatch)

    def written(*, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        api.status_patches.append(status)
        return {**accepted_evaluation(), "status": status}  # the watches keep what a status write returns

    monkeypatch.setattr(kube, "patch_evaluation_status", written)
    state = _state(1, watched=True)
    for pod in [_stopped(0, n=n) for n in range(3)]:
        state.watched.pods.observe(pod)
    patch = observe.observe_run(accepted_evaluation(), state=state, job=api.job, emit=api.emit, now=at(5))
    assert patch["reason"] == diagnosis.PEER_FAILURES_EXCEEDED and api.ended == ["tiny-g1"]
    assert not [r for r in api.reads if r[0] == "list"]  # from the watch, not the API


def test_without_a_policy_the_default_bound_applies() -> None:
    assert OperatorState().policy.placement.max_peer_failure_retries == Placement().max_peer_failure_retries == 3
