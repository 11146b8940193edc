"""Whether a spec fits where the runner reads it: an annotation of its own pod.

The runner's pod carries the spec as JSON in its annotation `SPEC_ANNOTATION`, and reads it
from a downward API file (`build.containers.spec_volume`): no spec object per run to create,
and nothing the runner must be allowed to read. Kubernetes bounds a pod's annotations, keys
and values together, at 256 KiB; a spec past that (with the podTemplate's own annotations)
is refused here, in one sentence, before anything is created for it.
"""

from __future__ import annotations

from assay import spec as spec_module
from assay.errors import UserError

SPEC_ANNOTATION = "assay.dev/spec"
"""The runner pod's annotation holding its spec as JSON."""
MAX_ANNOTATION_BYTES = 256 * 1024
"""Kubernetes' bound on an object's annotations, keys and values together (TotalAnnotationSizeLimitB)."""
OPERATOR_ANNOTATION_BYTES = 1024
"""Room kept for the annotations the operator adds beside the spec (the Evaluation's name: at most 253)."""


def check(spec: spec_module.Evaluation) -> None:
    """UserError when the spec and its podTemplate's annotations do not fit a pod's annotations."""
    spec_bytes = len(SPEC_ANNOTATION) + len(spec.to_json().encode())
    theirs = sum(len(key.encode()) + len(str(value).encode()) for key, value in spec.pod_template.annotations.items())
    if spec_bytes + theirs + OPERATOR_ANNOTATION_BYTES <= MAX_ANNOTATION_BYTES:
        return
    raise UserError(
        f"The spec is {_kib(spec_bytes)} KiB as JSON (spec.podTemplate.annotations {_kib(theirs)} KiB more), and "
        f"the runner's pod carries it in an annotation, which Kubernetes bounds at {MAX_ANNOTATION_BYTES // 1024} "
        "KiB with the pod's other annotations; shorten its largest fields (samples, systemInstruction, modelArgs, "
        "podTemplate.annotations)."
    )


def _kib(size: int) -> str:
    return f"{size / 1024:.0f}"
