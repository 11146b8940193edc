"""A finished Evaluation re-runs, spec unchanged, when its `evaluations.assay.dev/rerun` annotation is
bumped (as a Git commit would): a new Job, its own output directory, the first run's
results kept on the volume."""

from __future__ import annotations

import pytest

from assay.operator.build.builders import EvaluationRef, job_name, run_suffix
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e


def test_bumping_the_rerun_annotation_runs_a_finished_evaluation_again(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("again", **dummy_spec()))
    first = cluster.wait("again", "Succeeded", timeout=180)
    assert first["status"]["jobName"] == cluster.job_name("again")

    cluster.kubectl("annotate", "evaluation", "again", "evaluations.assay.dev/rerun=2026-12-01")
    meta = first["metadata"]
    rerun = EvaluationRef(name="again", namespace=cluster.namespace, uid=meta["uid"], generation=1, rerun="2026-12-01")
    expected_job = job_name(rerun)
    cluster.wait_for(
        "the re-run's Job", lambda: cluster.evaluation("again")["status"].get("jobName") == expected_job, timeout=60
    )
    second = cluster.wait("again", "Succeeded", timeout=180)
    status = second["status"]
    assert status["rerunToken"] == "2026-12-01" and status["observedGeneration"] == 1
    assert second["metadata"]["generation"] == 1  # the spec never changed
    assert status["startTime"] >= first["status"]["completionTime"]
    # The earlier run's Job is gone, its results are not; each run wrote its own directory.
    cluster.wait_for(
        "the first run's Job to go",
        lambda: [j["metadata"]["name"] for j in cluster.items("jobs")] == [expected_job],
        timeout=60,
    )
    runs = sorted(p.name for p in (cluster.output_dir / "again").iterdir())
    # Directories by run (`g1`, `g1-r<token's hash>`), without the uid's mark of the children's names.
    assert runs == sorted(["g1", run_suffix(rerun)]), runs
    for run in runs:
        assert list((cluster.output_dir / "again" / run).rglob("results_*.json")), run
