"""The Evaluation spec's top-level fields, one row each: the one table the other sources follow.

A field lives in four places: the CRD's schema (deploy/crds/evaluations.assay.dev.yaml and the
chart's copy), the parser (`parsing`, which knows a key by this table), the record
(`model.Evaluation`'s attribute) and the serializer (`serialize.spec_to_dict`).
tests/spec/test_spec_fields.py holds each of them to this table, field by field: the name,
the schema type, whether it is required, and the record's attribute. Adding a field starts
here (docs/architecture.md, "Add a CRD field").
"""

from __future__ import annotations

import dataclasses

INT_OR_STRING = "int-or-string"
"""A schema type of its own in Kubernetes (x-kubernetes-int-or-string: true, no `type`)."""


@dataclasses.dataclass(frozen=True)
class SpecField:
    key: str
    """The CR's name for it (camelCase), as the CRD, the parser's errors and the serializer spell it."""
    attribute: str
    """`Evaluation`'s attribute holding it, parsed."""
    schema_type: str
    """The CRD schema's type: string, integer, number, boolean, object, array, or INT_OR_STRING."""
    required: bool = False


FIELDS: tuple[SpecField, ...] = (
    SpecField("model", "model", "string", required=True),
    SpecField("modelArgs", "model_args", "object"),
    SpecField("tasks", "tasks", "array", required=True),
    SpecField("numFewshot", "num_fewshot", "integer"),
    SpecField("limit", "limit", "number"),
    SpecField("samples", "samples", "object"),
    SpecField("batchSize", "batch_size", INT_OR_STRING),
    SpecField("maxBatchSize", "max_batch_size", "integer"),
    SpecField("genKwargs", "gen_kwargs", "object"),
    SpecField("seed", "seed", INT_OR_STRING),
    SpecField("bootstrapIters", "bootstrap_iters", "integer"),
    SpecField("applyChatTemplate", "apply_chat_template", "boolean"),
    SpecField("chatTemplate", "chat_template", "string"),
    SpecField("fewshotAsMultiturn", "fewshot_as_multiturn", "boolean"),
    SpecField("systemInstruction", "system_instruction", "string"),
    SpecField("logSamples", "log_samples", "boolean"),
    SpecField("predictOnly", "predict_only", "boolean"),
    SpecField("metadata", "metadata", "object"),
    SpecField("trustRemoteCode", "trust_remote_code", "boolean"),
    SpecField("allowUnsafeCode", "allow_unsafe_code", "boolean"),
    SpecField("resources", "resources", "object"),
    SpecField("image", "image", "string"),
    SpecField("hfTokenSecret", "hf_token_secret", "object"),
    SpecField("endpoint", "endpoint", "object"),
    SpecField("cache", "cache", "object"),
    SpecField("output", "output", "object"),
    SpecField("podTemplate", "pod_template", "object"),
    SpecField("backoffLimit", "backoff_limit", "integer"),
    SpecField("activeDeadlineSeconds", "active_deadline_seconds", "integer"),
    SpecField("suspend", "suspend", "boolean"),
    SpecField("taskSources", "task_sources", "array"),
    SpecField("baseline", "baseline", "object"),
    SpecField("gate", "gate", "object"),
    SpecField("stopAt", "stop_at", "object"),
    SpecField("sentinels", "sentinels", "object"),
)
"""In the CRD's order."""

KEYS = frozenset(field.key for field in FIELDS)
BY_KEY = {field.key: field for field in FIELDS}
