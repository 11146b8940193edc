"""The Evaluation spec's record types and the constants of the runner-pod contract.

Field names are the custom resource's, in snake_case; see `assay.spec` for the contract
and `parsing` for the checks each field gets.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from assay import endpoint_urls, run_rules
from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.run_options import DEFAULT_BOOTSTRAP_ITERS, EvalOptions, SentinelSettings, SequentialSettings
from assay.spec.gate import Baseline, Gate, StopAt

GROUP = "assay.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Evaluation"
PLURAL = "evaluations"

CONFIG_ERROR_EXIT_CODE = 78
PEER_FAILED_EXIT_CODE = 75
"""A rank that stopped because another rank reported its own failure (sysexits' EX_TEMPFAIL):
the Job's podFailurePolicy ignores it, so one fault costs one retry, not one per rank."""
RESULTS_NOT_RECORDED_EXIT_CODE = 74
"""The evaluation finished but its scores never reached the Evaluation's status (sysexits'
EX_IOERR): the Job's podFailurePolicy fails the Job at once, since a rerun would redo the
whole evaluation to meet the same refusal; the operator shows it as ResultsNotRecorded."""

ENV_SPEC_FILE = "ASSAY_EVALUATION_FILE"
"""A JSON file holding the spec: in a runner pod, its pod's spec annotation as a downward API file.
Never the spec itself in the environment: Linux refuses one variable over 128 KiB (a long
`samples` list), and a spec copied into a Job's pod template is copied into every pod too."""
ENV_NAME = "ASSAY_EVALUATION_NAME"
ENV_NAMESPACE = "ASSAY_EVALUATION_NAMESPACE"
ENV_GENERATION = "ASSAY_EVALUATION_GENERATION"
ENV_OUTPUT_DIR = "ASSAY_OUTPUT_DIR"
ENV_OUTPUT_ROOT = "ASSAY_OUTPUT_ROOT"
"""The output volume's mount: spec.baseline.path and a baseline's status.outputDir are read under it."""
ENV_POD_NAME = "ASSAY_POD_NAME"
ENV_JOB_NAME = "ASSAY_JOB_NAME"
ENV_STATUS_FILE = "ASSAY_STATUS_FILE"
ENV_USE_CACHE = "ASSAY_USE_CACHE"
ENV_TASK_CODE = "ASSAY_TASK_CODE"
ENV_BASELINE_EVALUATION = "ASSAY_BASELINE_EVALUATION"
"""JSON of what the baseline Evaluation the spec names showed when the run was decided (its
name, phase, output volume and results folder; empty: it did not exist). The runner may read
no Evaluation, so the operator reads it."""
ENV_PROGRESS_INTERVAL = "ASSAY_PROGRESS_INTERVAL"
"""Seconds between a runner's progress writes at least: the operator sets it on each Job from
the number of runs in flight (`assay.operator.decide.progress_budget`)."""

FEWSHOT_AS_MULTITURN_REFUSAL = "spec.fewshotAsMultiturn: true needs spec.applyChatTemplate: true (as in lm-eval)."

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


#: the model names that talk to a served model (spec.endpoint)
API_MODELS = ("local-completions", "local-chat-completions", "openai-completions", "openai-chat-completions")
#: where the runner pod mounts spec.endpoint.caBundle's ConfigMap
ENDPOINT_CA_MOUNT = "/etc/assay/endpoint-ca"


@dataclasses.dataclass(frozen=True)
class ConfigMapKey:
    name: str
    """The ConfigMap, in the Evaluation's namespace."""
    key: str = "ca.crt"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A model already served over an OpenAI-compatible API (vLLM, KServe, TGI, ...)."""

    url: str
    """The completions (or chat completions) route, e.g. http://vllm.ml:8000/v1/completions."""
    served_model: str | None = None
    """The name the server knows the model by (the request's `model`)."""
    api_key_secret: SecretKey | None = None
    """Secret whose key is sent as the bearer token (OPENAI_API_KEY in the runner)."""
    ca_bundle: ConfigMapKey | None = None
    """ConfigMap holding the CA bundle that signs the server's certificate."""
    tokenizer: str | None = None
    """HF tokenizer (hub id or path) for token counts; needed for loglikelihood tasks."""

    def model_args(self) -> dict[str, JSON]:
        """What the endpoint adds to model_args (lm-eval's names)."""
        args: dict[str, JSON] = {"base_url": self.url}
        if self.served_model:
            args["model"] = self.served_model
        if self.tokenizer:
            args["tokenizer"] = self.tokenizer
            args["tokenizer_backend"] = "huggingface"
        if self.ca_bundle:
            args["ca_cert_path"] = f"{ENDPOINT_CA_MOUNT}/{self.ca_bundle.key}"
        return args


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
    batch_size: BatchSize = BatchSize(1)
    """Parsed once, by `parsing`; `given` is what `to_dict()` writes back (a digit string as its int)."""
    max_batch_size: int | None = None
    gen_kwargs: Mapping[str, JSON] | None = None
    seed: Seed = Seed()
    bootstrap_iters: int = DEFAULT_BOOTSTRAP_ITERS
    """Resamples for the stderr of metrics without a closed form (lm-eval's --bootstrap_iters); 0: none."""
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
    endpoint: Endpoint | None = None
    """A served model to evaluate (with an API model): the runner then requests no GPU."""
    cache: Cache = Cache()
    output: Output = Output()
    pod_template: PodTemplate = PodTemplate()
    backoff_limit: int = 0
    active_deadline_seconds: int | None = None
    suspend: bool = False
    task_sources: tuple[str, ...] = ()
    """ConfigMaps (spec.taskSources[].configMap) whose keys are task YAMLs, added to the include path."""
    baseline: Baseline | None = None
    """The run this one is compared with after scoring (`assay.spec.gate`)."""
    gate: Gate = Gate()
    """What counts as a regression against the baseline."""
    stop_at: StopAt | None = None
    """A precision at which each task stops (a sequential run, with a baseline or without)."""
    sentinels: SentinelSettings = SentinelSettings()
    """The plausibility checks of the run's scores (the condition ScoresTrusted); strict fails the run."""

    @classmethod
    def from_dict(cls, spec: Mapping[str, JSON]) -> Evaluation:
        from assay.spec.parsing import parse_spec

        return parse_spec(spec)

    def to_dict(self) -> dict[str, JSON]:
        """The spec in the CR's camelCase form; `parse_spec(e.to_dict()) == e`."""
        from assay.spec.serialize import spec_to_dict

        return spec_to_dict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def model_label(self) -> str:
        """What the model is called in metrics and status: the checkpoint when there is one."""
        if self.endpoint is not None:
            # Redacted: a refused spec's label still reaches metrics and status.
            return self.endpoint.served_model or endpoint_urls.redacted(self.endpoint.url)
        for key in ("pretrained", "model", "engine", "path"):
            value = self.model_args.get(key)
            if isinstance(value, str) and value:
                return value
        return self.model

    def run_options(self, *, use_cache: str | None = None) -> EvalOptions:
        """The run's one options record; `use_cache` is the runner pod's (spec.cache.pvc)."""
        model_args = self.run_model_args()
        # parsing refused `true` without a chat template; the runner Job's results always said true or false
        fewshot_as_multiturn = bool(
            run_rules.fewshot_as_multiturn(
                self.fewshot_as_multiturn,
                apply_chat_template=self.chat_template_option,
                refusal=FEWSHOT_AS_MULTITURN_REFUSAL,
                error=UserError,
            )
        )
        return EvalOptions(
            model=self.model,
            model_args=model_args,
            parsed_model_args=model_args,
            tasks=self.tasks,
            num_fewshot=self.num_fewshot,
            batch_size=self.batch_size,
            max_batch_size=self.max_batch_size,
            use_cache=use_cache,
            limit=self.limit,
            samples={task: list(ids) for task, ids in self.samples.items()} if self.samples else None,
            log_samples=run_rules.log_samples(log_samples=self.log_samples, predict_only=self.predict_only),
            score_records=True,
            system_instruction=self.system_instruction,
            apply_chat_template=self.chat_template_option,
            fewshot_as_multiturn=fewshot_as_multiturn,
            gen_kwargs=dict(self.gen_kwargs) if self.gen_kwargs else None,
            predict_only=self.predict_only,
            random_seed=self.seed.random,
            numpy_random_seed=self.seed.numpy,
            torch_random_seed=self.seed.torch,
            fewshot_random_seed=self.seed.fewshot,
            bootstrap_iters=self.bootstrap_iters,
            confirm_run_unsafe_code=self.allow_unsafe_code,
            metadata=dict(self.metadata) if self.metadata else None,
            sentinels=self.sentinels,
            sequential=self.sequential_settings(),
        )

    def sequential_settings(self) -> SequentialSettings | None:
        """A sequential run's settings (`spec.gate.sequential`, `spec.stopAt`); None for an ordinary run.

        The baseline's folder is not among them: the runner finds it on rank 0, where it reads it."""
        sequential = self.baseline is not None and self.gate.sequential
        if not sequential and self.stop_at is None:
            return None
        return SequentialSettings(
            max_drop=self.gate.max_drop,
            max_drop_for=dict(self.gate.max_drop_for),
            alpha=self.gate.alpha,
            target_half_width=self.stop_at.ci_half_width if self.stop_at is not None else None,
            seed=self.seed.random if self.seed.random is not None else 0,
        )

    def run_model_args(self) -> dict[str, JSON]:
        """model_args as the model backend gets them: the endpoint's and trustRemoteCode's added."""
        model_args = dict(self.model_args)
        if self.endpoint is not None:
            model_args.update(self.endpoint.model_args())
        if self.trust_remote_code:
            # lm-eval's --trust_remote_code also sets it in model_args.
            model_args["trust_remote_code"] = True
        return model_args

    @property
    def chat_template_option(self) -> bool | str:
        """lm-eval's --apply_chat_template value: False, True, or the named template."""
        if not self.apply_chat_template:
            return False
        return self.chat_template or True
