"""Recorded Jobs, pods and Events (tests/operator/recorded) served by a fake of `kube`, for the
tests of what the operator observes of a run (observe, peer failures). A fake: these tests
are about reading recorded objects, not about the API server (the e2e tier has that).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from assay.operator.decide import conditions
from assay.operator.kube import kube

RECORDED = Path(__file__).parent / "recorded"


T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def load(name: str) -> Any:
    return json.loads((RECORDED / f"{name}.json").read_text())


class FakeApi:
    """Serves one Job, its pods and Events; records every write."""

    def __init__(self, job: dict[str, Any], pods: list[dict[str, Any]], events: list[dict[str, Any]] = ()) -> None:
        self.job, self.pods, self.events = job, pods, list(events)
        self.reads: list[tuple[str, ...]] = []
        self.status_patches: list[dict[str, Any]] = []
        self.ended: list[str] = []
        self.posted: list[tuple[str, str, str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kube, "get", self.get)
        monkeypatch.setattr(kube, "list_objects", self.list_objects)
        monkeypatch.setattr(kube, "list_events", self.list_events)
        monkeypatch.setattr(kube, "patch_evaluation_status", self.patch_status)
        monkeypatch.setattr(kube, "end_job", self.end_job)

    def get(self, kind: str, api_version: str, *, namespace: str, name: str) -> Any:
        self.reads.append(("get", kind, name))
        return self.job if kind == "Job" and name == self.job["metadata"]["name"] else None

    def list_objects(
        self,
        kind: str,
        api_version: str,
        *,
        namespace: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[Any]:
        self.reads.append(("list", kind, label_selector or ""))
        assert kind == "Pod" and label_selector == f"assay.dev/job={self.job['metadata']['name']}"
        return self.pods

    def list_events(self, *, namespace: str, kind: str, name: str) -> list[Any]:
        self.reads.append(("events", kind, name))
        return [e for e in self.events if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name]

    def patch_status(self, *, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status_patches.append(json.loads(json.dumps(status)))

    def end_job(self, *, namespace: str, name: str) -> None:
        self.ended.append(name)

    def emit(self, obj: Any, *, type: str, reason: str, message: str) -> None:
        self.posted.append((type, reason, message))


def accepted_evaluation(status: dict[str, Any] | None = None) -> dict[str, Any]:
    accepted = conditions.accepted(None, job_name="tiny-g1", generation=1, now=T0, new_run=True)
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "tiny", "namespace": "evals", "uid": "e1", "generation": 1},
        "status": status or {k: v for k, v in accepted.items() if v is not None},
    }


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)
