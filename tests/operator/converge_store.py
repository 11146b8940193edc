"""What the converge tests share: an Evaluation named tiny, its Job's name, and a Store that
stands in for the API server's objects where a test counts what converge creates and patches."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from assay.kube import api_errors
from assay.operator.build import builders
from assay.operator.decide import conditions
from assay.operator.kube import kube
from tests.operator.local_apiserver import PatchFailed, json_patch

T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}


def tiny_job_name(name: str = "tiny") -> str:
    return builders.job_name(builders.EvaluationRef(name=name, namespace="evals", uid=f"uid-{name}", generation=1))


def tiny_evaluation(name: str = "tiny", **status: Any) -> dict[str, Any]:
    accepted = conditions.accepted(None, job_name=tiny_job_name(name), generation=1, now=T0, new_run=True)
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": name, "namespace": "evals", "uid": f"uid-{name}", "generation": 1},
        "spec": dict(SPEC),
        "status": {**{k: v for k, v in accepted.items() if v is not None}, **status},
    }


class Store:
    """The objects `kube.create` made, by (kind, name)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []
        self.patched: list[tuple[str, str]] = []
        monkeypatch.setattr(kube, "create", self.create)
        monkeypatch.setattr(kube, "json_patch", self.json_patch)
        monkeypatch.setattr(kube, "get", lambda kind, v, *, namespace, name: self.objects.get((kind, name)))
        monkeypatch.setattr(kube, "list_children", self.list_children)
        monkeypatch.setattr(kube, "patch_evaluation_status", lambda **_: None)

    def create(self, manifest: dict[str, Any]) -> bool:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in self.objects:
            return False
        self.objects[key] = manifest
        return True

    def json_patch(self, manifest: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key not in self.objects:
            raise api_errors.ApiError(code=404, reason="NotFound")
        try:
            self.objects[key] = json_patch(self.objects[key], operations)
        except PatchFailed as failed:
            raise api_errors.ApiError(code=422, reason="Invalid", message=str(failed)) from None
        self.patched.append(key)
        return self.objects[key]

    def list_children(self, kind: str, api_version: str, **_: Any) -> list[dict[str, Any]]:
        return [o for (k, _name), o in self.objects.items() if k == kind]

    def emit(self, obj: Any, *, type: str, reason: str, message: str) -> None:
        self.events.append((type, reason))
