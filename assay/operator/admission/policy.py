"""The cluster admin's policy: what any Evaluation in the cluster may ask for.

An Evaluation is written by a user of one namespace; the operator acts with the
operator's rights and runs what the spec names. So what a spec may grant itself — remote
model code, model-generated code, network access, an arbitrary image, many GPUs — is the
admin's decision, set once in the chart's `policy` values and handed to the operator as
the JSON of `ASSAY_POLICY`. The defaults are the safe side: no remote code, no unsafe
task code, runners offline, any image, no GPU or node cap.

Two rules hold whatever the policy: task names are names (a path would make the operator
and the runner walk their own filesystems: `tasks: ["/"]`), and a secret never sits in the
spec, neither in `modelArgs` nor in an endpoint URL's userinfo, where it would be copied into
the Job's env, status, metrics, the logs and the results JSON; tokens come from a Secret
(`spec.hfTokenSecret`, `spec.endpoint.apiKeySecret`) that consents (`secret_consent`).

`check` raises UserError with one sentence naming the field and the fix; `enforce` makes
the spec obey what is enforced rather than refused (offline runners). Priority,
tolerations, the Kueue queue and the runner pod's defaults are `placement_policy`'s.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from assay import endpoint_urls
from assay.booleans import optional_bool
from assay.errors import UserError
from assay.operator.admission import placement_policy
from assay.spec import API_MODELS, Evaluation

POLICY_ENV = placement_policy.POLICY_ENV
_FIX = "ask the cluster admin to change the operator's Helm value"
_SECRET_KEYS = frozenset(
    {
        "token",
        "hf_token",
        "api_key",
        "apikey",
        "access_token",
        "auth_token",
        "use_auth_token",
        "password",
        "secret",
        "openai_api_key",
    }
)
_NOT_SECRETS = frozenset({"", "true", "false", "1", "0", "yes", "no"})
_SECRET_SUFFIXES = ("_api_key", "_secret", "_password")
# A Hugging Face user access token, wherever it is put.
HF_TOKEN_RE = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")
_FIELDS = {
    "allowedImagePrefixes",
    "allowTrustRemoteCode",
    "allowUnsafeCode",
    "allowTaskCode",
    "allowOnline",
    "maxGpusPerEvaluation",
    "maxNodesPerEvaluation",
    "allowedEndpointPrefixes",
    "secretConsentLabel",
    *placement_policy.FIELDS,
}
DEFAULT_SECRET_CONSENT_LABEL = "assay.dev/evaluations=allowed"
# Kubernetes' label grammar: an optional DNS-subdomain prefix and `/`, a name; a value (maybe empty).
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_RE = re.compile(rf"^(?:[a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}=(?:{_LABEL_NAME})?$")


@dataclasses.dataclass(frozen=True)
class AdminPolicy:
    allowed_image_prefixes: tuple[str, ...] = ()
    """spec.image must start with one of these (at a `/`, `:` or `@` boundary); empty: any image."""
    allow_trust_remote_code: bool = False
    """Whether spec.trustRemoteCode (running a model repository's Python code) may be used."""
    allow_unsafe_code: bool = False
    """Whether spec.allowUnsafeCode (tasks that execute model-generated code) may be used."""
    allow_task_code: bool = False
    """Whether a tenant's task sources may run Python (`!function` tags, `.py` keys in ConfigMaps)."""
    allow_online: bool = False
    """False: every runner gets HF_HUB_OFFLINE/HF_DATASETS_OFFLINE, as if spec.cache.offline."""
    max_gpus: int = 0
    """Most GPUs one Evaluation may ask for (nodes × gpusPerNode); 0: no cap."""
    max_nodes: int = 0
    """Most nodes (pods) one Evaluation may ask for; 0: no cap."""
    allowed_endpoint_prefixes: tuple[str, ...] = ()
    """Model server URLs an Evaluation names must be under one of these (`endpoint_urls.within`); empty: any."""
    secret_consent_label: str = DEFAULT_SECRET_CONSENT_LABEL
    """`key=value` a Secret must carry before an Evaluation may use it (`secret_consent`)."""
    placement: placement_policy.Placement = placement_policy.Placement()
    """Priority, tolerations, Kueue queue and the runner pod's defaults (`placement_policy`)."""

    @classmethod
    def from_json(cls, raw: str) -> AdminPolicy:
        """The chart's `policy` values as JSON; raises UserError naming the bad key."""
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise UserError(f"{POLICY_ENV} is not JSON: set it from the chart's `policy` values.") from None
        if not isinstance(data, dict):
            raise UserError(f"{POLICY_ENV} must be a JSON object of the chart's `policy` values.")
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise UserError(f"{POLICY_ENV} has unknown keys {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}.")
        prefixes = data.get("allowedImagePrefixes") or []
        if not isinstance(prefixes, list) or not all(isinstance(p, str) and p for p in prefixes):
            raise UserError(f"{POLICY_ENV}.allowedImagePrefixes must be a list of image prefixes.")
        return cls(
            allowed_image_prefixes=tuple(prefixes),
            allow_trust_remote_code=_flag(data, "allowTrustRemoteCode"),
            allow_unsafe_code=_flag(data, "allowUnsafeCode"),
            allow_task_code=_flag(data, "allowTaskCode"),
            allow_online=_flag(data, "allowOnline"),
            max_gpus=_count(data, "maxGpusPerEvaluation"),
            max_nodes=_count(data, "maxNodesPerEvaluation"),
            allowed_endpoint_prefixes=_endpoint_prefixes(data),
            secret_consent_label=_consent_label(data),
            placement=placement_policy.Placement.from_data(data),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdminPolicy:
        """The policy `env` (the operator's environment, read once by `assay.operator.settings`) names."""
        return cls.from_json(env.get(POLICY_ENV, ""))

    def allows_image(self, image: str) -> bool:
        return not self.allowed_image_prefixes or any(_has_prefix(image, p) for p in self.allowed_image_prefixes)


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"{POLICY_ENV}.{key} must be true or false, not {value!r}.")
    return value


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"{POLICY_ENV}.{key} must be a whole number of at least 0 (0: no cap), not {value!r}.")
    return value


def _endpoint_prefixes(data: Mapping[str, Any]) -> tuple[str, ...]:
    prefixes = data.get("allowedEndpointPrefixes") or []
    good = isinstance(prefixes, list) and all(
        isinstance(p, str)
        and p.startswith(("http://", "https://"))
        and endpoint_urls.origin(p)[1]
        and not endpoint_urls.has_userinfo(p)
        for p in prefixes
    )
    if not good:
        raise UserError(
            f"{POLICY_ENV}.allowedEndpointPrefixes must be a list of http(s) URL prefixes with a host "
            "and no user name, e.g. [http://vllm.models.svc:8000/v1]."
        )
    return tuple(prefixes)


def _consent_label(data: Mapping[str, Any]) -> str:
    label = data.get("secretConsentLabel", DEFAULT_SECRET_CONSENT_LABEL)
    if not isinstance(label, str) or not _LABEL_RE.match(label):
        raise UserError(
            f"{POLICY_ENV}.secretConsentLabel must be one Kubernetes label as key=value "
            f"(default {DEFAULT_SECRET_CONSENT_LABEL}), not {label!r}."
        )
    return label


def _has_prefix(image: str, prefix: str) -> bool:
    """`registry.example.com/team` allows `registry.example.com/team/runner:1`, not `.../team-evil/x`."""
    if prefix.endswith(("/", ":", "@")):
        return image.startswith(prefix)
    return image == prefix or image.startswith((prefix + "/", prefix + ":", prefix + "@"))


def check(spec: Evaluation, policy: AdminPolicy) -> None:
    """Raise UserError when the spec asks for what the policy refuses, or breaks a fixed rule."""
    _check_tasks(spec)
    _check_secrets(spec)
    _check_endpoint(spec, policy)
    if spec.image and not policy.allows_image(spec.image):
        raise UserError(
            f"spec.image {spec.image!r} is not from an allowed registry ({', '.join(policy.allowed_image_prefixes)}): "
            f"use an image from one of them, or {_FIX} policy.allowedImagePrefixes."
        )
    remote = _truthy(spec.model_args, "trust_remote_code") or spec.trust_remote_code
    if remote and not policy.allow_trust_remote_code:
        raise UserError(
            "spec.trustRemoteCode is not allowed in this cluster (it runs the model repository's code): "
            f"remove it and trust_remote_code from spec.modelArgs, or {_FIX} policy.allowTrustRemoteCode."
        )
    if spec.allow_unsafe_code and not policy.allow_unsafe_code:
        raise UserError(
            "spec.allowUnsafeCode is not allowed in this cluster (it runs model-generated code): "
            f"remove it and the tasks that need it, or {_FIX} policy.allowUnsafeCode."
        )
    nodes, gpus = spec.resources.nodes, spec.resources.nodes * spec.resources.gpus_per_node
    if policy.max_nodes and nodes > policy.max_nodes:
        raise UserError(
            f"spec.resources.nodes {nodes} is above this cluster's limit of {policy.max_nodes} per Evaluation: "
            f"ask for at most {policy.max_nodes}, or {_FIX} policy.maxNodesPerEvaluation."
        )
    if policy.max_gpus and gpus > policy.max_gpus:
        raise UserError(
            f"spec.resources asks for {gpus} GPUs (nodes × gpusPerNode), above this cluster's limit of "
            f"{policy.max_gpus} per Evaluation: ask for fewer, or {_FIX} policy.maxGpusPerEvaluation."
        )
    placement_policy.check(spec, policy.placement)


def enforce(spec: Evaluation, policy: AdminPolicy) -> Evaluation:
    """The spec the runner gets: offline unless the policy lets runners go online; in the default Kueue queue."""
    spec = placement_policy.enforce(spec, policy.placement)
    if policy.allow_online or spec.cache.offline:
        return spec
    return dataclasses.replace(spec, cache=dataclasses.replace(spec.cache, offline=True))


def _check_tasks(spec: Evaluation) -> None:
    for i, name in enumerate(spec.tasks):
        if _is_path(name):
            raise UserError(
                f"spec.tasks[{i}] {name!r} is a path: tasks are named from the task library "
                "(`assay ls tasks`), never read from the operator's or the runner's filesystem."
            )


def _is_path(name: str) -> bool:
    parts = [p.strip() for p in name.split(",")]  # the engine splits comma lists too
    return any(p.startswith((".", "~")) or "/" in p or "\\" in p or p.endswith((".yaml", ".yml")) for p in parts)


def secret_keys(model_args: Mapping[str, Any]) -> list[str]:
    """The keys of `model_args` whose values look like literal secrets."""
    found: list[str] = []
    for key, value in model_args.items():
        if not isinstance(value, str) or value.strip().lower() in _NOT_SECRETS:
            continue  # `add_bos_token: true` and the like are flags, not secrets
        lowered = str(key).lower()
        if lowered in _SECRET_KEYS or lowered.endswith(_SECRET_SUFFIXES) or HF_TOKEN_RE.search(value):
            found.append(str(key))
    return found


def _check_secrets(spec: Evaluation) -> None:
    keys = secret_keys(spec.model_args)
    if keys:
        # The value itself is never repeated: this sentence goes to status, Events and logs.
        raise UserError(
            f"spec.modelArgs.{keys[0]} holds a literal secret: remove it, put the token in a Secret "
            "and name that in spec.hfTokenSecret (the runner gets it as HF_TOKEN)."
        )


def _check_endpoint(spec: Evaluation, policy: AdminPolicy) -> None:
    """The model server URLs the spec names: no credentials in them, under the admin's prefixes."""
    urls = [("spec.endpoint.url", spec.endpoint.url)] if spec.endpoint is not None else []
    if "base_url" in spec.model_args:
        urls.append(("spec.modelArgs.base_url", str(spec.model_args["base_url"])))
    allowed = policy.allowed_endpoint_prefixes
    for field, url in urls:
        if endpoint_urls.has_userinfo(url):
            # Redacted: this sentence goes to status, Events and logs.
            raise UserError(
                f"{field} {endpoint_urls.redacted(url)!r} has a user name or password in it: remove them, and put an "
                "API key in a Secret named by spec.endpoint.apiKeySecret."
            )
        if allowed and not any(endpoint_urls.within(url, prefix) for prefix in allowed):
            raise UserError(
                f"{field} {url!r} is not under an endpoint this cluster allows ({', '.join(allowed)}): use a URL "
                f"under one of them, or {_FIX} policy.allowedEndpointPrefixes."
            )
    if allowed and not urls and spec.model in API_MODELS:
        raise UserError(
            f"spec.model {spec.model} without spec.endpoint.url goes to its default server, and this cluster allows "
            f"only endpoints under {', '.join(allowed)}: set spec.endpoint.url, or {_FIX} policy.allowedEndpointPrefixes."
        )


def _truthy(model_args: Mapping[str, Any], key: str) -> bool:
    """A boolean modelArg as every backend reads it: `no` is false, `on` a refusal (never bool(str))."""
    return bool(optional_bool(model_args.get(key), name=f"spec.modelArgs.{key}"))
