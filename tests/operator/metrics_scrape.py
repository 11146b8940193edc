"""An Evaluation with scores, and /metrics scraped over HTTP into (series, labels) → value: shared
by the tests of the operator's metrics, alerts, dashboards and the comparison's series.
"""

from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def scored_evaluation(
    name: str = "ev", *, phase: str = "Succeeded", results: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"]},
        "status": {
            "phase": phase,
            "startTime": "2025-05-01T12:00:00Z",
            "completionTime": "2025-05-01T12:02:00Z",
            "progress": {"requestsDone": 50, "requestsTotal": 200, "summary": "25%"},
            "results": results
            if results is not None
            else {
                "arc_easy": {
                    "acc,none": {"value": 0.61, "stderr": 0.01},
                    "acc_norm,none": {"value": 0.55, "stderr": None},
                },
            },
            "groups": {"ai2_arc": {"acc,none": {"value": 0.5, "stderr": 0.02}}},
        },
    }


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def series_labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


SCORE = dict(
    namespace="team",
    evaluation="ev",
    model="EleutherAI/pythia-160m",
    task="arc_easy",
    metric="acc",
    filter="none",
    trusted="unknown",  # the status has no sentinels' findings
)
