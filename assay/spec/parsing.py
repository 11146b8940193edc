"""Parsing an Evaluation spec: every field checked once, every error one sentence naming it.

The cross-field rules mirror the CEL rules of deploy/crds/evaluations.assay.dev.yaml, and the
bounds its maxLength, maxItems and maxProperties, so a manifest that `assay apply --local`
accepts is one the API server accepts too (tests/cli/test_validator_corpus.py holds them to it).
The fields are parsed by part: what lm-eval is asked (`options_parsing`), where and how the
pods run (`pod_parsing`), the baseline and gate (`gate_parsing`); this module reads them in order.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from assay import batch_size, run_rules
from assay.errors import UserError
from assay.run_options import DEFAULT_BOOTSTRAP_ITERS, SentinelSettings
from assay.spec import fields, gate_parsing, options_parsing, pod_parsing
from assay.spec.field_errors import FieldErrors
from assay.spec.gate import Gate
from assay.spec.model import (
    API_VERSION,
    FEWSHOT_AS_MULTITURN_REFUSAL,
    JSON,
    KIND,
    Cache,
    Endpoint,
    Evaluation,
    Output,
    PodTemplate,
    Resources,
    Seed,
)
from assay.spec.reader import Reader, kind, unknown_field

_TOP_FIELDS = set(fields.KEYS)
"""The spec's keys, as the table of fields (`assay.spec.fields`) names them."""

# The CRD's bounds on what a user writes (deploy/crds/evaluations.assay.dev.yaml): far above any real
# spec, low enough to stop abuse. Kubernetes' own name and label limits are in `kube_names`.
_MODEL_MAX = 253
_MAP_ENTRIES_MAX = 256
"""Entries of modelArgs, genKwargs and metadata."""
_TEXT_MAX = 65536
"""systemInstruction and chatTemplate."""
_IMAGE_MAX = 1024


def parse_spec(spec: Mapping[str, JSON]) -> Evaluation:
    """Parse a CR's `spec`; raise UserError naming the field and the fix (the first error, in reading order)."""
    reading = read_spec(spec)
    if reading.errors:
        raise reading.errors[0]
    assert reading.evaluation is not None
    return reading.evaluation


@dataclasses.dataclass(frozen=True)
class SpecReading:
    """A spec read field by field (see `field_errors`): every error, and the spec with stand-ins where fields failed."""

    evaluation: Evaluation | None
    """None only when the spec is not a mapping at all."""
    errors: list[UserError]
    failed: frozenset[str]
    """The top-level fields (as the CR spells them) whose values are stand-ins."""

    def usable(self, *fields: str) -> bool:
        """Whether the spec's `fields` were read as written, so that a check of them means something."""
        return self.evaluation is not None and not self.failed.intersection(fields)


def read_spec(spec: Mapping[str, JSON]) -> SpecReading:
    """Parse a CR's `spec`, keeping the error of every field."""
    if not isinstance(spec, Mapping):
        return SpecReading(None, [UserError(f"spec must be a mapping, not {kind(spec)}.")], frozenset())
    f = FieldErrors()
    f.errors.extend(unknown_field("spec", key, _TOP_FIELDS) for key in sorted(set(spec) - _TOP_FIELDS))
    r = Reader({key: value for key, value in spec.items() if key in _TOP_FIELDS}, "spec", _TOP_FIELDS)
    model = f.read("model", lambda: r.string("model", max_length=_MODEL_MAX, required=True), None) or ""
    tasks: tuple[str, ...] = f.read("tasks", lambda: options_parsing.parse_tasks(r), ())
    samples = f.read("samples", lambda: options_parsing.parse_samples(r), None)
    limit = f.read("limit", lambda: options_parsing.parse_limit(r), None)
    f.rule(
        ("limit", "samples"),
        lambda: run_rules.check_limit_or_samples(limit, samples, names=("spec.limit", "spec.samples"), error=UserError),
    )
    chat = _chat_fields(f, r)
    no_args: Mapping[str, JSON] = {}
    model_args = f.read("modelArgs", lambda: r.mapping("modelArgs", max_entries=_MAP_ENTRIES_MAX) or no_args, no_args)
    endpoint = f.read(
        "endpoint", lambda: pod_parsing.parse_endpoint(r, model, model_args), None, needs=("model", "modelArgs")
    )
    resources = f.read("resources", lambda: pod_parsing.parse_resources(r), Resources())
    baseline = f.read("baseline", lambda: gate_parsing.parse_baseline(r), None)
    f.rule(("endpoint", "resources"), lambda: _endpoint_in_one_pod(endpoint, resources))
    plain = {name: f.read(key, functools.partial(read, r), fallback) for name, key, read, fallback in _PLAIN_FIELDS}
    gate = f.read(
        "gate", lambda: gate_parsing.parse_gate(r, has_baseline=baseline is not None), Gate(), needs=("baseline",)
    )
    stop_at = f.read("stopAt", lambda: gate_parsing.parse_stop_at(r), None)
    sentinels = f.read("sentinels", lambda: options_parsing.parse_sentinels(r), SentinelSettings())
    evaluation = Evaluation(
        model=model,
        tasks=tasks,
        model_args=dict(model_args),
        limit=limit,
        samples=samples,
        endpoint=endpoint,
        resources=resources,
        baseline=baseline,
        gate=gate,
        stop_at=stop_at,
        sentinels=sentinels,
        **chat,
        **plain,
    )
    return SpecReading(evaluation, f.errors, f.failed)


def _chat_fields(f: FieldErrors, r: Reader) -> dict[str, Any]:
    apply_chat_template = f.read("applyChatTemplate", lambda: bool(r.boolean("applyChatTemplate", False)), False)
    chat_template = f.read("chatTemplate", lambda: r.string("chatTemplate", max_length=_TEXT_MAX), None)
    f.rule(
        ("applyChatTemplate", "chatTemplate"), lambda: _chat_template_needs_apply(chat_template, apply_chat_template)
    )
    fewshot_as_multiturn = f.read("fewshotAsMultiturn", lambda: r.boolean("fewshotAsMultiturn", None), None)
    f.rule(
        ("fewshotAsMultiturn", "applyChatTemplate"),
        lambda: run_rules.fewshot_as_multiturn(
            fewshot_as_multiturn,
            apply_chat_template=apply_chat_template,
            refusal=FEWSHOT_AS_MULTITURN_REFUSAL,
            error=UserError,
        ),
    )
    return {
        "apply_chat_template": apply_chat_template,
        "chat_template": chat_template,
        "fewshot_as_multiturn": fewshot_as_multiturn,
    }


def _chat_template_needs_apply(chat_template: str | None, apply_chat_template: bool) -> None:
    if chat_template is not None and not apply_chat_template:
        raise UserError("spec.chatTemplate needs spec.applyChatTemplate: true.")


def _endpoint_in_one_pod(endpoint: Endpoint | None, resources: Resources) -> None:
    if endpoint is not None and resources.nodes > 1:
        raise UserError(
            "spec.endpoint runs in one pod: set spec.resources.nodes to 1 (modelArgs.num_concurrent sets parallel requests)."
        )


# The fields no rule ties to another, read in this order after the others (as
# Evaluation's constructor arguments used to be): attribute, spec key, reader, stand-in.
_PLAIN_FIELDS: tuple[tuple[str, str, Callable[[Reader], Any], Any], ...] = (
    ("num_fewshot", "numFewshot", lambda r: r.integer("numFewshot", None, minimum=run_rules.MIN_NUM_FEWSHOT), None),
    ("batch_size", "batchSize", options_parsing.parse_batch_size, batch_size.BatchSize(1)),
    (
        "max_batch_size",
        "maxBatchSize",
        lambda r: batch_size.parse_max(r.get("maxBatchSize"), source="spec.maxBatchSize"),
        None,
    ),
    ("gen_kwargs", "genKwargs", lambda r: _optional_dict(r.mapping("genKwargs", max_entries=_MAP_ENTRIES_MAX)), None),
    ("seed", "seed", options_parsing.parse_seed, Seed()),
    ("bootstrap_iters", "bootstrapIters", options_parsing.parse_bootstrap_iters, DEFAULT_BOOTSTRAP_ITERS),
    (
        "system_instruction",
        "systemInstruction",
        lambda r: r.string("systemInstruction", max_length=_TEXT_MAX, allow_empty=True),
        None,
    ),
    ("log_samples", "logSamples", lambda r: bool(r.boolean("logSamples", False)), False),
    ("predict_only", "predictOnly", lambda r: bool(r.boolean("predictOnly", False)), False),
    ("metadata", "metadata", lambda r: _optional_dict(r.mapping("metadata", max_entries=_MAP_ENTRIES_MAX)), None),
    ("trust_remote_code", "trustRemoteCode", lambda r: bool(r.boolean("trustRemoteCode", False)), False),
    ("allow_unsafe_code", "allowUnsafeCode", lambda r: bool(r.boolean("allowUnsafeCode", False)), False),
    ("image", "image", lambda r: r.string("image", max_length=_IMAGE_MAX), None),
    ("hf_token_secret", "hfTokenSecret", pod_parsing.parse_secret, None),
    ("cache", "cache", pod_parsing.parse_cache, Cache()),
    ("output", "output", pod_parsing.parse_output, Output()),
    ("pod_template", "podTemplate", pod_parsing.parse_pod_template, PodTemplate()),
    ("backoff_limit", "backoffLimit", lambda r: r.integer("backoffLimit", 0, minimum=0) or 0, 0),
    (
        "active_deadline_seconds",
        "activeDeadlineSeconds",
        lambda r: r.integer("activeDeadlineSeconds", None, minimum=1),
        None,
    ),
    ("suspend", "suspend", lambda r: bool(r.boolean("suspend", False)), False),
    ("task_sources", "taskSources", pod_parsing.parse_task_sources, ()),
)


def parse_manifest(manifest: Mapping[str, JSON]) -> tuple[Mapping[str, JSON], Evaluation]:
    """Check an Evaluation manifest's apiVersion and kind; return (metadata, spec). UserError: the first error."""
    metadata, reading, errors = read_manifest(manifest)
    if errors:
        raise errors[0]
    assert reading is not None and reading.evaluation is not None
    return metadata, reading.evaluation


def read_manifest(manifest: Mapping[str, JSON]) -> tuple[Mapping[str, JSON], SpecReading | None, list[UserError]]:
    """(metadata, the spec as read, every error). An object of another kind, or one without a spec, is
    one error and no spec."""
    if not isinstance(manifest, Mapping):
        return {}, None, [UserError(f"An Evaluation manifest must be a mapping, not {kind(manifest)}.")]
    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != KIND:
        return (
            {},
            None,
            [
                UserError(
                    f"Expected apiVersion: {API_VERSION} and kind: {KIND}, "
                    f"got apiVersion: {manifest.get('apiVersion')!r} and kind: {manifest.get('kind')!r}."
                )
            ],
        )
    metadata = manifest.get("metadata") or {}
    errors: list[UserError] = []
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        errors.append(UserError("The Evaluation manifest needs metadata.name."))
        metadata = {}
    if "spec" not in manifest:
        name = f" {metadata['name']!r}" if metadata.get("name") else ""
        return metadata, None, [*errors, UserError(f"The Evaluation{name} has no spec.")]
    reading = read_spec(manifest["spec"])
    return metadata, reading, [*errors, *reading.errors]


def _optional_dict(value: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    return None if value is None else dict(value)
