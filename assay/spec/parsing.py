"""Parsing an Evaluation spec: every field checked once, every error one sentence naming it.

The cross-field rules mirror the CEL rules of deploy/crds/evaluations.assay.dev.yaml, and the
bounds its maxLength, maxItems and maxProperties, so a manifest that `assay apply --local`
accepts is one the API server accepts too (tests/test_validator_corpus.py holds them to it).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping, Sequence

from assay import batch_size, run_rules
from assay.errors import UserError
from assay.spec import gate_parsing, kube_names, scheduling
from assay.spec.field_errors import FieldErrors
from assay.spec.gate import Gate
from assay.spec.reader import Reader, kind, unknown_field
from assay.spec.model import (
    API_MODELS, API_VERSION, FEWSHOT_AS_MULTITURN_REFUSAL, JSON, KIND, SEED_STRING_RE, Cache, ConfigMapKey, Endpoint,
    Evaluation, Output, PodTemplate, Resources, SecretKey, Seed,
)  # fmt: skip


_TOP_FIELDS = {
    "model", "modelArgs", "tasks", "numFewshot", "limit", "samples", "batchSize",
    "maxBatchSize", "genKwargs", "seed", "applyChatTemplate", "chatTemplate",
    "fewshotAsMultiturn", "systemInstruction", "logSamples", "predictOnly", "metadata",
    "trustRemoteCode", "allowUnsafeCode", "resources", "image", "hfTokenSecret", "endpoint", "cache",
    "output", "podTemplate", "backoffLimit", "activeDeadlineSeconds", "suspend",
    "taskSources", "baseline", "gate",
}  # fmt: skip

# The CRD's bounds on what a user writes (deploy/crds/evaluations.assay.dev.yaml): far above any real
# spec, low enough to stop abuse. Kubernetes' own name and label limits are in `kube_names`.
_MODEL_MAX = 253
_TASKS_MAX = 1000
_TASK_NAME_MAX = 256
_SAMPLE_TASKS_MAX = 1000
_SAMPLE_INDICES_MAX = 100_000
"""Document indices per task in spec.samples: a 200 KiB list of five-digit indices holds about 34000."""
_MAP_ENTRIES_MAX = 256
"""Entries of modelArgs, genKwargs and metadata."""
_TEXT_MAX = 65536
"""systemInstruction and chatTemplate."""
_SEED_MAX = 128
_IMAGE_MAX = 1024
_URL_MAX = 2048
_MODEL_NAME_MAX = 1024
"""endpoint.servedModel and endpoint.tokenizer: a hub id or a path."""
_PATH_MAX = 1024
_TASK_SOURCES_MAX = 16


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
    tasks: tuple[str, ...] = f.read("tasks", lambda: _tasks(r), ())
    samples = f.read("samples", lambda: _samples(r), None)
    limit = f.read("limit", lambda: _limit(r), None)
    f.rule(("limit", "samples"), lambda: run_rules.check_limit_or_samples(
        limit, samples, names=("spec.limit", "spec.samples"), error=UserError))  # fmt: skip
    chat = _chat_fields(f, r)
    no_args: Mapping[str, JSON] = {}
    model_args = f.read("modelArgs", lambda: r.mapping("modelArgs", max_entries=_MAP_ENTRIES_MAX) or no_args, no_args)
    endpoint = f.read("endpoint", lambda: _endpoint(r, model, model_args), None, needs=("model", "modelArgs"))
    resources = f.read("resources", lambda: _resources(r), Resources())
    baseline = f.read("baseline", lambda: gate_parsing.parse_baseline(r), None)
    f.rule(("endpoint", "resources"), lambda: _endpoint_in_one_pod(endpoint, resources))
    plain = {name: f.read(key, functools.partial(read, r), fallback) for name, key, read, fallback in _PLAIN_FIELDS}
    gate = f.read("gate", lambda: gate_parsing.parse_gate(r, has_baseline=baseline is not None), Gate(), needs=("baseline",))
    evaluation = Evaluation(model=model, tasks=tasks, model_args=dict(model_args), limit=limit, samples=samples,
                            endpoint=endpoint, resources=resources, baseline=baseline, gate=gate, **chat, **plain)  # fmt: skip
    return SpecReading(evaluation, f.errors, f.failed)


def _chat_fields(f: FieldErrors, r: Reader) -> dict[str, Any]:
    apply_chat_template = f.read("applyChatTemplate", lambda: bool(r.boolean("applyChatTemplate", False)), False)
    chat_template = f.read("chatTemplate", lambda: r.string("chatTemplate", max_length=_TEXT_MAX), None)
    f.rule(("applyChatTemplate", "chatTemplate"), lambda: _chat_template_needs_apply(chat_template, apply_chat_template))
    fewshot_as_multiturn = f.read("fewshotAsMultiturn", lambda: r.boolean("fewshotAsMultiturn", None), None)
    f.rule(("fewshotAsMultiturn", "applyChatTemplate"), lambda: run_rules.fewshot_as_multiturn(
        fewshot_as_multiturn, apply_chat_template=apply_chat_template, refusal=FEWSHOT_AS_MULTITURN_REFUSAL,
        error=UserError))  # fmt: skip
    return {"apply_chat_template": apply_chat_template, "chat_template": chat_template,
            "fewshot_as_multiturn": fewshot_as_multiturn}  # fmt: skip


def _chat_template_needs_apply(chat_template: str | None, apply_chat_template: bool) -> None:
    if chat_template is not None and not apply_chat_template:
        raise UserError("spec.chatTemplate needs spec.applyChatTemplate: true.")


def _endpoint_in_one_pod(endpoint: Endpoint | None, resources: Resources) -> None:
    if endpoint is not None and resources.nodes > 1:
        raise UserError("spec.endpoint runs in one pod: set spec.resources.nodes to 1 (modelArgs.num_concurrent sets parallel requests).")


# The fields no rule ties to another, read in this order after the others (as
# Evaluation's constructor arguments used to be): attribute, spec key, reader, stand-in.
_PLAIN_FIELDS: tuple[tuple[str, str, Callable[[Reader], Any], Any], ...] = (
    ("num_fewshot", "numFewshot", lambda r: r.integer("numFewshot", None, minimum=run_rules.MIN_NUM_FEWSHOT), None),
    ("batch_size", "batchSize", lambda r: _batch_size(r), batch_size.BatchSize(1)),
    ("max_batch_size", "maxBatchSize", lambda r: batch_size.parse_max(r.get("maxBatchSize"), source="spec.maxBatchSize"), None),
    ("gen_kwargs", "genKwargs", lambda r: _optional_dict(r.mapping("genKwargs", max_entries=_MAP_ENTRIES_MAX)), None),
    ("seed", "seed", lambda r: _seed(r), Seed()),
    ("system_instruction", "systemInstruction",
     lambda r: r.string("systemInstruction", max_length=_TEXT_MAX, allow_empty=True), None),
    ("log_samples", "logSamples", lambda r: bool(r.boolean("logSamples", False)), False),
    ("predict_only", "predictOnly", lambda r: bool(r.boolean("predictOnly", False)), False),
    ("metadata", "metadata", lambda r: _optional_dict(r.mapping("metadata", max_entries=_MAP_ENTRIES_MAX)), None),
    ("trust_remote_code", "trustRemoteCode", lambda r: bool(r.boolean("trustRemoteCode", False)), False),
    ("allow_unsafe_code", "allowUnsafeCode", lambda r: bool(r.boolean("allowUnsafeCode", False)), False),
    ("image", "image", lambda r: r.string("image", max_length=_IMAGE_MAX), None),
    ("hf_token_secret", "hfTokenSecret", lambda r: _secret(r), None),
    ("cache", "cache", lambda r: _cache(r), Cache()),
    ("output", "output", lambda r: _output(r), Output()),
    ("pod_template", "podTemplate", lambda r: _pod_template(r), PodTemplate()),
    ("backoff_limit", "backoffLimit", lambda r: r.integer("backoffLimit", 0, minimum=0) or 0, 0),
    ("active_deadline_seconds", "activeDeadlineSeconds", lambda r: r.integer("activeDeadlineSeconds", None, minimum=1), None),
    ("suspend", "suspend", lambda r: bool(r.boolean("suspend", False)), False),
    ("task_sources", "taskSources", lambda r: _task_sources(r), ()),
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
        return {}, None, [UserError(
            f"Expected apiVersion: {API_VERSION} and kind: {KIND}, "
            f"got apiVersion: {manifest.get('apiVersion')!r} and kind: {manifest.get('kind')!r}."
        )]  # fmt: skip
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


def _tasks(r: Reader) -> tuple[str, ...]:
    value = r.get("tasks")
    if isinstance(value, str):
        raise UserError(f"spec.tasks must be a list of task names, not a string: write tasks: [{value}].")
    if value is not None and (isinstance(value, Mapping) or not isinstance(value, Sequence)):
        raise UserError(f"spec.tasks must be a list of task names, not {kind(value)}.")
    if not value:
        raise UserError("spec.tasks is required: list one or more task, group or tag names.")
    if len(value) > _TASKS_MAX:
        raise UserError(f"spec.tasks lists {len(value)} names; keep at most {_TASKS_MAX} "
                        "(a group or tag names many tasks at once).")  # fmt: skip
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"spec.tasks[{i}] must be a task name, not {kind(name)}.")
        if len(name) > _TASK_NAME_MAX:
            raise UserError(f"spec.tasks[{i}] is {len(name)} characters long; a task name has at most {_TASK_NAME_MAX}.")
    return tuple(name.strip() for name in value)


def _limit(r: Reader) -> int | float | None:
    value = r.get("limit")
    if value is None:
        return None
    if not run_rules.limit_is_valid(value):
        raise UserError(f"spec.limit must be a number above 0 (below 1.0: a fraction of the docs), not {value!r}.")
    return int(value) if value >= 1 and value == int(value) else float(value)


def _samples(r: Reader) -> dict[str, tuple[int, ...]] | None:
    value = r.mapping("samples", max_entries=_SAMPLE_TASKS_MAX)
    if value is None:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for task, ids in value.items():
        if not 1 <= len(str(task)) <= _TASK_NAME_MAX:
            raise UserError(f"spec.samples key {kube_names.quoted(str(task))} must be a task name "
                            f"of 1 to {_TASK_NAME_MAX} characters.")  # fmt: skip
        if not isinstance(ids, Sequence) or isinstance(ids, str) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise UserError(f"spec.samples.{task} must be a list of document indices (integers from 0).")
        if len(ids) > _SAMPLE_INDICES_MAX:
            raise UserError(f"spec.samples.{task} lists {len(ids)} documents; keep at most {_SAMPLE_INDICES_MAX} "
                            "(or use spec.limit, or no selection, for a large share of the task).")  # fmt: skip
        out[str(task)] = tuple(ids)
    return out


def _batch_size(r: Reader) -> batch_size.BatchSize:
    value = r.get("batchSize")
    if value is None:
        return batch_size.BatchSize(1)
    # The shared parser accepts exactly the CRD's forms (its CEL rule), so --local agrees with the API server.
    parsed = batch_size.BatchSize.parse(value, source="spec.batchSize")
    # a digit string given as its int, so that to_dict() round-trips and the results echo 8, not "8"
    fixed = parsed.fixed
    return parsed if fixed is None else batch_size.BatchSize(fixed, 1, fixed)


def _seed(r: Reader) -> Seed:
    value = r.get("seed")
    if value is None:
        return Seed()
    if isinstance(value, int) and not isinstance(value, bool):
        return Seed(value, value, value, value)
    if isinstance(value, str) and len(value) <= _SEED_MAX and SEED_STRING_RE.fullmatch(value.replace(" ", "")):
        slots = [None if s.lower() in ("none", "null") else int(s) for s in value.replace(" ", "").split(",")]
        return Seed(*slots)
    raise UserError(
        f"spec.seed must be an integer (all four seeds) or four comma-separated values "
        f"\"random,numpy,torch,fewshot\" such as \"0,1234,1234,None\", not {value!r}."
    )


def _resources(r: Reader) -> Resources:
    data = r.mapping("resources")
    if data is None:
        return Resources()
    sub = Reader(data, "spec.resources", {"nodes", "gpusPerNode", "cpu", "memory"})
    return Resources(
        nodes=sub.integer("nodes", 1, minimum=1) or 1,
        gpus_per_node=sub.integer("gpusPerNode", 1, minimum=0) or 0,
        cpu=sub.quantity("cpu"),
        memory=sub.quantity("memory"),
    )


def _endpoint(r: Reader, model: str, model_args: Mapping[str, JSON]) -> Endpoint | None:
    data = r.get("endpoint")
    if data is None:
        return None
    if model not in API_MODELS:
        raise UserError(f"spec.endpoint needs spec.model set to one of {', '.join(API_MODELS)}, not {model!r}.")
    clash = sorted({"base_url", "model", "tokenizer", "ca_cert_path"} & set(model_args))
    if clash:
        raise UserError(f"spec.modelArgs.{clash[0]} is set by spec.endpoint; remove it from modelArgs.")
    sub = Reader(data, "spec.endpoint", {"url", "servedModel", "apiKeySecret", "caBundle", "tokenizer"})
    url = sub.string("url", max_length=_URL_MAX, required=True)
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise UserError(f"spec.endpoint.url must start with http:// or https://, not {url!r}.")
    secret = None
    if sub.get("apiKeySecret") is not None:
        ref = Reader(sub.get("apiKeySecret"), "spec.endpoint.apiKeySecret", {"name", "key"})
        secret = SecretKey(name=ref.object_name("name", required=True) or "", key=ref.data_key("key", "api-key"))
    bundle = None
    if sub.get("caBundle") is not None:
        ref = Reader(sub.get("caBundle"), "spec.endpoint.caBundle", {"configMap", "key"})
        bundle = ConfigMapKey(name=ref.object_name("configMap", required=True) or "", key=ref.data_key("key", "ca.crt"))
    return Endpoint(url=url, served_model=sub.string("servedModel", max_length=_MODEL_NAME_MAX), api_key_secret=secret,
                    ca_bundle=bundle, tokenizer=sub.string("tokenizer", max_length=_MODEL_NAME_MAX))


def _secret(r: Reader) -> SecretKey | None:
    data = r.get("hfTokenSecret")
    if data is None:
        return None
    sub = Reader(data, "spec.hfTokenSecret", {"name", "key"})
    name = sub.object_name("name", required=True)
    assert name is not None
    return SecretKey(name=name, key=sub.data_key("key", "token"))


def _task_sources(r: Reader) -> tuple[str, ...]:
    data = r.get("taskSources")
    if data is None:
        return ()
    if not isinstance(data, list):
        raise UserError(f"spec.taskSources must be a list of {{configMap: NAME}}, not {kind(data)}.")
    if len(data) > _TASK_SOURCES_MAX:
        raise UserError(f"spec.taskSources lists {len(data)} ConfigMaps; keep at most {_TASK_SOURCES_MAX} "
                        "(one ConfigMap holds many task YAMLs).")  # fmt: skip
    names: list[str] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise UserError(f"spec.taskSources[{i}] must be a mapping {{configMap: NAME}}, not {kind(item)}.")
        name = Reader(item, f"spec.taskSources[{i}]", {"configMap"}).object_name("configMap", required=True)
        assert name is not None
        if name in names:
            raise UserError(f"spec.taskSources names ConfigMap {name!r} twice; list it once.")
        names.append(name)
    return tuple(names)


def _cache(r: Reader) -> Cache:
    data = r.mapping("cache")
    if data is None:
        return Cache()
    sub = Reader(data, "spec.cache", {"pvc", "offline", "datasetsDir", "localDatasetsDir"})
    return Cache(
        pvc=sub.object_name("pvc"),
        offline=bool(sub.boolean("offline", False)),
        datasets_dir=_relative_path(sub, "datasetsDir"),
        local_datasets_dir=_relative_path(sub, "localDatasetsDir"),
    )


def _output(r: Reader) -> Output:
    data = r.mapping("output")
    if data is None:
        return Output()
    sub = Reader(data, "spec.output", {"pvc", "path"})
    return Output(pvc=sub.object_name("pvc"), path=_relative_path(sub, "path"))


def _relative_path(r: Reader, key: str) -> str | None:
    value = r.string(key, max_length=_PATH_MAX)
    if value is not None and (value.startswith("/") or ".." in value.split("/")):
        raise UserError(f"{r.where(key)} must be a relative path inside the volume without '..', not {value!r}.")
    return value


def _pod_template(r: Reader) -> PodTemplate:
    data = r.mapping("podTemplate")
    if data is None:
        return PodTemplate()
    sub = Reader(
        data, "spec.podTemplate",
        {"nodeSelector", "tolerations", "affinity", "priorityClassName", "labels", "annotations"},
    )  # fmt: skip
    affinity = sub.get("affinity")
    return PodTemplate(
        node_selector=kube_names.check_labels(sub.mapping("nodeSelector") or {}, "spec.podTemplate.nodeSelector"),
        tolerations=scheduling.tolerations(sub.get("tolerations"), "spec.podTemplate.tolerations"),
        affinity=None if affinity is None else scheduling.affinity(affinity, "spec.podTemplate.affinity"),
        priority_class_name=sub.object_name("priorityClassName"),
        labels=kube_names.check_labels(sub.mapping("labels") or {}, "spec.podTemplate.labels"),
        annotations=kube_names.check_labels(sub.mapping("annotations") or {}, "spec.podTemplate.annotations",
                                            annotations=True),
    )


def _optional_dict(value: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    return None if value is None else dict(value)
