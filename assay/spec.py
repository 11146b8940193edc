"""The Evaluation spec (assay.dev/v1alpha1) as one typed, frozen record.

The same record is read by three programs: the operator (from the custom resource), the
runner pod (from its environment) and `assay apply --local` (from a manifest file). It
sits below both `assay.runner` and `assay.operator` so that all three parse a spec the
same way and reject the same mistakes with the same sentence. The cross-field rules here
mirror the CEL rules of deploy/crds/evaluations.assay.dev.yaml, so a manifest that
`--local` accepts is one the API server accepts too.

Runner-pod contract
-------------------
The operator starts `python -m assay.runner` (one process) or
`torchrun ... -m assay.runner` (several) in a Job, and tells it everything through
its environment:

``ASSAY_EVALUATION``
    The spec as JSON (the CR's `spec`, as `Evaluation.to_dict()` writes it). When
    absent, the runner reads ``--spec FILE`` (JSON or YAML, either the spec itself or a
    whole Evaluation manifest).
``ASSAY_EVALUATION_NAME`` / ``ASSAY_EVALUATION_NAMESPACE``
    The Evaluation to report to; with both set (and in-cluster credentials) the runner's
    rank 0 patches `status.progress` and `status.results` through
    `assay.runner.results.status_sink.sink_from_env()`.
``ASSAY_EVALUATION_GENERATION``
    The `metadata.generation` the run belongs to; the sink drops a late report of an
    older generation instead of overwriting a newer run's status.
``ASSAY_OUTPUT_DIR``
    Where full results JSON (and samples JSONL with `logSamples`) go: the output volume.
``ASSAY_POD_NAME``
    The pod's own name (downward API), for logs and output file names.
``ASSAY_STATUS_FILE``
    Optional; `assay apply --local` sets it so the runner writes its condensed status
    as JSON to that file instead of the API server.

Exit codes: 0 on success; ``CONFIG_ERROR_EXIT_CODE`` (78, sysexits' EX_CONFIG) when the
spec cannot run as written (an `assay.errors.UserError`: unknown task, bad model
argument, missing dataset in offline mode). The Job's podFailurePolicy fails the Job at
once on 78 instead of retrying. torchrun reports any worker failure as 1, so with
several processes the Job also runs `python -m assay.runner --check` first as an init
container: it parses the spec, resolves tasks and the model, and exits 78 on a
UserError without loading the model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Mapping, Sequence, Union

from assay import batch_size, run_rules
from assay.errors import UserError

GROUP = "assay.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Evaluation"
PLURAL = "evaluations"

CONFIG_ERROR_EXIT_CODE = 78

ENV_SPEC = "ASSAY_EVALUATION"
ENV_NAME = "ASSAY_EVALUATION_NAME"
ENV_NAMESPACE = "ASSAY_EVALUATION_NAMESPACE"
ENV_GENERATION = "ASSAY_EVALUATION_GENERATION"
ENV_OUTPUT_DIR = "ASSAY_OUTPUT_DIR"
ENV_POD_NAME = "ASSAY_POD_NAME"
ENV_STATUS_FILE = "ASSAY_STATUS_FILE"

BatchSize = Union[int, str]
JSON = Any

_SEED_SLOT_RE = r"(None|none|null|-?[0-9]+)"
SEED_STRING_RE = re.compile(rf"^{_SEED_SLOT_RE}(,{_SEED_SLOT_RE}){{3}}$")
# Kubernetes' resource.Quantity grammar, as controller-gen writes it into CRDs.
QUANTITY_RE = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@dataclasses.dataclass(frozen=True)
class Seed:
    """lm-eval's four seeds; `seed: N` sets all four, like `--seed N`."""

    random: int | None = 0
    numpy: int | None = 1234
    torch: int | None = 1234
    fewshot: int | None = 1234


@dataclasses.dataclass(frozen=True)
class Resources:
    nodes: int = 1
    """Pods of the Job; each runs `gpusPerNode` ranks."""
    gpus_per_node: int = 1
    """nvidia.com/gpu per pod, and torchrun's --nproc_per_node when above 1."""
    cpu: str | None = None
    """CPU request and limit per pod (a Kubernetes quantity)."""
    memory: str | None = None
    """Memory request and limit per pod (a Kubernetes quantity)."""

    @property
    def world_size(self) -> int:
        return self.nodes * max(self.gpus_per_node, 1)


@dataclasses.dataclass(frozen=True)
class SecretKey:
    name: str
    """The Secret, in the Evaluation's namespace."""
    key: str = "token"
    """The key inside it holding the Hugging Face token."""


@dataclasses.dataclass(frozen=True)
class Cache:
    pvc: str | None = None
    """PVC mounted at /cache for the Hugging Face model and dataset cache; emptyDir if unset."""
    offline: bool = False
    """Set HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1: use only what the cache holds."""
    datasets_dir: str | None = None
    """Directory inside the cache volume used as HF_DATASETS_CACHE."""
    local_datasets_dir: str | None = None
    """Directory inside the cache volume in Assay's offline layout (`assay data import`): ASSAY_DATASETS_DIR."""


@dataclasses.dataclass(frozen=True)
class Output:
    pvc: str | None = None
    """PVC mounted at /output for results and samples; emptyDir (lost with the pod) if unset."""
    path: str | None = None
    """Directory inside the output volume; `<name>/g<generation>` if unset."""


@dataclasses.dataclass(frozen=True)
class PodTemplate:
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: Sequence[Mapping[str, JSON]] = ()
    affinity: Mapping[str, JSON] | None = None
    priority_class_name: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pod labels; Kueue's `kueue.x-k8s.io/queue-name` is copied onto the Job as well."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The `spec` of one Evaluation. Field names are the CR's, in snake_case."""

    model: str
    tasks: tuple[str, ...]
    model_args: Mapping[str, JSON] = dataclasses.field(default_factory=dict)
    num_fewshot: int | None = None
    """None: each task's own default."""
    limit: int | float | None = None
    """Below 1.0, a fraction of each task's docs; else a count (lm-eval's --limit)."""
    samples: Mapping[str, tuple[int, ...]] | None = None
    """Per task, the doc indices to evaluate (lm-eval's --samples); exclusive with limit."""
    batch_size: BatchSize = 1
    max_batch_size: int | None = None
    gen_kwargs: Mapping[str, JSON] | None = None
    seed: Seed = Seed()
    apply_chat_template: bool = False
    chat_template: str | None = None
    """Which of the tokenizer's named chat templates (lm-eval's --apply_chat_template NAME)."""
    fewshot_as_multiturn: bool | None = None
    """None: on exactly when a chat template is applied, as lm-eval decides."""
    system_instruction: str | None = None
    log_samples: bool = False
    predict_only: bool = False
    metadata: Mapping[str, JSON] | None = None
    trust_remote_code: bool = False
    allow_unsafe_code: bool = False
    resources: Resources = Resources()
    image: str | None = None
    """Runner image; the operator's default image if unset."""
    hf_token_secret: SecretKey | None = None
    cache: Cache = Cache()
    output: Output = Output()
    pod_template: PodTemplate = PodTemplate()
    backoff_limit: int = 0
    active_deadline_seconds: int | None = None
    suspend: bool = False

    @classmethod
    def from_dict(cls, spec: Mapping[str, JSON]) -> "Evaluation":
        return parse_spec(spec)

    def to_dict(self) -> dict[str, JSON]:
        """The spec in the CR's camelCase form; `parse_spec(e.to_dict()) == e`."""
        return _spec_to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def model_label(self) -> str:
        """What the model is called in metrics and status: the checkpoint when there is one."""
        for key in ("pretrained", "model", "engine", "path"):
            value = self.model_args.get(key)
            if isinstance(value, str) and value:
                return value
        return self.model

    def to_run_kwargs(self) -> dict[str, JSON]:
        """Keyword arguments of lm-eval-style `simple_evaluate` for this spec."""
        model_args = dict(self.model_args)
        if self.trust_remote_code:
            # lm-eval's --trust_remote_code also sets it in model_args.
            model_args["trust_remote_code"] = True
        apply_chat_template: bool | str = False
        if self.apply_chat_template:
            apply_chat_template = self.chat_template or True
        fewshot_as_multiturn = self.fewshot_as_multiturn
        if fewshot_as_multiturn is None:
            fewshot_as_multiturn = bool(apply_chat_template)
        return {
            "model": self.model,
            "model_args": model_args,
            "tasks": list(self.tasks),
            "num_fewshot": self.num_fewshot,
            "limit": self.limit,
            "samples": {task: list(ids) for task, ids in self.samples.items()} if self.samples else None,
            "batch_size": self.batch_size,
            "max_batch_size": self.max_batch_size,
            "gen_kwargs": dict(self.gen_kwargs) if self.gen_kwargs else None,
            "random_seed": self.seed.random,
            "numpy_random_seed": self.seed.numpy,
            "torch_random_seed": self.seed.torch,
            "fewshot_random_seed": self.seed.fewshot,
            "apply_chat_template": apply_chat_template,
            "fewshot_as_multiturn": fewshot_as_multiturn,
            "system_instruction": self.system_instruction,
            "log_samples": run_rules.log_samples(log_samples=self.log_samples, predict_only=self.predict_only),
            "predict_only": self.predict_only,
            "metadata": dict(self.metadata) if self.metadata else None,
            "confirm_run_unsafe_code": self.allow_unsafe_code,
        }


# --- parsing -------------------------------------------------------------------------

_TOP_FIELDS = {
    "model", "modelArgs", "tasks", "numFewshot", "limit", "samples", "batchSize",
    "maxBatchSize", "genKwargs", "seed", "applyChatTemplate", "chatTemplate",
    "fewshotAsMultiturn", "systemInstruction", "logSamples", "predictOnly", "metadata",
    "trustRemoteCode", "allowUnsafeCode", "resources", "image", "hfTokenSecret", "cache",
    "output", "podTemplate", "backoffLimit", "activeDeadlineSeconds", "suspend",
}  # fmt: skip


class _Reader:
    """Typed access to one mapping of the spec; every error names the field's path."""

    def __init__(self, data: Mapping[str, JSON], path: str, known: set[str]) -> None:
        if not isinstance(data, Mapping):
            raise UserError(f"{path or 'spec'} must be a mapping, not {_kind(data)}.")
        unknown = sorted(set(data) - known)
        if unknown:
            hint = _suggestion(unknown[0], known)
            raise UserError(
                f"Unknown field {_join(path, unknown[0])!r} in the Evaluation spec.{hint} "
                f"Known fields: {', '.join(sorted(known))}."
            )
        self.data = data
        self.path = path

    def where(self, key: str) -> str:
        return _join(self.path, key)

    def get(self, key: str) -> JSON:
        return self.data.get(key)

    def string(self, key: str, *, required: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if required:
                raise UserError(f"{self.where(key)} is required: set it to a non-empty string.")
            return None
        if not isinstance(value, str) or (required and not value):
            raise UserError(f"{self.where(key)} must be a non-empty string, not {_kind(value)}.")
        return value

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise UserError(f"{self.where(key)} must be true or false, not {_kind(value)}.")
        return value

    def integer(self, key: str, default: int | None, *, minimum: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{self.where(key)} must be an integer, not {_kind(value)}.")
        if value < minimum:
            raise UserError(f"{self.where(key)} must be at least {minimum}, not {value}.")
        return value

    def mapping(self, key: str) -> Mapping[str, JSON] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise UserError(f"{self.where(key)} must be a mapping, not {_kind(value)}.")
        return value

    def string_map(self, key: str) -> dict[str, str]:
        value = self.mapping(key) or {}
        for k, v in value.items():
            if not isinstance(v, str):
                raise UserError(f"{self.where(key)}.{k} must be a string, not {_kind(v)}; quote it in YAML.")
        return dict(value)

    def quantity(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not QUANTITY_RE.match(str(value)):
            raise UserError(f"{self.where(key)} must be a Kubernetes quantity such as 4, 500m or 16Gi, not {value!r}.")
        return str(value)


def parse_spec(spec: Mapping[str, JSON]) -> Evaluation:
    """Parse a CR's `spec`; raise UserError naming the field and the fix."""
    r = _Reader(spec, "spec", _TOP_FIELDS)
    model = r.string("model", required=True)
    assert model is not None
    tasks = _tasks(r)
    samples = _samples(r)
    limit = _limit(r)
    run_rules.check_limit_or_samples(limit, samples, names=("spec.limit", "spec.samples"), error=UserError)
    apply_chat_template = bool(r.boolean("applyChatTemplate", False))
    chat_template = r.string("chatTemplate")
    if chat_template is not None and not apply_chat_template:
        raise UserError("spec.chatTemplate needs spec.applyChatTemplate: true.")
    fewshot_as_multiturn = r.boolean("fewshotAsMultiturn", None)
    if fewshot_as_multiturn and not apply_chat_template:
        raise UserError("spec.fewshotAsMultiturn: true needs spec.applyChatTemplate: true (as in lm-eval).")
    model_args = r.mapping("modelArgs") or {}
    return Evaluation(
        model=model,
        tasks=tasks,
        model_args=dict(model_args),
        num_fewshot=r.integer("numFewshot", None, minimum=0),
        limit=limit,
        samples=samples,
        batch_size=_batch_size(r),
        max_batch_size=r.integer("maxBatchSize", None, minimum=1),
        gen_kwargs=_optional_dict(r.mapping("genKwargs")),
        seed=_seed(r),
        apply_chat_template=apply_chat_template,
        chat_template=chat_template,
        fewshot_as_multiturn=fewshot_as_multiturn,
        system_instruction=r.string("systemInstruction"),
        log_samples=bool(r.boolean("logSamples", False)),
        predict_only=bool(r.boolean("predictOnly", False)),
        metadata=_optional_dict(r.mapping("metadata")),
        trust_remote_code=bool(r.boolean("trustRemoteCode", False)),
        allow_unsafe_code=bool(r.boolean("allowUnsafeCode", False)),
        resources=_resources(r),
        image=r.string("image"),
        hf_token_secret=_secret(r),
        cache=_cache(r),
        output=_output(r),
        pod_template=_pod_template(r),
        backoff_limit=r.integer("backoffLimit", 0, minimum=0) or 0,
        active_deadline_seconds=r.integer("activeDeadlineSeconds", None, minimum=1),
        suspend=bool(r.boolean("suspend", False)),
    )


def parse_manifest(manifest: Mapping[str, JSON]) -> tuple[Mapping[str, JSON], Evaluation]:
    """Check an Evaluation manifest's apiVersion and kind; return (metadata, spec)."""
    if not isinstance(manifest, Mapping):
        raise UserError(f"An Evaluation manifest must be a mapping, not {_kind(manifest)}.")
    if manifest.get("apiVersion") != API_VERSION or manifest.get("kind") != KIND:
        raise UserError(
            f"Expected apiVersion: {API_VERSION} and kind: {KIND}, "
            f"got apiVersion: {manifest.get('apiVersion')!r} and kind: {manifest.get('kind')!r}."
        )
    metadata = manifest.get("metadata") or {}
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        raise UserError("The Evaluation manifest needs metadata.name.")
    if "spec" not in manifest:
        raise UserError(f"The Evaluation {metadata['name']!r} has no spec.")
    return metadata, parse_spec(manifest["spec"])


def _tasks(r: _Reader) -> tuple[str, ...]:
    value = r.get("tasks")
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise UserError("spec.tasks is required: list one or more task, group or tag names.")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"spec.tasks[{i}] must be a task name, not {_kind(name)}.")
    return tuple(name.strip() for name in value)


def _limit(r: _Reader) -> int | float | None:
    value = r.get("limit")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError(f"spec.limit must be a number above 0 (below 1.0: a fraction of the docs), not {value!r}.")
    return int(value) if value >= 1 and value == int(value) else float(value)


def _samples(r: _Reader) -> dict[str, tuple[int, ...]] | None:
    value = r.mapping("samples")
    if value is None:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for task, ids in value.items():
        if not isinstance(ids, Sequence) or isinstance(ids, str) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
        ):
            raise UserError(f"spec.samples.{task} must be a list of document indices (integers from 0).")
        out[str(task)] = tuple(ids)
    return out


def _batch_size(r: _Reader) -> BatchSize:
    value = r.get("batchSize")
    if value is None:
        return 1
    parsed = batch_size.BatchSize.parse(value, source="spec.batchSize")
    # kept as written (a digit string as its int), so that to_dict() round-trips
    return parsed.fixed if parsed.fixed is not None else str(value)


def _seed(r: _Reader) -> Seed:
    value = r.get("seed")
    if value is None:
        return Seed()
    if isinstance(value, int) and not isinstance(value, bool):
        return Seed(value, value, value, value)
    if isinstance(value, str) and SEED_STRING_RE.match(value.replace(" ", "")):
        slots = [None if s.lower() in ("none", "null") else int(s) for s in value.replace(" ", "").split(",")]
        return Seed(*slots)
    raise UserError(
        f"spec.seed must be an integer (all four seeds) or four comma-separated values "
        f"\"random,numpy,torch,fewshot\" such as \"0,1234,1234,None\", not {value!r}."
    )


def _resources(r: _Reader) -> Resources:
    data = r.mapping("resources")
    if data is None:
        return Resources()
    sub = _Reader(data, "spec.resources", {"nodes", "gpusPerNode", "cpu", "memory"})
    return Resources(
        nodes=sub.integer("nodes", 1, minimum=1) or 1,
        gpus_per_node=sub.integer("gpusPerNode", 1, minimum=0) or 0,
        cpu=sub.quantity("cpu"),
        memory=sub.quantity("memory"),
    )


def _secret(r: _Reader) -> SecretKey | None:
    data = r.get("hfTokenSecret")
    if data is None:
        return None
    sub = _Reader(data, "spec.hfTokenSecret", {"name", "key"})
    name = sub.string("name", required=True)
    assert name is not None
    return SecretKey(name=name, key=sub.string("key") or "token")


def _cache(r: _Reader) -> Cache:
    data = r.mapping("cache")
    if data is None:
        return Cache()
    sub = _Reader(data, "spec.cache", {"pvc", "offline", "datasetsDir", "localDatasetsDir"})
    return Cache(
        pvc=sub.string("pvc"),
        offline=bool(sub.boolean("offline", False)),
        datasets_dir=_relative_path(sub, "datasetsDir"),
        local_datasets_dir=_relative_path(sub, "localDatasetsDir"),
    )


def _output(r: _Reader) -> Output:
    data = r.mapping("output")
    if data is None:
        return Output()
    sub = _Reader(data, "spec.output", {"pvc", "path"})
    return Output(pvc=sub.string("pvc"), path=_relative_path(sub, "path"))


def _relative_path(r: _Reader, key: str) -> str | None:
    value = r.string(key)
    if value is not None and (value.startswith("/") or ".." in value.split("/")):
        raise UserError(f"{r.where(key)} must be a relative path inside the volume without '..', not {value!r}.")
    return value


def _pod_template(r: _Reader) -> PodTemplate:
    data = r.mapping("podTemplate")
    if data is None:
        return PodTemplate()
    sub = _Reader(
        data, "spec.podTemplate",
        {"nodeSelector", "tolerations", "affinity", "priorityClassName", "labels", "annotations"},
    )  # fmt: skip
    tolerations = sub.get("tolerations") or []
    if not isinstance(tolerations, Sequence) or not all(isinstance(t, Mapping) for t in tolerations):
        raise UserError("spec.podTemplate.tolerations must be a list of Kubernetes tolerations.")
    return PodTemplate(
        node_selector=sub.string_map("nodeSelector"),
        tolerations=tuple(dict(t) for t in tolerations),
        affinity=_optional_dict(sub.mapping("affinity")),
        priority_class_name=sub.string("priorityClassName"),
        labels=sub.string_map("labels"),
        annotations=sub.string_map("annotations"),
    )


# --- writing back --------------------------------------------------------------------


def _spec_to_dict(e: Evaluation) -> dict[str, JSON]:
    seed = e.seed
    if seed.random == seed.numpy == seed.torch == seed.fewshot and seed.random is not None:
        seed_value: JSON = seed.random
    else:
        seed_value = ",".join("None" if s is None else str(s) for s in (seed.random, seed.numpy, seed.torch, seed.fewshot))
    out: dict[str, JSON] = {
        "model": e.model,
        "modelArgs": dict(e.model_args),
        "tasks": list(e.tasks),
        "numFewshot": e.num_fewshot,
        "limit": e.limit,
        "samples": {t: list(ids) for t, ids in e.samples.items()} if e.samples is not None else None,
        "batchSize": e.batch_size,
        "maxBatchSize": e.max_batch_size,
        "genKwargs": dict(e.gen_kwargs) if e.gen_kwargs is not None else None,
        "seed": seed_value,
        "applyChatTemplate": e.apply_chat_template,
        "chatTemplate": e.chat_template,
        "fewshotAsMultiturn": e.fewshot_as_multiturn,
        "systemInstruction": e.system_instruction,
        "logSamples": e.log_samples,
        "predictOnly": e.predict_only,
        "metadata": dict(e.metadata) if e.metadata is not None else None,
        "trustRemoteCode": e.trust_remote_code,
        "allowUnsafeCode": e.allow_unsafe_code,
        "resources": _drop_none({
            "nodes": e.resources.nodes, "gpusPerNode": e.resources.gpus_per_node,
            "cpu": e.resources.cpu, "memory": e.resources.memory,
        }),  # fmt: skip
        "image": e.image,
        "hfTokenSecret": {"name": e.hf_token_secret.name, "key": e.hf_token_secret.key} if e.hf_token_secret else None,
        "cache": _drop_none({"pvc": e.cache.pvc, "offline": e.cache.offline, "datasetsDir": e.cache.datasets_dir,
                                   "localDatasetsDir": e.cache.local_datasets_dir}),
        "output": _drop_none({"pvc": e.output.pvc, "path": e.output.path}),
        "podTemplate": _drop_empty({
            "nodeSelector": dict(e.pod_template.node_selector),
            "tolerations": [dict(t) for t in e.pod_template.tolerations],
            "affinity": e.pod_template.affinity,
            "priorityClassName": e.pod_template.priority_class_name,
            "labels": dict(e.pod_template.labels),
            "annotations": dict(e.pod_template.annotations),
        }),  # fmt: skip
        "backoffLimit": e.backoff_limit,
        "activeDeadlineSeconds": e.active_deadline_seconds,
        "suspend": e.suspend,
    }
    return _drop_none(out)


def _drop_none(data: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in data.items() if v is not None}


def _drop_empty(data: dict[str, JSON]) -> dict[str, JSON]:
    return {k: v for k, v in data.items() if v not in (None, {}, [])}


def _optional_dict(value: Mapping[str, JSON] | None) -> dict[str, JSON] | None:
    return None if value is None else dict(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _kind(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, Sequence):
        return "a list"
    return type(value).__name__


def _suggestion(name: str, known: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""
