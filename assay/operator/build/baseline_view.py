"""What a run's pod is told of its baseline Evaluation.

The runner may read no Evaluation (its identity can only patch its own status), so the
operator reads the baseline the spec names when it decides the run, and gives the Job this
much of it: enough to find the baseline's results, nothing else of another run's spec."""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]


def view(body: Any) -> Manifest:
    """What the runner needs of its baseline Evaluation (`runner.results.versus_baseline`): its name,
    phase, output volume and results folder; nothing else of its spec reaches another run's pod."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    view: Manifest = {"metadata": {"name": meta.get("name")}, "status": {}, "spec": {"output": {}}}
    for field in ("phase", "outputDir"):
        if isinstance(status.get(field), str):
            view["status"][field] = status[field]
    pvc = ((body.get("spec") or {}).get("output") or {}).get("pvc")
    if isinstance(pvc, str):
        view["spec"]["output"]["pvc"] = pvc
    return view
