"""Operator hardening on the real node (issue 15): the admin's policy as the chart installs it.

The session's operator runs the chart's default policy: no remote code, no unsafe task
code, runners offline; task paths and literal secrets are refused whatever the policy. A
second release, installed with `policy` values, shows the admin's image prefixes and
GPU/node caps reach the operator through Helm. Queued runs are admitted by the real Kueue
controller (the `kueue` fixture, tests/e2e/cluster/kueue.py), which then runs for the rest
of the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import kueue as kueue_cluster
from tests.e2e.cluster.node import NODE_NAME
from tests.e2e.conftest import CHART, Cluster, OperatorDeployment, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import LONG_RUN, dummy_spec, hf_spec
from tests.e2e.refusals import refused

pytestmark = pytest.mark.e2e

SECRET_VALUE = "hf_" + "Zq7" * 12


def test_the_default_policy_refuses_what_a_user_cannot_grant_themselves(cluster: Cluster) -> None:
    message = refused(cluster, "remote", dummy_spec(trustRemoteCode=True))
    assert message.startswith("spec.trustRemoteCode is not allowed in this cluster")
    message = refused(cluster, "unsafe", dummy_spec(allowUnsafeCode=True))
    assert message.startswith("spec.allowUnsafeCode is not allowed in this cluster")
    # Today's `tasks: ["/"]` made the operator walk its own filesystem.
    message = refused(cluster, "walk", dummy_spec(tasks=["/"]))
    assert message.startswith("spec.tasks[0] '/' is a path")
    message = refused(cluster, "leak", dummy_spec(modelArgs={"token": SECRET_VALUE}))
    assert message.startswith("spec.modelArgs.token holds a literal secret")
    # The token appears nowhere the operator writes: status, Events, its log.
    texts = [
        json.dumps(cluster.evaluation("leak").get("status")),
        json.dumps(cluster.items("events")),
        cluster.operator.logs(),
    ]
    assert not [t for t in texts if SECRET_VALUE in t]


def test_runners_are_offline_unless_the_policy_lets_them_online(cluster: Cluster) -> None:
    online = dummy_spec(suspend=True, cache={"pvc": "cache", "localDatasetsDir": "datasets"})
    cluster.apply(evaluation_manifest("online", **online))
    job = cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=online"), timeout=60)[0]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_DATASETS_OFFLINE"] == "1"


def test_the_charts_policy_values_bound_images_gpus_and_nodes(cluster: Cluster, images: dict[str, str]) -> None:
    runner_repository = images["runner"].rsplit(":", 1)[0]
    values = [
        f"watchNamespaces={{{cluster.namespace}}}",
        f"policy.allowedImagePrefixes={{{runner_repository}}}",
        "policy.maxGpusPerEvaluation=2",
        "policy.maxNodesPerEvaluation=1",
    ]
    cluster.operator.kill()  # one operator per namespace at a time
    admin = OperatorDeployment(cluster.plane, namespace=cluster.namespace, release="policy")
    try:
        helm(
            cluster.plane,
            "install",
            "policy",
            str(CHART),
            "--namespace",
            cluster.namespace,
            "--skip-crds",
            *chart_values(images, *values),
            "--wait",
            "--timeout=180s",
        )
        admin.wait_watching()
        message = refused(cluster, "elsewhere", dummy_spec(image="docker.io/attacker/runner:1"))
        assert message.startswith("spec.image 'docker.io/attacker/runner:1' is not from an allowed registry")
        assert runner_repository in message
        message = refused(cluster, "wide", dummy_spec(resources={"nodes": 2, "gpusPerNode": 0}))
        assert "nodes 2 is above this cluster's limit of 1" in message
        message = refused(cluster, "greedy", dummy_spec(resources={"nodes": 1, "gpusPerNode": 4}))
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


GATE_LABEL = "assay.dev/e2e-kueue-gate"
Conditions = dict[str, dict[str, Any]]


def _kueue_queues(namespace: str, *, cpu: str) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue with `cpu` of it for this namespace only, and the
    namespace's LocalQueue `team-queue`. The flavor's node label is a gate: Kueue puts it on
    the pods it admits as a nodeSelector, and the node lacks it until the test adds it."""
    return [
        {
            "apiVersion": kueue_cluster.API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": namespace},
            "spec": {"nodeLabels": {GATE_LABEL: namespace}},
        },
        {
            "apiVersion": kueue_cluster.API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                # Memory too: Kueue admits no pod that requests a resource its queue does not
                # cover, and runner pods request the chart's policy.runnerResources.
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": namespace,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": kueue_cluster.API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": "team-queue", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    ]


def _conditions(obj: dict[str, Any] | None) -> Conditions:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}


def _admitted(conditions: Conditions) -> bool:
    return conditions.get("Admitted", {}).get("status") == "True"


def _job_of(cluster: Cluster, evaluation: str) -> dict[str, Any]:
    (job,) = cluster.wait_for(
        f"the Job of {evaluation}", lambda: cluster.items("jobs", f"assay.dev/evaluation={evaluation}"), timeout=60
    )
    return dict(job)


def _workload_of(kueue: kueue_cluster.Kueue, job: dict[str, Any]) -> dict[str, Any] | None:
    """Kueue's Workload for `job`: Kueue names it, and the Job owns it."""
    for workload in kueue.workloads(job["metadata"]["namespace"]):
        if any(o["uid"] == job["metadata"]["uid"] for o in workload["metadata"].get("ownerReferences") or ()):
            return workload
    return None


def _wait_workload(
    cluster: Cluster,
    kueue: kueue_cluster.Kueue,
    job: dict[str, Any],
    what: str,
    reached: Callable[[Conditions], bool],
    timeout: float = 60,
) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        workload = _workload_of(kueue, job)
        return workload if workload is not None and reached(_conditions(workload)) else None

    try:
        return dict(cluster.wait_for(f"{job['metadata']['name']}'s Workload {what}", found, timeout=timeout))
    except AssertionError as error:
        workloads = json.dumps(kueue.workloads(job["metadata"]["namespace"]), indent=1)
        raise AssertionError(f"{error}\n--- Workloads\n{workloads[-4000:]}\n--- kueue log\n{kueue.tail()}") from None


def _suspend_owners(cluster: Cluster, job: str) -> set[str]:
    """The field managers that last set the Job's `spec.suspend` (Kueue's is `kueue`)."""
    fields = json.loads(cluster.kubectl("get", "job", job, "-o", "json", "--show-managed-fields").stdout)
    return {
        m["manager"]
        for m in fields["metadata"]["managedFields"]
        if "f:suspend" in (m.get("fieldsV1") or {}).get("f:spec", {})
    }


def _waits_for_kueue(cluster: Cluster, evaluation: str) -> str | None:
    """The Evaluation's Running message while it is Pending on a suspended Job, else None."""
    status = cluster.evaluation(evaluation).get("status") or {}
    running = _conditions({"status": status}).get("Running") or {}
    if status.get("phase") == "Pending" and running.get("reason") == "Suspended":
        return str(running.get("message"))
    return None


def test_kueue_admits_queued_runs_one_at_a_time_within_its_quota(cluster: Cluster, kueue: kueue_cluster.Kueue) -> None:
    """The real Kueue controller (sigs.k8s.io/kueue, built from the module proxy, with its
    CRDs and webhooks; tests/e2e/cluster/kueue.py) admits Evaluations through a
    ClusterQueue and a LocalQueue, by its documented Job contract: a Job with the
    `kueue.x-k8s.io/queue-name` label is created with `suspend: true`, Kueue creates a
    Workload for it and admits it by setting `suspend: false` (and may preempt it by setting
    it back). The ClusterQueue holds one CPU and each runner pod asks for one: the second
    Evaluation waits, its Workload not admitted for want of quota, until the first's Job has
    finished. The operator never flips `suspend` on these Jobs, also not after a restart.

    The flavor's node label gates the first run's pod until the test has seen the second
    wait: Kueue sets it as the admitted pods' nodeSelector, and the node gets it later."""
    namespace, plane = cluster.namespace, cluster.plane
    for manifest in _kueue_queues(namespace, cpu="1"):
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
    # backoffLimit 1: the scheduler binds the gated pod as soon as its cache has the node's new
    # label, and the kubelet, whose view of its own node can lag by a moment, may still refuse
    # it (phase Failed, reason NodeAffinity: PodRejected in the Evaluation). The Job counts
    # that as an attempt; a retry is what a real cluster whose nodes get labelled needs too.
    queued = dummy_spec(
        resources={"nodes": 1, "gpusPerNode": 0, "cpu": "1"},
        podTemplate={"labels": {kueue_cluster.QUEUE_LABEL: "team-queue"}},
        backoffLimit=1,
    )
    try:
        # The first run: Kueue admits it at once (the queue is empty) and unsuspends its Job.
        cluster.apply(evaluation_manifest("first", **queued))
        first_job = _job_of(cluster, "first")
        assert first_job["metadata"]["labels"][kueue_cluster.QUEUE_LABEL] == "team-queue"
        admission = _wait_workload(cluster, kueue, first_job, "admitted", _admitted)["status"]["admission"]
        assert admission["clusterQueue"] == namespace
        assert admission["podSetAssignments"][0]["flavors"] == {"cpu": namespace, "memory": namespace}
        name = first_job["metadata"]["name"]
        first_job = cluster.wait_for(
            "Kueue to unsuspend the first Job",
            lambda: job if (job := cluster.get("job", name))["spec"]["suspend"] is False else None,
        )
        # Kueue's hand, not the operator's: its flavor's node label on the pod template, and
        # the field manager that owns `spec.suspend`.
        assert first_job["spec"]["template"]["spec"].get("nodeSelector") == {GATE_LABEL: namespace}
        assert _suspend_owners(cluster, name) == {"kueue"}

        # The second run: its Workload waits for the quota the first holds; its Job stays suspended.
        cluster.apply(evaluation_manifest("second", **queued))
        second_job = _job_of(cluster, "second")
        waiting = _conditions(
            _wait_workload(
                cluster,
                kueue,
                second_job,
                "pending for want of quota",
                lambda c: c.get("QuotaReserved", {}).get("reason") == "Pending",
            )
        )
        assert "insufficient unused quota for cpu" in waiting["QuotaReserved"]["message"], waiting
        assert not _admitted(waiting)
        message = cluster.wait_for(
            "the second Evaluation Pending, waiting for Kueue", lambda: _waits_for_kueue(cluster, "second"), timeout=60
        )
        assert "waits for Kueue to admit it from queue team-queue" in message
        # An operator restart re-plans every Evaluation: it must still leave `suspend` to Kueue.
        cluster.operator.kill()
        cluster.operator.start()
        time.sleep(5)
        assert cluster.get("job", second_job["metadata"]["name"])["spec"]["suspend"] is True
        assert cluster.get("job", name)["spec"]["suspend"] is False
        assert not _admitted(_conditions(_workload_of(kueue, second_job)))
        assert [p["metadata"]["labels"]["job-name"] for p in cluster.items("pods")] == [name]

        # Open the gate: the first run runs and ends, Kueue releases its quota and admits the second.
        plane.kubectl("label", "node", NODE_NAME, f"{GATE_LABEL}={namespace}", "--overwrite")
        first = cluster.wait("first", "Succeeded", timeout=180)["status"]
        assert first["results"]["arc_easy"] and first["jobName"] == name
        second = cluster.wait("second", "Succeeded", timeout=180)["status"]
        assert second["results"]["arc_easy"] and second["jobName"] == second_job["metadata"]["name"]
        finished = _wait_workload(
            cluster, kueue, first_job, "finished", lambda c: c.get("Finished", {}).get("status") == "True"
        )
        admitted = _wait_workload(cluster, kueue, second_job, "admitted", _admitted)
        # RFC 3339 in UTC, to the second: the strings order as the times do.
        assert (
            _conditions(admitted)["Admitted"]["lastTransitionTime"]
            >= _conditions(finished)["Finished"]["lastTransitionTime"]
        )
        assert _suspend_owners(cluster, second_job["metadata"]["name"]) == {"kueue"}
    finally:
        plane.kubectl("label", "node", NODE_NAME, f"{GATE_LABEL}-", check=False)
        for kind in ("clusterqueues", "resourceflavors"):
            plane.kubectl("delete", f"{kind}.{kueue_cluster.GROUP}", namespace, "--wait=false", check=False)


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

    assert cluster.wait_for(
        "the finished run's series",
        lambda: {"assay_evaluation_score", "assay_evaluation_duration_seconds"} <= series(),
        timeout=30,
    )
    # A new spec, held suspended: a new run that has not started.
    cluster.apply(evaluation_manifest("series", **dummy_spec(limit=3, suspend=True)))
    cluster.wait_for(
        "the new run",
        lambda: (cluster.evaluation("series").get("status") or {}).get("jobName") == cluster.job_name("series", 2),
        timeout=60,
    )
    # What stays: the phase, and the info series (model, revision, suite) that scores join on.
    kept = {"assay_evaluation_phase", "assay_evaluation_info"}
    left = cluster.wait_for("the old run's series to go", lambda: (s := series()) == kept and s, timeout=30)
    assert left == kept
    phases = {s.labels["phase"]: s.value for s in samples()["assay_evaluation_phase"]}
    assert phases == {"Pending": 1.0, "Running": 0.0, "Succeeded": 0.0, "Failed": 0.0}


def test_an_api_server_restart_mid_run_loses_nothing(cluster: Cluster) -> None:
    """The API server goes down for 20 s while a run scores and comes back: the operator's
    watches reconnect (a leader that could not renew its Lease exits and its pod restarts,
    as client-go's leader election does), the runner's progress writes of that time are
    dropped and its last write is retried, and the run ends Succeeded with its scores in
    status and one Job."""
    cluster.apply(evaluation_manifest("outlives-api", **hf_spec(**LONG_RUN)))
    cluster.wait_for(
        "the run to report progress",
        lambda: ((cluster.evaluation("outlives-api").get("status") or {}).get("progress") or {}).get("requestsDone"),
        timeout=240,
    )
    # A kube-apiserver that has just started may answer 403 until its authorizer has caught up:
    # not a permission the chart lacks (the teardown's RBAC check forgives that minute).
    cluster.rbac_settling = (time.time(), time.time() + 20 + 60)
    cluster.plane.restart_apiserver(down_for=20)
    status = cluster.wait("outlives-api", "Succeeded", timeout=600)["status"]
    assert set(status["results"]) == set(LONG_RUN["tasks"]), status
    assert [j["metadata"]["name"] for j in cluster.items("jobs")] == [cluster.job_name("outlives-api")]
    cluster.operator.wait_watching()  # for the tests after this one
