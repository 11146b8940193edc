"""Operator hardening on the real node (issue 15): the admin's policy as the chart installs it.

The session's operator runs the chart's default policy: no remote code, no unsafe task
code, runners offline; task paths and literal secrets are refused whatever the policy. A
second release, installed with `policy` values, shows the admin's image prefixes and
GPU/node caps reach the operator through Helm.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.conftest import CHART, Cluster, OperatorDeployment, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

SECRET_VALUE = "hf_" + "Zq7" * 12


def _refused(cluster: Cluster, name: str, spec: dict[str, Any]) -> str:
    """Apply `spec`; wait until it is refused; check that nothing ran. Returns the message."""
    cluster.apply(evaluation_manifest(name, **spec))
    status = cluster.wait(name, "Failed", timeout=60)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "InvalidSpec", status
    assert status["message"].count(". ") == 0 and status["message"].endswith("."), status["message"]
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
    assert cluster.items("serviceaccounts", f"assay.dev/evaluation={name}") == []
    event = cluster.wait_for(f"the InvalidSpec Event of {name}", lambda: cluster.events(name).get("InvalidSpec"),
                             timeout=30)  # fmt: skip
    assert event == status["message"]
    return str(status["message"])


def test_the_default_policy_refuses_what_a_user_cannot_grant_themselves(cluster: Cluster) -> None:
    message = _refused(cluster, "remote", dummy_spec(trustRemoteCode=True))
    assert message.startswith("spec.trustRemoteCode is not allowed in this cluster")
    message = _refused(cluster, "unsafe", dummy_spec(allowUnsafeCode=True))
    assert message.startswith("spec.allowUnsafeCode is not allowed in this cluster")
    # Today's `tasks: ["/"]` made the operator walk its own filesystem.
    message = _refused(cluster, "walk", dummy_spec(tasks=["/"]))
    assert message.startswith("spec.tasks[0] '/' is a path")
    message = _refused(cluster, "leak", dummy_spec(modelArgs={"token": SECRET_VALUE}))
    assert message.startswith("spec.modelArgs.token holds a literal secret")
    # The token appears nowhere the operator writes: status, Events, its log.
    texts = [json.dumps(cluster.evaluation("leak").get("status")), json.dumps(cluster.items("events")),
             cluster.operator.logs()]  # fmt: skip
    assert not [t for t in texts if SECRET_VALUE in t]


def test_runners_are_offline_unless_the_policy_lets_them_online(cluster: Cluster) -> None:
    online = dummy_spec(suspend=True, cache={"pvc": "cache", "localDatasetsDir": "datasets"})
    cluster.apply(evaluation_manifest("online", **online))
    job = cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=online"), timeout=60)[0]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_DATASETS_OFFLINE"] == "1"


def test_the_charts_policy_values_bound_images_gpus_and_nodes(cluster: Cluster, images: dict[str, str]) -> None:
    runner_repository = images["runner"].rsplit(":", 1)[0]
    values = [f"watchNamespaces={{{cluster.namespace}}}", f"policy.allowedImagePrefixes={{{runner_repository}}}",
              "policy.maxGpusPerEvaluation=2", "policy.maxNodesPerEvaluation=1"]  # fmt: skip
    cluster.operator.kill()  # one operator per namespace at a time
    admin = OperatorDeployment(cluster.plane, namespace=cluster.namespace, release="policy")
    try:
        helm(cluster.plane, "install", "policy", str(CHART), "--namespace", cluster.namespace, "--skip-crds",
             *chart_values(images, *values), "--wait", "--timeout=180s")  # fmt: skip
        admin.wait_watching()
        message = _refused(cluster, "elsewhere", dummy_spec(image="docker.io/attacker/runner:1"))
        assert message.startswith("spec.image 'docker.io/attacker/runner:1' is not from an allowed registry")
        assert runner_repository in message
        message = _refused(cluster, "wide", dummy_spec(resources={"nodes": 2, "gpusPerNode": 0}))
        assert "nodes 2 is above this cluster's limit of 1" in message
        message = _refused(cluster, "greedy", dummy_spec(resources={"nodes": 1, "gpusPerNode": 4}))
        assert "asks for 4 GPUs" in message and "limit of 2" in message
        # An image under the allowed prefix runs to the end.
        cluster.apply(evaluation_manifest("allowed", **dummy_spec(image=images["runner"])))
        status = cluster.wait("allowed", "Succeeded", timeout=180)["status"]
        assert status["results"]["arc_easy"]
    finally:
        helm(cluster.plane, "uninstall", "policy", "--namespace", cluster.namespace, "--wait", "--timeout=120s")
        cluster.operator.start()


def test_a_job_deleted_by_hand_is_created_again_and_runs(cluster: Cluster) -> None:
    # Suspended first, so the Job is deleted before it ran anything.
    cluster.apply(evaluation_manifest("lost", **dummy_spec(suspend=True)))
    (job,) = cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=lost"), timeout=60)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    cluster.kubectl("delete", "job", name, "--wait=true")

    def recreated() -> list[dict[str, Any]]:
        return [j for j in cluster.items("jobs", "assay.dev/evaluation=lost") if j["metadata"]["uid"] != uid]

    (again,) = cluster.wait_for("the Job to be created again", recreated, timeout=60)
    assert again["metadata"]["name"] == name and again["spec"]["suspend"] is True
    lost = cluster.wait_for("a JobLost Event", lambda: cluster.events("lost").get("JobLost"), timeout=30)
    assert name in lost
    assert cluster.evaluation("lost")["status"]["jobName"] == name
    cluster.kubectl("patch", "evaluation", "lost", "--type=merge", "-p", '{"spec": {"suspend": false}}')
    status = cluster.wait("lost", "Succeeded", timeout=180)["status"]
    assert status["results"]["arc_easy"]
    assert len(cluster.items("jobs", "assay.dev/evaluation=lost")) == 1


def test_a_kueue_queued_run_waits_for_admission_and_only_kueue_unsuspends_it(cluster: Cluster) -> None:
    """Kueue's documented Job contract (kueue.sigs.k8s.io/docs/tasks/run/jobs): a Job with the
    `kueue.x-k8s.io/queue-name` label is created with `suspend: true`; Kueue admits it by
    setting `suspend: false` (and may preempt it by setting it back). The real Kueue
    controller is not run here: built from its module it is a large controller whose
    admission webhooks need serving certificates the API server can reach, more than this
    suite's one-machine cluster and its setup budget carry; so this test plays Kueue's part
    with the same API call Kueue makes, and checks the operator's side of the contract."""
    queued = dummy_spec(podTemplate={"labels": {"kueue.x-k8s.io/queue-name": "team-queue"}})
    cluster.apply(evaluation_manifest("queued", **queued))
    (job,) = cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=queued"), timeout=60)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-queue"

    def waiting() -> str | None:
        status = cluster.evaluation("queued").get("status") or {}
        running = {c["type"]: c for c in status.get("conditions") or ()}.get("Running") or {}
        if status.get("phase") == "Pending" and running.get("reason") == "Suspended":
            return str(running.get("message"))
        return None

    message = cluster.wait_for("Pending, waiting for Kueue", waiting, timeout=60)
    assert "waits for Kueue to admit it from queue team-queue" in message
    # An operator restart re-plans every Evaluation: it must still leave `suspend` to Kueue.
    cluster.operator.kill()
    cluster.operator.start()
    time.sleep(5)
    assert cluster.get("job", job["metadata"]["name"])["spec"]["suspend"] is True
    assert cluster.items("pods") == []
    # Admission, as Kueue does it.
    cluster.kubectl("patch", "job", job["metadata"]["name"], "--type=merge", "-p", '{"spec": {"suspend": false}}')
    status = cluster.wait("queued", "Succeeded", timeout=180)["status"]
    assert status["results"]["arc_easy"] and status["jobName"] == job["metadata"]["name"]


def test_a_rerun_resets_its_series_on_the_operators_metrics(cluster: Cluster) -> None:
    cluster.apply(evaluation_manifest("series", **dummy_spec()))
    cluster.wait("series", "Succeeded", timeout=180)
    from prometheus_client.parser import text_string_to_metric_families

    def samples() -> dict[str, list[Any]]:
        """name → samples of this Evaluation (the exposition sorts labels, so parse it)."""
        found: dict[str, list[Any]] = {}
        for family in text_string_to_metric_families(cluster.operator.metrics()):
            for sample in family.samples:
                if sample.labels.get("namespace") == cluster.namespace and sample.labels.get("evaluation") == "series":
                    found.setdefault(sample.name, []).append(sample)
        return found

    def series() -> set[str]:
        return set(samples())

    assert cluster.wait_for("the finished run's series", lambda: {"assay_evaluation_score",
                            "assay_evaluation_duration_seconds"} <= series(), timeout=30)  # fmt: skip
    # A new spec, held suspended: a new run that has not started.
    cluster.apply(evaluation_manifest("series", **dummy_spec(limit=3, suspend=True)))
    cluster.wait_for("the new run", lambda: (cluster.evaluation("series").get("status") or {}).get("jobName")
                     == "series-g2", timeout=60)  # fmt: skip
    # What stays: the phase, and the info series (model, revision, suite) that scores join on.
    kept = {"assay_evaluation_phase", "assay_evaluation_info"}
    left = cluster.wait_for("the old run's series to go", lambda: (s := series()) == kept and s, timeout=30)
    assert left == kept
    phases = {s.labels["phase"]: s.value for s in samples()["assay_evaluation_phase"]}
    assert phases == {"Pending": 1.0, "Running": 0.0, "Succeeded": 0.0, "Failed": 0.0}
