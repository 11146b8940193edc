"""What happens to an Evaluation over its life: rejection, restarts of the operator, failing
runner pods, spec changes and deletion, each against the real API server and controllers."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec, hf_spec

pytestmark = pytest.mark.e2e


def _conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status.get("conditions") or ()}


# --- 3: invalid resources ------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"tasks": None}, "spec.tasks: Required value"),
        ({"batchSize": "fast"}, 'batchSize must be an integer from 1, "auto" or "auto:N"'),
        ({"samples": {"arc_easy": [0, 1]}}, "limit and samples exclude each other"),
        ({"fewshotAsMultiturn": True}, "fewshotAsMultiturn: true needs applyChatTemplate: true"),
        ({"resources": {"nodes": 0, "gpusPerNode": 0}}, "spec.resources.nodes"),
        ({"output": {"path": "../escape"}}, "path must be a relative path inside the volume"),
    ],
    ids=["missing-tasks", "batch-size", "cel-limit-and-samples", "cel-multiturn", "nodes-zero", "cel-path"],
)
def test_the_api_server_rejects_invalid_evaluations(cluster: Cluster, change: dict, error: str) -> None:
    spec = {k: v for k, v in {**dummy_spec(), **change}.items() if v is not None}
    result = cluster.apply(evaluation_manifest("invalid", **spec), check=False)
    assert result.returncode != 0
    assert error in result.stderr, result.stderr
    assert cluster.kubectl("get", "evaluation", "invalid", check=False).returncode != 0


def test_an_unknown_task_fails_within_seconds_without_a_job(cluster: Cluster) -> None:
    started = time.monotonic()
    cluster.apply(evaluation_manifest("typo", **dummy_spec(tasks=["arc_easyy"])))
    status = cluster.wait("typo", "Failed", timeout=30)["status"]
    assert time.monotonic() - started < 15
    assert status["phase"] == "Failed" and status["observedGeneration"] == 1
    assert "arc_easyy" in status["message"]
    conditions = _conditions(status)
    assert conditions["Accepted"]["status"] == "False" and conditions["Accepted"]["reason"] == "InvalidSpec"
    assert conditions["Succeeded"]["status"] == "False"
    events = cluster.wait_for("an InvalidSpec Event", lambda: cluster.events("typo").get("InvalidSpec"), timeout=30)
    assert "arc_easyy" in events
    assert cluster.items("jobs") == [] and cluster.items("serviceaccounts", "assay.dev/evaluation=typo") == []


# --- 4: operator restart ---------------------------------------------------------------


def test_an_operator_killed_mid_run_neither_duplicates_nor_loses_the_run(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("restart", **hf_spec()))
    cluster.wait_for(
        "the runner pod to run",
        lambda: [p for p in cluster.items("pods") if p["status"].get("phase") == "Running"],
        timeout=120,
    )
    cluster.operator.kill()
    try:
        # The run finishes while no operator watches: the restarted one must catch up.
        (pod,) = cluster.wait_for(
            "the runner pod to finish",
            lambda: [p for p in cluster.items("pods") if p["status"].get("phase") in ("Succeeded", "Failed")],
            timeout=240,
        )
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0, cluster.diagnostics()
    finally:
        cluster.operator.start()
    status = cluster.wait("restart", "Succeeded", timeout=120)["status"]
    job = cluster.job_name("restart")
    assert status["phase"] == "Succeeded" and status["jobName"] == job
    assert [j["metadata"]["name"] for j in cluster.items("jobs")] == [job]
    assert len(cluster.items("pods")) == 1
    assert set(status["results"]) == {"arc_easy", "lambada_openai"}


# --- 5: failing runner pods -------------------------------------------------------------


def test_a_failing_runner_is_retried_per_backoff_limit_then_fails_with_the_reason(
    cluster: Cluster, tiny_model: Path
) -> None:
    # Corrupt weights fail inside safetensors: exit 3, a failure worth retrying (a missing
    # model directory would be a config error, exit 78, which fails the Job at once).
    broken = cluster.cache_dir / "models" / f"corrupt-{cluster.namespace}"
    shutil.copytree(tiny_model, broken)
    with open(broken / "model.safetensors", "r+b") as weights:
        weights.truncate(1000)
    cluster.apply(evaluation_manifest("broken", **hf_spec(f"/cache/models/{broken.name}", backoffLimit=1)))
    status = cluster.wait("broken", "Failed", timeout=240)["status"]
    pods = cluster.items("pods")
    assert len(pods) == 2  # the first try and one retry
    assert all(p["status"]["phase"] == "Failed" for p in pods)
    codes = {p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] for p in pods}
    assert codes == {3}, codes  # model/data error: retried (78 would fail at once)
    failed = _conditions(status)["Failed"]
    assert failed["status"] == "True" and failed["reason"] == "BackoffLimitExceeded"
    assert "backoffLimit" in status["message"]
    assert "Runner: SafetensorError" in status["message"], status["message"]
    (job,) = cluster.items("jobs")
    assert any(c["type"] == "Failed" and c["reason"] == "BackoffLimitExceeded" for c in job["status"]["conditions"])


# --- 6: spec change ---------------------------------------------------------------------


def test_a_spec_change_starts_a_new_run_and_observed_generation_follows(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("regen", **dummy_spec(limit=3)))
    first = cluster.wait("regen", "Succeeded", timeout=120)["status"]
    assert first["jobName"] == cluster.job_name("regen") and first["nSamples"]["arc_easy"]["effective"] == 3

    cluster.apply(evaluation_manifest("regen", **dummy_spec(limit=5)))

    def second_run_done() -> dict | None:
        evaluation = cluster.evaluation("regen")
        status = evaluation.get("status") or {}
        if (
            evaluation["metadata"]["generation"] == 2
            and status.get("observedGeneration") == 2
            and status.get("phase") == "Succeeded"
        ):
            return status
        return None

    status = cluster.wait_for("generation 2 to succeed", second_run_done, timeout=120)
    second = cluster.job_name("regen", 2)
    assert status["jobName"] == second
    assert status["nSamples"]["arc_easy"]["effective"] == 5
    conditions = _conditions(status)
    assert all(c["observedGeneration"] == 2 for c in conditions.values())
    assert conditions["Succeeded"]["status"] == "True"
    cluster.wait_for(
        "the superseded Job to go",
        lambda: [j["metadata"]["name"] for j in cluster.items("jobs")] == [second],
        timeout=60,
    )


# --- 7: deletion ------------------------------------------------------------------------


def test_deleting_an_evaluation_garbage_collects_every_child(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("doomed", **dummy_spec(resources={"nodes": 2, "gpusPerNode": 0})))
    cluster.wait("doomed", "Succeeded", timeout=180)
    selector = "assay.dev/evaluation=doomed"
    kinds = ["jobs", "pods", "services", "networkpolicies"]
    before = {kind: len(cluster.items(kind, selector)) for kind in kinds}
    assert before == {"jobs": 1, "pods": 2, "services": 1, "networkpolicies": 1}

    cluster.kubectl("delete", "evaluation", "doomed", "--timeout=60s")
    assert cluster.kubectl("get", "evaluation", "doomed", check=False).returncode != 0
    cluster.wait_for(
        "the garbage collector to delete every child",
        lambda: all(not cluster.items(kind, selector) for kind in kinds),
        timeout=90,
    )


# --- beyond the list: config errors and suspend ---------------------------------------


def test_a_config_error_in_the_pod_fails_the_job_at_once_despite_backoff_limit(cluster: Cluster) -> None:
    # The operator cannot see the model directory; the runner can, and exits 78 (EX_CONFIG),
    # which the Job's podFailurePolicy turns into FailJob instead of two more tries.
    cluster.apply(evaluation_manifest("config-error", **hf_spec("/cache/models/no-such-model", backoffLimit=2)))
    status = cluster.wait("config-error", "Failed", timeout=120)["status"]
    (pod,) = cluster.items("pods")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 78
    failed = _conditions(status)["Failed"]
    assert failed["reason"] == "PodFailurePolicy", failed
    assert "no-such-model" in status["message"] and "Runner:" in status["message"], status["message"]


def test_suspend_pauses_and_resume_continues_the_same_run(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("paused", **dummy_spec(suspend=True)))
    cluster.wait_for("the suspended Job", lambda: cluster.items("jobs"))
    status = cluster.wait_for(
        "phase Pending (Suspended)",
        lambda: (
            (s := cluster.evaluation("paused").get("status") or {}).get("phase") == "Pending"
            and _conditions(s).get("Running", {}).get("reason") == "Suspended"
            and s
        ),
    )
    job = cluster.job_name("paused")
    assert status["jobName"] == job
    time.sleep(2)
    assert cluster.items("pods") == []

    cluster.apply(evaluation_manifest("paused", **dummy_spec(suspend=False)))
    status = cluster.wait_for(
        "generation 2 to succeed",
        lambda: (
            (s := cluster.evaluation("paused").get("status") or {}).get("observedGeneration") == 2
            and s.get("phase") == "Succeeded"
            and s
        ),
        timeout=120,
    )
    assert status["jobName"] == job  # resumed, not replaced
    assert [j["metadata"]["name"] for j in cluster.items("jobs")] == [job]
    assert len(cluster.items("pods")) == 1
