"""Every refusal is a reason, and a sweep that cannot die (issue 24), on the real control plane.

- A runner Job the real API server refuses (pod affinity naming matchLabelKeys without a
  labelSelector: the CRD has the field's schema but not that cross-field rule, which
  Kubernetes checks when the Job is created) fails its Evaluation within seconds as
  InvalidSpec, in the API server's words, with one Event and no retries. What the CRD can
  check itself (label keys and values, toleration operators) it refuses at create:
  tests/e2e/test_bounded_input.py.
- A ResourceQuota on Jobs keeps the run Pending with the reason (JobNotCreated) until the
  quota has room, and the Job that never existed is not reported lost.
- The API server gone for a minute: the operator's sweeps go on. The real API server is
  stopped (connection refused), not made to answer 500: a kube-apiserver answers 500 only
  while its etcd fails, and then only after its own request timeout, a minute a request;
  tests/operator/runtime/test_operator_sweeps.py has a local API server answer 500 instead.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.e2e.conftest import CHART, Cluster, OperatorDeployment, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

MANAGED_BY = "app.kubernetes.io/managed-by"


def _events(cluster: Cluster, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.items("events")
        if e["reason"] == reason
        and e["involvedObject"].get("kind") == "Evaluation"
        and e["involvedObject"].get("name") == name
    ]


def _posted(events: list[dict[str, Any]]) -> int:
    """How many times these Events were posted (an Event posted again counts up rather than repeats)."""
    return sum(int(e.get("count") or 1) for e in events)


UNSELECTED_AFFINITY = {
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "matchLabelKeys": ["app"]}
        ]
    }
}


@pytest.mark.parametrize(
    "name,pod_template,said",
    [
        ("bad-affinity", {"affinity": UNSELECTED_AFFINITY}, "matchLabelKeys"),
    ],
)
def test_a_job_the_api_server_refuses_fails_at_once_in_its_words(
    cluster: Cluster, name: str, pod_template: dict[str, Any], said: str
) -> None:
    applied = cluster.apply(evaluation_manifest(name, **dummy_spec(podTemplate=pod_template)), check=False)
    assert applied.returncode == 0, f"the CRD refused what it should let through to the operator: {applied.stderr}"
    status = cluster.wait(name, "Failed", timeout=10)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert (status["reason"], accepted["status"], accepted["reason"]) == ("InvalidSpec", "False", "InvalidSpec")
    message = status["message"]
    assert message.startswith("The API server refused the runner's Job ") and " is invalid: " in message, message
    assert said in message and "spec.podTemplate" in message and "\n" not in message, message
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
    # No retry and no lost Job: forty seconds on (past a sweep of unfinished runs), one Event.
    time.sleep(40)
    assert _posted(_events(cluster, name, "InvalidSpec")) == 1
    assert not _events(cluster, name, "JobLost") and not _events(cluster, name, "JobCreated")
    assert cluster.evaluation(name)["status"]["message"] == message
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []


def test_a_quota_on_jobs_keeps_the_run_pending_with_its_reason_and_loses_no_job(cluster: Cluster) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-jobs"},
            "spec": {"hard": {"count/jobs.batch": "0"}},
        }
    )
    cluster.wait_for(
        "the quota counted",
        lambda: (
            (cluster.get("resourcequota", "no-jobs").get("status") or {}).get("hard", {}).get("count/jobs.batch") == "0"
        ),
        timeout=60,
    )
    cluster.apply(evaluation_manifest("no-room", **dummy_spec(suspend=True)))

    def noted() -> dict[str, Any] | None:
        status = cluster.evaluation("no-room").get("status") or {}
        return status if status.get("reason") == "JobNotCreated" else None

    status = cluster.wait_for("reason JobNotCreated", noted, timeout=30)
    assert status["phase"] == "Pending" and "exceeded quota: no-jobs" in status["message"], status
    time.sleep(40)  # retried by the decision's back-off and by a sweep of unfinished runs meanwhile
    assert not _events(cluster, "no-room", "JobLost") and not _events(cluster, "no-room", "InvalidSpec")
    cluster.kubectl("delete", "resourcequota", "no-jobs")
    cluster.wait_for("the Job", lambda: cluster.items("jobs", "assay.dev/evaluation=no-room"), timeout=120)
    cluster.wait_for(
        "the note gone",
        lambda: (cluster.evaluation("no-room").get("status") or {}).get("reason") not in (None, "JobNotCreated"),
        timeout=60,
    )
    assert not _events(cluster, "no-room", "JobLost")  # it never existed, so it was never lost


def _delete_unseen(cluster: Cluster, evaluation: str) -> str:
    """Delete the run's Job where no watch event tells the operator: first take it out of the
    operator's label selector (its watch then reports it gone, and finds it still there), then
    delete it. Only the resync sweep can find it missing. Returns the deleted Job's uid."""
    (job,) = cluster.wait_for(
        "the Job", lambda: cluster.items("jobs", f"assay.dev/evaluation={evaluation}"), timeout=60
    )
    name = job["metadata"]["name"]
    cluster.kubectl("label", "job", name, f"{MANAGED_BY}-")
    time.sleep(3)  # the operator's look at the Job that left its watch: it is still there
    cluster.kubectl("delete", "job", name, "--wait=true")
    return str(job["metadata"]["uid"])


def _made_again(cluster: Cluster, evaluation: str, gone: str) -> dict[str, Any]:
    def again() -> dict[str, Any] | None:
        jobs = [j for j in cluster.items("jobs", f"assay.dev/evaluation={evaluation}") if j["metadata"]["uid"] != gone]
        return jobs[0] if jobs else None

    # The sweep looks every 30 s at runs first seen 30 s before.
    return dict(cluster.wait_for(f"the Job of {evaluation} made again", again, timeout=120))


def _sweep_errors(text: str) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.labels["sweep"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "assay_sweep_errors_total"
    }


def test_a_minute_without_the_api_server_kills_no_sweep(cluster: Cluster, images: dict[str, str]) -> None:
    # An operator of this namespace without leader election: one that could not renew its
    # Lease for a minute would exit (crash-only), and its restart would hide a dead sweep.
    values = [f"watchNamespaces={{{cluster.namespace}}}", "operator.leaderElection=false"]
    cluster.operator.kill()  # one operator per namespace at a time
    own = OperatorDeployment(cluster.plane, namespace=cluster.namespace, release="resync")
    try:
        helm(
            cluster.plane,
            "install",
            "resync",
            str(CHART),
            "--namespace",
            cluster.namespace,
            "--skip-crds",
            *chart_values(images, *values),
            "--wait",
            "--timeout=180s",
        )
        own.wait_watching()
        cluster.apply(evaluation_manifest("survivor", **dummy_spec(suspend=True)))
        # The sweep (every 30 s) looks only at runs first seen 30 s ago (a Job may be on its
        # way). This one turns 30 s old about 10 s into the minute without the API server; the
        # ~50 s left are more than one interval, so a sweep looks at it while the server is gone.
        time.sleep(15)
        gone = _delete_unseen(cluster, "survivor")
        cluster.plane.restart_apiserver(down_for=60)  # deleted meanwhile, as far as the operator can tell
        _made_again(cluster, "survivor", gone)
        assert len(_events(cluster, "survivor", "JobLost")) == 1
        # The same process all along: its sweeps lived through the minute.
        assert not [s for s in own.pod()["status"]["containerStatuses"] if s.get("restartCount")]
        errors = _sweep_errors(own.metrics())
        assert any(sweep == "resync" and value >= 1 for (sweep, _), value in errors.items()), errors
        log = own.logs()
        for sweep, kind in errors:
            failed = re.findall(rf"The {sweep} sweep failed \({re.escape(kind)}\)", log)
            assert len(failed) == 1, f"{sweep}/{kind} logged {len(failed)} times, not once:\n{own.tail(80)}"
        assert re.search(r"The resync sweep recovered after \d+ ", log), own.tail(80)
        # Both sweeps still work after it: the resync finds another Job gone unseen...
        _made_again(cluster, "survivor", _delete_unseen(cluster, "survivor"))
        # ... and the pending sweep finds pods the Job controller cannot create (no event tells that).
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "no-pods"},
                "spec": {"hard": {"pods": "0"}},
            }
        )
        cluster.wait_for(
            "the quota counted",
            lambda: (cluster.get("resourcequota", "no-pods").get("status") or {}).get("hard", {}).get("pods") == "0",
            timeout=60,
        )
        cluster.apply(evaluation_manifest("stuck", **dummy_spec()))
        cluster.wait_for(
            "reason FailedCreate",
            lambda: (cluster.evaluation("stuck").get("status") or {}).get("reason") == "FailedCreate",
            timeout=120,
        )
    finally:
        helm(cluster.plane, "uninstall", "resync", "--namespace", cluster.namespace, "--wait", "--timeout=120s")
        cluster.operator.start()
