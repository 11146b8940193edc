"""The admin's policy on where a runner pod may run and what it takes by default.

Split from `policy` (what a spec may ask for at all): the fields that bound the runner
pod's placement and its share of a node. The pod template's priorityClassName and
tolerations would otherwise be copied into the Job as the tenant wrote them: any
PriorityClass (preempting other teams' pods), any taint tolerated (control-plane nodes,
GPU nodes reserved for someone else). Those are refused unless the admin listed them. So
are pod annotation and label keys outside the admin's lists (AppArmor, seccomp and Multus
annotations are refused by default: `unconfined` lifts the pod's confinement, a Multus
network attaches it where its namespace is not), and PersistentVolumeClaims outside the
admin's claim names (a claim is mounted with the operator's rights, not the tenant's). A
spec that leaves cpu, memory, emptyDir sizes or a deadline unset gets the admin's
defaults, so that no runner pod is BestEffort, fills a node's disk, or runs for ever.

Defaults, in code as in the chart's values (deploy/helm/assay/values.yaml), so an operator
started without ASSAY_POLICY behaves as the chart's: no PriorityClass; one toleration,
`nvidia.com/gpu:NoSchedule` (Exists), the taint GPU node pools commonly carry; no queue
required; requests of 250m CPU and 512Mi memory; emptyDirs of at most 10Gi; a day's
deadline; a rank may stop 3 times for a peer's failure beyond the Job's own failures; any
annotation but the AppArmor, seccomp and Multus keys, any label, any claim of the namespace.

nodeSelector and affinity stay the tenant's: they only narrow where a pod may go, and a
tainted node (control plane, reserved pool) is reached only with a toleration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay.errors import UserError
from assay.spec import QUANTITY_RE, Evaluation

Manifest = dict[str, Any]

POLICY_ENV = "ASSAY_POLICY"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FIELDS = frozenset(
    {
        "allowedPriorityClasses",
        "allowedTolerations",
        "requireQueue",
        "defaultQueue",
        "runnerResources",
        "emptyDirSizeLimit",
        "defaultActiveDeadlineSeconds",
        "maxPeerFailureRetries",
        "allowedPodAnnotations",
        "refusedPodAnnotations",
        "allowedPodLabels",
        "allowedClaimNames",
    }
)
SECURITY_ANNOTATIONS = (
    "container.apparmor.security.beta.kubernetes.io/*",
    "seccomp.security.alpha.kubernetes.io/*",
    "container.seccomp.security.alpha.kubernetes.io/*",
    "k8s.v1.cni.cncf.io/*",
    "v1.multus-cni.io/*",
)
"""Annotation keys refused by default: AppArmor and seccomp profiles (`unconfined` lifts the
runtime's confinement) and Multus networks (a pod on a network its namespace is not on)."""
OPERATOR_PREFIX = "assay.dev/"
"""Pod annotation keys the operator writes itself; no policy lets a spec set one."""
_FIX = "ask the cluster admin to change the operator's Helm value"
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_RESOURCES = ("cpu", "memory")
Patterns = tuple[str, ...]
"""Names or keys, each exact or ending in `*` (any rest): `example.com/*`, `*`."""
Quantities = tuple[tuple[str, str], ...]
"""(resource, quantity) pairs: a tuple, so that the policy stays hashable."""


@dataclasses.dataclass(frozen=True)
class Toleration:
    """A toleration as Kubernetes reads it (operator Equal by default; an empty key or effect matches any)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Toleration:
        # tolerationSeconds is left out: it only shortens how long a NoExecute taint is tolerated.
        return cls(
            key=str(data.get("key") or ""),
            operator=str(data.get("operator") or "Equal"),
            value=str(data.get("value") or ""),
            effect=str(data.get("effect") or ""),
        )

    def covers(self, other: Toleration) -> bool:
        """Whether every taint `other` tolerates, this one tolerates too (so `other` grants no more)."""
        if self.key and other.key != self.key:
            return False  # an empty `other.key` (with Exists) tolerates every key
        if self.effect and other.effect != self.effect:
            return False  # an empty `other.effect` tolerates NoExecute too
        return self.operator == "Exists" or (other.operator == "Equal" and other.value == self.value)

    def describe(self) -> str:
        """The taints it tolerates, `key=value:Effect` as `kubectl taint` writes one."""
        if not self.key:
            return f"every {self.effect} taint" if self.effect else "every taint"
        taint = self.key if self.operator == "Exists" else f"{self.key}={self.value}"
        return f"{taint}:{self.effect}" if self.effect else f"{taint} with any effect"


GPU_TOLERATION = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


@dataclasses.dataclass(frozen=True)
class Placement:
    allowed_priority_classes: tuple[str, ...] = ()
    """PriorityClasses spec.podTemplate.priorityClassName may name; empty: none (the cluster's default priority)."""
    allowed_tolerations: tuple[Toleration, ...] = (GPU_TOLERATION,)
    """Each spec toleration must tolerate no taint that one of these does not; empty: no toleration."""
    require_queue: bool = False
    """Whether every run must go through Kueue (the `kueue.x-k8s.io/queue-name` pod label)."""
    default_queue: str = ""
    """The Kueue LocalQueue a spec without a queue label is put in; empty: none."""
    runner_requests: Quantities = (("cpu", "250m"), ("memory", "512Mi"))
    """cpu/memory requests of runner containers whose spec.resources leave them unset."""
    runner_limits: Quantities = ()
    """cpu/memory limits of runner containers whose spec.resources leave them unset."""
    empty_dir_size_limit: str = "10Gi"
    """sizeLimit of every emptyDir of a runner pod (scratch, /dev/shm, cache or output without a PVC); empty: none."""
    default_active_deadline_seconds: int = 86400
    """The Job's activeDeadlineSeconds when spec.activeDeadlineSeconds is unset; 0: none."""
    max_peer_failure_retries: int = 3
    """How often one rank may stop for a peer's failure (exit 75) beyond the Job's counted failures; 0: no bound."""
    allowed_pod_annotations: Patterns = ("*",)
    """Keys spec.podTemplate.annotations may carry (`*` ends a pattern); empty: none."""
    refused_pod_annotations: Patterns = SECURITY_ANNOTATIONS
    """Keys refused even where an allowed pattern matches them."""
    allowed_pod_labels: Patterns = ("*",)
    """Keys spec.podTemplate.labels may carry; empty: none."""
    allowed_claim_names: Patterns = ("*",)
    """PersistentVolumeClaims spec.cache.pvc and spec.output.pvc may name; empty: none (emptyDirs only)."""

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Placement:
        """This module's keys of the chart's `policy` values (others are `policy`'s to check)."""
        defaults = cls()
        classes = data.get("allowedPriorityClasses") or []
        if not isinstance(classes, list) or not all(isinstance(c, str) and c for c in classes):
            raise UserError(f"{POLICY_ENV}.allowedPriorityClasses must be a list of PriorityClass names.")
        queue = data.get("defaultQueue") or ""
        if not isinstance(queue, str):
            raise UserError(f"{POLICY_ENV}.defaultQueue must be a LocalQueue name, or empty for none.")
        tolerations = data.get("allowedTolerations")
        resources = data.get("runnerResources")
        return cls(
            allowed_priority_classes=tuple(classes),
            allowed_tolerations=defaults.allowed_tolerations if tolerations is None else _tolerations(tolerations),
            require_queue=_flag(data, "requireQueue"),
            default_queue=queue,
            runner_requests=defaults.runner_requests if resources is None else _quantities(resources, "requests"),
            runner_limits=defaults.runner_limits if resources is None else _quantities(resources, "limits"),
            empty_dir_size_limit=_size(data.get("emptyDirSizeLimit", defaults.empty_dir_size_limit)),
            default_active_deadline_seconds=_count(
                data, "defaultActiveDeadlineSeconds", defaults.default_active_deadline_seconds
            ),
            max_peer_failure_retries=_count(data, "maxPeerFailureRetries", defaults.max_peer_failure_retries),
            allowed_pod_annotations=_patterns(data, "allowedPodAnnotations", defaults.allowed_pod_annotations),
            refused_pod_annotations=_patterns(data, "refusedPodAnnotations", defaults.refused_pod_annotations),
            allowed_pod_labels=_patterns(data, "allowedPodLabels", defaults.allowed_pod_labels),
            allowed_claim_names=_patterns(data, "allowedClaimNames", defaults.allowed_claim_names),
        )


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"{POLICY_ENV}.{key} must be true or false, not {value!r}.")
    return value


def _count(data: Mapping[str, Any], key: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UserError(f"{POLICY_ENV}.{key} must be a whole number of at least 0 (0: none), not {value!r}.")
    return value


def _patterns(data: Mapping[str, Any], key: str, default: Patterns) -> Patterns:
    value = data.get(key)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(p, str) and p and "*" not in p[:-1] for p in value):
        raise UserError(f"{POLICY_ENV}.{key} must be a list of names, each exact or ending in * (example.com/*).")
    return tuple(value)


def matches(name: str, patterns: Patterns) -> bool:
    """Whether `name` is one of `patterns`, or starts with one ending in `*`."""
    return any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)


def _quantity(value: Any, where: str) -> str:
    # YAML gives `cpu: 1` as a number; Kubernetes reads it as the quantity "1".
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not QUANTITY_RE.match(text):
        raise UserError(f"{POLICY_ENV}.{where} must be a Kubernetes quantity such as 500m or 2Gi, not {value!r}.")
    return text


def _size(value: Any) -> str:
    return "" if value in ("", None) else _quantity(value, "emptyDirSizeLimit")


def _quantities(resources: Any, kind: str) -> Quantities:
    if not isinstance(resources, dict) or not set(resources) <= {"requests", "limits"}:
        raise UserError(f"{POLICY_ENV}.runnerResources must be a mapping of requests and limits.")
    values = resources.get(kind) or {}
    if not isinstance(values, dict) or not set(values) <= set(_RESOURCES):
        raise UserError(f"{POLICY_ENV}.runnerResources.{kind} must map cpu and memory to quantities.")
    return tuple(
        (name, _quantity(values[name], f"runnerResources.{kind}.{name}")) for name in _RESOURCES if name in values
    )


def _tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not isinstance(raw, list):
        raise UserError(
            f"{POLICY_ENV}.allowedTolerations must be a list of tolerations {{key, operator, value, effect}}."
        )
    found = []
    for i, item in enumerate(raw):
        where = f"{POLICY_ENV}.allowedTolerations[{i}]"
        if not isinstance(item, dict) or not set(item) <= {"key", "operator", "value", "effect"}:
            raise UserError(f"{where} must be a toleration with only key, operator, value and effect.")
        toleration = Toleration.from_dict(item)
        if toleration.operator not in _OPERATORS or toleration.effect not in _EFFECTS:
            raise UserError(
                f"{where} needs operator Equal or Exists and effect NoSchedule, PreferNoSchedule, NoExecute or none."
            )
        if not toleration.key and toleration.operator != "Exists":
            raise UserError(f"{where} without a key must have operator Exists (it then tolerates every taint).")
        found.append(toleration)
    return tuple(found)


def check(spec: Evaluation, placement: Placement) -> None:
    """Raise UserError when the pod template asks for a priority, a toleration, an annotation or a label,
    or the spec for a claim, that the admin did not allow."""
    template = spec.pod_template
    name = template.priority_class_name
    if name and name not in placement.allowed_priority_classes:
        allowed = ", ".join(placement.allowed_priority_classes) or "none"
        raise UserError(
            f"spec.podTemplate.priorityClassName {name!r} is not allowed in this cluster (allowed: {allowed}): "
            f"remove it or name an allowed one, or {_FIX} policy.allowedPriorityClasses."
        )
    for i, raw in enumerate(template.tolerations):
        toleration = Toleration.from_dict(raw)
        if not any(allowed.covers(toleration) for allowed in placement.allowed_tolerations):
            allowed = ", ".join(t.describe() for t in placement.allowed_tolerations) or "none"
            raise UserError(
                f"spec.podTemplate.tolerations[{i}] ({toleration.describe()}) is not allowed in this cluster "
                f"(allowed: {allowed}): remove it, or {_FIX} policy.allowedTolerations."
            )
    _check_pod_keys(spec, placement)
    _check_claims(spec, placement)
    if placement.require_queue and not placement.default_queue and not template.labels.get(QUEUE_LABEL):
        raise UserError(
            f"spec.podTemplate.labels has no {QUEUE_LABEL}, and this cluster runs Evaluations through Kueue only: "
            f"set it to a LocalQueue of the namespace, or {_FIX} policy.defaultQueue."
        )


def _check_pod_keys(spec: Evaluation, placement: Placement) -> None:
    """Annotations and labels go onto the runner pod as written: some change its confinement
    (AppArmor, seccomp), its networks (Multus), or which Services and policies select it."""
    template = spec.pod_template
    for key in sorted(template.annotations):
        if key.startswith(OPERATOR_PREFIX):
            # The operator's own keys (the spec the runner reads, the Evaluation's name) are
            # written over a tenant's anyway; refused so the spec says what the pod gets.
            raise UserError(
                f"spec.podTemplate.annotations key {key!r} is the operator's ({OPERATOR_PREFIX} keys are "
                "reserved): remove it."
            )
        if matches(key, placement.refused_pod_annotations):
            raise UserError(
                f"spec.podTemplate.annotations key {key!r} is refused in this cluster (it changes the pod's "
                f"security profile or networks): remove it, or {_FIX} policy.refusedPodAnnotations."
            )
        if not matches(key, placement.allowed_pod_annotations):
            raise UserError(
                f"spec.podTemplate.annotations key {key!r} is not allowed in this cluster (allowed: "
                f"{_listed(placement.allowed_pod_annotations)}): remove it, or {_FIX} policy.allowedPodAnnotations."
            )
    for key in sorted(template.labels):
        if not matches(key, placement.allowed_pod_labels):
            raise UserError(
                f"spec.podTemplate.labels key {key!r} is not allowed in this cluster (allowed: "
                f"{_listed(placement.allowed_pod_labels)}): remove it, or {_FIX} policy.allowedPodLabels."
            )


def _check_claims(spec: Evaluation, placement: Placement) -> None:
    """A claim is mounted with the operator's rights: only those the admin lists (the namespace's
    other claims hold data that whoever may create Evaluations may not be able to read or write)."""
    for field, claim in (("spec.cache.pvc", spec.cache.pvc), ("spec.output.pvc", spec.output.pvc)):
        if claim and not matches(claim, placement.allowed_claim_names):
            raise UserError(
                f"{field} {claim!r} is not a claim Evaluations may use in this cluster (allowed: "
                f"{_listed(placement.allowed_claim_names)}): name an allowed one, or {_FIX} policy.allowedClaimNames."
            )


def _listed(patterns: Patterns) -> str:
    return ", ".join(patterns) or "none"


def enforce(spec: Evaluation, placement: Placement) -> Evaluation:
    """The spec in the admin's default Kueue queue when it names none.

    In the spec rather than only on the Job: a queued Job is Kueue's to suspend and resume
    (`builders.queued`), and the operator must know it is one."""
    template = spec.pod_template
    if not placement.default_queue or template.labels.get(QUEUE_LABEL):
        return spec
    labels = {**template.labels, QUEUE_LABEL: placement.default_queue}
    return dataclasses.replace(spec, pod_template=dataclasses.replace(template, labels=labels))


def fill_runner_pod(job: Manifest, placement: Placement) -> None:
    """Put the admin's defaults into a runner Job where the spec left them unset.

    cpu and memory of each container (spec.resources sets a request and a limit together,
    so a request it left out is one the spec left unset), the sizeLimit of each emptyDir
    (the kubelet evicts a pod past it, rather than let it fill the node's disk or memory),
    and the Job's activeDeadlineSeconds."""
    job_spec = job["spec"]
    if placement.default_active_deadline_seconds and "activeDeadlineSeconds" not in job_spec:
        job_spec["activeDeadlineSeconds"] = placement.default_active_deadline_seconds
    pod = job_spec["template"]["spec"]
    for container in [*pod.get("initContainers", ()), *pod["containers"]]:
        resources = container.setdefault("resources", {})
        for kind, defaults in (("requests", placement.runner_requests), ("limits", placement.runner_limits)):
            for name, quantity in defaults:
                resources.setdefault(kind, {}).setdefault(name, quantity)
        if not resources:
            del container["resources"]
    if placement.empty_dir_size_limit:
        for volume in pod.get("volumes", ()):
            if "emptyDir" in volume:
                volume["emptyDir"].setdefault("sizeLimit", placement.empty_dir_size_limit)
