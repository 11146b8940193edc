"""The Evaluation bodies the reconcile tests plan from, and the Jobs a plan creates."""

from __future__ import annotations

import datetime
from typing import Any

from assay.operator.build import names
from assay.operator.decide import reconcile

NOW = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


SPEC = {"model": "hf", "modelArgs": {"pretrained": "m"}, "tasks": ["arc_easy"]}


MARK = names.owner_mark("u1")
"""What ends the names of the children of the Evaluation `evaluation_body` makes (its uid's)."""


def evaluation_body(spec: dict[str, Any], *, generation: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "ev", "namespace": "ns", "uid": "u1", "generation": generation},
        "spec": spec,
        "status": status or {},
    }


def jobs_of(plan: reconcile.Plan) -> list[dict[str, Any]]:
    return [m for m in plan.create if m["kind"] == "Job"]
