"""A spec travels in its runner pod's annotation: one that cannot fit is refused before anything is made.

Kubernetes bounds an object's annotations at 256 KiB, keys and values together; the spec
shares them with the podTemplate's own annotations. The refusal is one sentence naming the
sizes and what to shorten, never the spec's text.
"""

from __future__ import annotations

import pytest

from assay.errors import UserError
from assay.operator.admission import admit, spec_size
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.spec import parse_spec

BASE = {"model": "dummy", "tasks": ["arc_easy"]}


def _admit(spec: dict) -> object:
    return admit.admit(spec, namespace="evals", admin=AdminPolicy(), secret_metadata=lambda _: None, config_map=None)


def test_a_spec_that_fits_is_admitted_and_carried_whole() -> None:
    spec = {**BASE, "samples": {"arc_easy": list(range(30_000))}}  # about 190 KiB of JSON
    admitted = _admit(spec).spec  # type: ignore[attr-defined]
    job = builders.job(builders.EvaluationRef(name="e", namespace="evals", uid="u", generation=1), admitted)
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert sum(len(k) + len(v) for k, v in annotations.items()) <= spec_size.MAX_ANNOTATION_BYTES
    assert annotations[builders.ANNOTATION_SPEC] == admitted.to_json()


def test_a_spec_past_a_pods_annotations_is_one_sentence() -> None:
    secret_looking = "sk-not-echoed"
    spec = {**BASE, "samples": {"arc_easy": list(range(60_000))}, "systemInstruction": secret_looking}
    with pytest.raises(UserError) as refused:
        _admit(spec)
    message = str(refused.value)
    assert message.startswith("The spec is 341 KiB as JSON") and "KiB as JSON" in message
    assert "which Kubernetes bounds at 256 KiB" in message and message.endswith("podTemplate.annotations).")
    assert secret_looking not in message and message.count(". ") == 0


def test_the_pod_templates_own_annotations_count_too() -> None:
    theirs = {f"note-{i}": "x" * 3000 for i in range(40)}  # within the spec's own bounds: 64 of 3072 each
    samples = {"arc_easy": list(range(25_000))}  # about 140 KiB of JSON; the annotations are in the spec too
    spec_size.check(parse_spec({**BASE, "samples": samples}))
    with pytest.raises(UserError, match=r"\(spec.podTemplate.annotations 117 KiB more\)"):
        spec_size.check(parse_spec({**BASE, "samples": samples, "podTemplate": {"annotations": theirs}}))
