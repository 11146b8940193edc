"""GitOps tools on a real cluster: the kstatus conditions that Flux and `kubectl wait` read,
and the Argo CD health check (deploy/argocd/health.lua) run on live Evaluations.

With ASSAY_RECORD_STATUSES=1 the live objects are written to tests/operator/recorded
(evaluation_*.json), where the unit tests run the health check on them without a cluster.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.argocd_health import argocd_health
from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec, hf_spec

pytestmark = pytest.mark.e2e

RECORDED = Path(__file__).resolve().parents[1] / "operator" / "recorded"


def _record(case: str, evaluation: dict[str, Any]) -> None:
    if os.environ.get("ASSAY_RECORD_STATUSES") != "1":
        return
    metadata = evaluation["metadata"]
    for noise in ("managedFields", "uid", "resourceVersion", "namespace", "annotations"):
        metadata.pop(noise, None)
    (RECORDED / f"evaluation_{case}.json").write_text(json.dumps(evaluation, indent=1, sort_keys=True) + "\n")


def _kstatus(evaluation: dict[str, Any]) -> dict[str, str]:
    conditions = {c["type"]: c["status"] for c in evaluation["status"]["conditions"]}
    return {t: conditions[t] for t in ("Ready", "Reconciling", "Stalled")}


def test_argocd_health_and_kstatus_follow_a_real_run_from_creation_to_each_outcome(cluster: Cluster) -> None:
    created = json.loads(
        cluster.kubectl(
            "apply", "-o", "json", "-f", "-", input=yaml.safe_dump(evaluation_manifest("ok", **hf_spec()))
        ).stdout
    )
    assert argocd_health(created)[0] == "Progressing"
    _record("created", created)
    cluster.apply(evaluation_manifest("typo", **dummy_spec(tasks=["arc_easyy"])))
    cluster.apply(evaluation_manifest("held", **dummy_spec(suspend=True)))
    cluster.apply(evaluation_manifest("nomodel", **hf_spec("/cache/models/absent")))

    running = cluster.wait_for(
        "evaluation/ok to run",
        lambda: (lambda e: e if (e.get("status") or {}).get("phase") == "Running" else None)(cluster.evaluation("ok")),
        timeout=180,
    )
    assert _kstatus(running) == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert argocd_health(running)[0] == "Progressing"
    _record("running", running)

    # Flux and `kubectl wait` read Ready (success) and Stalled (failure for good).
    cluster.kubectl_wait("ok", "Ready", timeout=240)
    succeeded = cluster.evaluation("ok")
    assert succeeded["status"]["phase"] == "Succeeded"
    assert _kstatus(succeeded) == {"Ready": "True", "Reconciling": "False", "Stalled": "False"}
    assert argocd_health(succeeded) == ("Healthy", succeeded["status"]["message"])
    _record("succeeded", succeeded)

    for name, reason in (("typo", "InvalidSpec"), ("nomodel", "PodFailurePolicy")):
        cluster.kubectl_wait(name, "Stalled", timeout=180)
        failed = cluster.evaluation(name)
        assert failed["status"]["phase"] == "Failed" and failed["status"]["reason"] == reason, failed["status"]
        assert _kstatus(failed) == {"Ready": "False", "Reconciling": "False", "Stalled": "True"}
        health, message = argocd_health(failed)
        assert health == "Degraded" and message == failed["status"]["message"]
        _record(f"failed_{reason.lower()}", failed)

    held = cluster.wait_for(
        "evaluation/held to be suspended",
        lambda: (lambda e: e if (e.get("status") or {}).get("reason") == "Suspended" else None)(
            cluster.evaluation("held")
        ),
        timeout=60,
    )
    assert _kstatus(held) == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert argocd_health(held)[0] == "Suspended"
    _record("suspended", held)
