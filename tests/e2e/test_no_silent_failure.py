"""No Succeeded without scores, and failing before the work (issue 24, items 1 and 5).

A run whose runner loses the right to write its status mid-run (its RoleBinding deleted)
ends Failed with reason ResultsNotRecorded, never Succeeded: the runner's final status
patch is refused (403), it still writes its results to the output PVC, says where in its
log, and exits 74, which the Job's podFailurePolicy turns into FailJob. The operator
checks the namespace's runner identity (`assay-runner`) again only every ten minutes, so
the deletion holds for the rest of this run. A run whose output directory cannot be written
fails within seconds, before the model loads.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.run_results import RunResults
from tests.e2e.conftest import Cluster, _claim, _local_volume, evaluation_manifest
from tests.e2e.helpers import LONG_RUN, dummy_spec, hf_spec

pytestmark = pytest.mark.e2e
RUNNER_UID = 1000


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or ()}


def test_a_run_whose_status_write_is_denied_mid_run_fails_with_results_not_recorded(cluster: Cluster) -> None:
    name = "unrecorded"
    cluster.apply(evaluation_manifest(name, **hf_spec(**LONG_RUN)))
    cluster.wait_for(
        "the run to report progress",
        lambda: ((cluster.evaluation(name).get("status") or {}).get("progress") or {}).get("requestsDone"),
        timeout=240,
    )
    selector = f"assay.dev/evaluation={name}"
    cluster.kubectl("delete", "rolebinding", cluster.runner_account(name))

    # `cluster.wait` fails at once should the run become Succeeded.
    status = cluster.wait(name, "Failed", timeout=600)["status"]
    conditions = _conditions(status)
    assert status["phase"] == "Failed" and status["reason"] == "ResultsNotRecorded", status
    assert conditions["Failed"]["reason"] == "ResultsNotRecorded"
    assert conditions["Succeeded"]["status"] == "False"
    assert (conditions["Ready"]["status"], conditions["Reconciling"]["status"], conditions["Stalled"]["status"]) == (
        "False",
        "False",
        "True",
    )
    assert "results" not in status
    # Where the files are: the output PVC, in this run's folder.
    assert f"on PVC output in {name}/g1" in status["message"], status["message"]
    event = cluster.wait_for(f"the Failed Event of {name}", lambda: cluster.events(name).get("Failed"), timeout=30)
    assert event == status["message"]
    (job,) = cluster.items("jobs", selector)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PodFailurePolicy" and "exit code 74" in failed["message"], failed
    # The scores survive on the output volume, and the runner's log says where.
    (saved,) = sorted((cluster.output_dir / name / "g1").rglob("results_*.json"))
    logs = cluster.runner_logs()
    assert "HTTP 403" in logs and f"the scores did not reach status; they are only in /output/{name}/g1/" in logs, logs[
        -3000:
    ]
    assert saved.name in logs
    # Nothing put the RoleBinding back before the run ended: the refusal was real to the end. (An
    # operator that restarts makes the namespace's runner identity again with its next Job.)
    failed_at = conditions["Failed"]["lastTransitionTime"]
    bindings = cluster.items("rolebindings", "app.kubernetes.io/name=assay-runner")
    assert [b for b in bindings if b["metadata"]["creationTimestamp"] < failed_at] == []
    # `kubectl wait --for=condition=Succeeded` does not return as if it had.
    waited = cluster.kubectl(
        "wait", "--for=condition=Succeeded", f"evaluation/{name}", "--timeout=5s", check=False, timeout=60
    )
    assert waited.returncode != 0


def test_an_output_directory_that_cannot_be_written_fails_before_the_model_loads(cluster: Cluster) -> None:
    name = "blocked-output"
    # A file where the run's folder would go: the runner cannot create its output directory.
    (cluster.output_dir / "blocked").write_text("not a folder")
    cluster.apply(evaluation_manifest(name, **dummy_spec(output={"pvc": "output", "path": "blocked/run"})))
    status = cluster.wait(name, "Failed", timeout=180)["status"]
    assert status["reason"] == "PodFailurePolicy", status
    assert "Cannot write to the output directory /output/blocked/run (Not a directory)" in status["message"], status
    assert "progress" not in status  # no request was ever sent to the model
    pod_logs = cluster.runner_logs()
    assert "evaluating" not in pod_logs and "Traceback" not in pod_logs, pod_logs[-3000:]


def test_the_api_server_keeps_the_runners_fields_and_refuses_a_superseded_runs_patch(cluster: Cluster) -> None:
    """The runner's sink against the real API server: its JSON patch lands while status.jobName
    is its Job's, every field it writes is kept (none pruned by the schema), and the patch of
    a run that is not the current one is refused whole (422) and read as superseded."""
    from assay.kube import api_session, credentials
    from assay.kube import client as kube_client
    from assay.runner.results.status_sink import KubernetesStatusSink

    name = "sink-check"
    # A spec the default policy refuses: the operator writes InvalidSpec once and runs nothing.
    cluster.apply(evaluation_manifest(name, **dummy_spec(trustRemoteCode=True)))
    cluster.wait(name, "Failed", timeout=60)
    cluster.kubectl(
        "patch",
        "evaluation",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"jobName": "sink-check-g1"}}',
    )
    api = kube_client.ApiClient(api_session.Session(credentials.load(str(cluster.plane.admin_kubeconfig))))
    results = {
        "results": {"arc_easy": {"acc,none": 0.5, "acc_stderr,none": 0.01}},
        "n-samples": {"arc_easy": {"original": 4, "effective": 4}},
        "versions": {"arc_easy": 1},
    }
    run = RunResults.from_lmeval_dict(results)

    def sink(job_name: str) -> KubernetesStatusSink:
        return KubernetesStatusSink(name=name, namespace=cluster.namespace, job_name=job_name, api=api, min_interval=0)

    late = sink("sink-check-g0")
    assert late.finished(run) is False  # refused whole: not this run's status
    assert "results" not in cluster.evaluation(name)["status"]
    current = sink("sink-check-g1")
    current.progress(4, 4)
    assert current.finished(run) is True
    current.output(
        written=False, message="The results files could not be written under /output/x (No space left on device)."
    )
    status = cluster.evaluation(name)["status"]
    assert status["results"]["arc_easy"]["acc,none"] == {"value": 0.5, "stderr": 0.01}
    assert status["progress"]["requestsDone"] == 4 and status["runnerMessage"] == "Evaluated 1 tasks."
    assert status["outputFiles"] == {
        "written": False,
        "message": "The results files could not be written under /output/x (No space left on device).",
    }


def test_a_full_output_volume_keeps_the_scores_and_says_what_was_not_written(cluster: Cluster, tmp_path: Path) -> None:
    # A 96 KiB tmpfs as the output PV: room for the response cache (~57 KB for 50 documents
    # of the dummy model) and the results JSON (~3 KB), not for the samples (~90 KB).
    mount = tmp_path / "small-output"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=96k,uid={RUNNER_UID},gid={RUNNER_UID},mode=0775", "tmpfs", str(mount)],
        check=True,
    )
    volume = f"{cluster.namespace}-small"
    try:
        cluster.plane.kubectl(
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump(_local_volume(volume, mount, namespace=cluster.namespace, claim="small")),
        )
        cluster.apply(_claim("small", volume))
        cluster.wait_for(
            "the claim to bind", lambda: cluster.get("pvc", "small")["status"].get("phase") == "Bound", timeout=60
        )
        spec = dummy_spec(limit=50, logSamples=True, output={"pvc": "small"})
        cluster.apply(evaluation_manifest("full", **spec))
        status = cluster.wait("full", "Succeeded", timeout=180)["status"]
        assert status["results"]["arc_easy"], status  # the scores are in
        written = _conditions(status)["OutputWritten"]
        assert written["status"] == "False" and written["reason"] == "OutputNotWritten", written
        assert "No space left on device" in written["message"], written
        assert status["outputFiles"]["written"] is False, status
    finally:
        cluster.kubectl("delete", "evaluation", "full", "--wait=true", check=False)
        cluster.wait_for(
            "the runner pods to go", lambda: not cluster.items("pods", "assay.dev/evaluation=full"), timeout=120
        )
        cluster.plane.kubectl("delete", "pv", volume, "--wait=false", check=False)
        subprocess.run(["umount", "-l", str(mount)], check=False)
