"""The Argo CD health check on the statuses the operator's own code writes for runner Jobs
recorded on a real cluster (tests/operator/recorded/job_*.json): a stuck or failed run is
never shown Healthy, and Ready/Reconciling/Stalled agree with what Argo CD shows."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from assay.operator.decide import conditions, job_status
from tests.argocd_health import argocd_health

RECORDED = Path(__file__).parents[1] / "recorded"
NOW = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.timezone.utc)
KSTATUS = {
    "Healthy": ("True", "False", "False"),
    "Progressing": ("False", "True", "False"),
    "Degraded": ("False", "False", "True"),
}


def _evaluation_for(job: dict[str, Any], **runner_wrote: Any) -> dict[str, Any]:
    status = conditions.accepted(None, job_name=job["metadata"]["name"], generation=1, now=NOW, new_run=True)
    status = {**{k: v for k, v in status.items() if v is not None}, **runner_wrote}
    status.update(job_status.from_job(status, job, generation=1, now=NOW))
    return {"metadata": {"name": "tiny", "generation": 1}, "spec": {}, "status": status}


@pytest.mark.parametrize(
    ("recording", "health"),
    [
        ("job_no_pods", "Progressing"),
        ("job_pods_pending", "Progressing"),
        ("job_failed_backoff_limit", "Degraded"),
        ("job_failed_deadline_exceeded", "Degraded"),
    ],
)
def test_health_of_the_status_written_for_a_recorded_job(recording: str, health: str) -> None:
    job = json.loads((RECORDED / f"{recording}.json").read_text())
    evaluation = _evaluation_for(job)
    shown, message = argocd_health(evaluation)
    assert shown == health
    assert message.startswith(evaluation["status"]["message"])
    by_type = {c["type"]: c["status"] for c in evaluation["status"]["conditions"]}
    assert (by_type["Ready"], by_type["Reconciling"], by_type["Stalled"]) == KSTATUS[health]


def test_a_completed_recorded_job_is_healthy() -> None:
    job = json.loads((RECORDED / "job_pods_pending.json").read_text())
    job["status"] = {
        **job["status"],
        "active": 0,
        "ready": 0,
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-01T09:00:00Z"}],
    }
    evaluation = _evaluation_for(job, results={"arc_easy": {"acc,none": {"value": 0.5, "stderr": None}}})
    assert argocd_health(evaluation) == ("Healthy", evaluation["status"]["message"])
    # Complete, but the scores never reached status: not Healthy.
    unrecorded = _evaluation_for(job)
    assert argocd_health(unrecorded)[0] == "Degraded" and unrecorded["status"]["reason"] == "ResultsNotRecorded"
