"""An Evaluation with a large spec costs the operator a bounded amount of memory (`large_specs`),
and its run is still decided from the whole spec, read from the API server (a local one
over real HTTP: tests/operator/local_apiserver.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from assay import spec as spec_module
from assay.operator import handlers
from assay.operator.admission import policy, validation
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.decide import large_specs
from assay.operator.runtime import observe
from assay.operator.runtime.state import OperatorState
from assay.operator.runtime.watched import Watched
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

EVALUATIONS = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations"
SAMPLES = list(range(100_000, 200_000))  # the CRD's most for one task: 0.7 MB of JSON
LARGEST_SAMPLES = {"arc_easy": SAMPLES, "arc_challenge": list(range(200_000, 300_000))}
"""1.4 MB of JSON, near etcd's object limit."""


def _evaluation(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": name, "namespace": "evals", "uid": f"uid-{name}", "generation": 1, "resourceVersion": "7"},
        "spec": {"model": "hf", "tasks": ["arc_easy"], "modelArgs": {"pretrained": "org/m", "revision": "v2"}, **spec},
    }


def test_a_spec_a_person_writes_is_kept_whole() -> None:
    body = _evaluation("tiny", samples={"arc_easy": list(range(500))}, systemInstruction="Answer briefly.")
    assert large_specs.kept(body) is body and not large_specs.is_elided(body)


def test_a_large_spec_keeps_its_small_fields_and_the_small_entries_of_its_mappings() -> None:
    body = _evaluation(
        "big", samples={"arc_easy": SAMPLES}, modelArgs={"pretrained": "org/m", "revision": "v2", "notes": "x" * 5000}
    )
    kept = large_specs.kept(body)
    assert set(kept[large_specs.ELIDED]) == {"samples", "modelArgs"}
    assert kept["spec"] == {
        "model": "hf",
        "tasks": ["arc_easy"],
        "samples": {},
        "modelArgs": {"pretrained": "org/m", "revision": "v2"},
    }
    assert kept["metadata"] == body["metadata"] and body["spec"]["samples"]["arc_easy"] is SAMPLES  # body unchanged
    # What the metrics label a run by survives.
    assert spec_module.parse_spec(kept["spec"]).model_label == spec_module.parse_spec(body["spec"]).model_label


def _deep_size(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of the Python objects reachable from `value` (each counted once)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size += sum(_deep_size(item, seen) for item in value)
    return size


def test_evaluations_of_the_largest_size_cost_the_watch_cache_a_bounded_amount() -> None:
    """Twenty 1.4 MB specs, decoded as a watch decodes them, then kept: what stays is their small fields."""
    state = OperatorState(watched=Watched(job_label=builders.LABEL_JOB))
    raw = json.dumps(_evaluation("x", samples=LARGEST_SAMPLES))
    decoded = json.loads(raw)
    assert _deep_size(decoded) > 7_000_000  # one such body as Python objects
    for i in range(20):
        body = json.loads(raw)
        body["metadata"]["name"] = f"big-{i}"
        observe.seen(state, "evaluations", body)
    kept = [state.watched.evaluations.get("evals", f"big-{i}") for i in range(20)]
    assert all(k is not None and large_specs.is_elided(k) for k in kept)
    assert _deep_size(kept) < 200_000


@pytest.fixture
def known_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's task index is not what is tested here."""
    monkeypatch.setattr(validation, "validate_with_sources", lambda spec, **_: [])


@pytest.mark.usefixtures("known_tasks")
def test_a_run_is_decided_from_the_whole_spec_read_from_the_api_server(api: LocalApiServer) -> None:
    body = _evaluation("big", model="dummy", samples={"arc_easy": SAMPLES[:20_000]}, systemInstruction="s" * 65_536)
    del body["spec"]["modelArgs"]
    api.put(body, f"{EVALUATIONS}/big")
    state = OperatorState(policy=AdminPolicy(), watched=Watched(job_label=builders.LABEL_JOB))
    observe.seen(state, "evaluations", body)
    kept = state.watched.evaluations.get("evals", "big")
    assert large_specs.is_elided(kept)

    handlers.decide_run(kept, state=state)

    assert ("GET", f"{EVALUATIONS}/big") in api.requests
    jobs = [o for p, o in api.objects.items() if "/jobs/" in p]
    assert len(jobs) == 1
    whole = builders.spec_hash(policy.enforce(spec_module.parse_spec(body["spec"]), AdminPolicy()))
    assert jobs[0]["metadata"]["annotations"][builders.ANNOTATION_SPEC_HASH] == whole


@pytest.mark.usefixtures("known_tasks")
def test_an_evaluation_deleted_before_its_decision_decides_nothing(api: LocalApiServer) -> None:
    state = OperatorState(policy=AdminPolicy(), watched=Watched(job_label=builders.LABEL_JOB))
    observe.seen(state, "evaluations", _evaluation("gone", model="dummy", samples={"arc_easy": SAMPLES}))
    handlers.decide_run(state.watched.evaluations.get("evals", "gone"), state=state)
    assert not [o for p, o in api.objects.items() if "/jobs/" in p or "/events/" in p]
