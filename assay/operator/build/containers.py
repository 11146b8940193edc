"""The runner pod's containers, volumes and placement, as the Job's pod template holds them.

Split from `builders` (which assembles the Job around them): what a runner container
mounts and may do, which volumes back those mounts, and where the pod may be scheduled.
"""

from __future__ import annotations

from typing import Any

from assay.operator.admission import task_sources
from assay.operator.build.runner_settings import QUANTITY, quantity_bytes
from assay.spec import ENDPOINT_CA_MOUNT, Evaluation, PodTemplate

Manifest = dict[str, Any]

CACHE_MOUNT = "/cache"
OUTPUT_MOUNT = "/output"
SPEC_VOLUME = "spec"
SPEC_MOUNT = "/etc/assay/spec"
SPEC_KEY = "evaluation.json"
SPEC_FILE = f"{SPEC_MOUNT}/{SPEC_KEY}"
"""Where the runner reads its spec (ASSAY_EVALUATION_FILE): its pod's spec annotation, as a downward API file."""


def resources(spec: Evaluation, *, gpus: str | None) -> Manifest:
    """The container's requests and limits: its GPUs requested as the resource `gpus` names
    (`RunnerSettings.gpu_resource`); None: none (torchrun's --check container)."""
    limits: dict[str, Any] = {}
    if spec.resources.cpu:
        limits["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        limits["memory"] = spec.resources.memory
    requests = dict(limits)
    # a served model (spec.endpoint) runs elsewhere: its runner only sends requests
    if gpus is not None and spec.resources.gpus_per_node > 0 and spec.endpoint is None:
        limits[gpus] = str(spec.resources.gpus_per_node)
    out: Manifest = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def limit_memory(pod: Manifest, default: str | None) -> None:
    """A memory limit for each container of a runner pod that has none after the spec and the admin's policy.

    Without one a runner (a model too large, a tenant's template that grows without end)
    takes the node's memory from every other pod on it. A request above the default is
    never left above its limit (the API server refuses that): the limit is the request then.
    Where no memory request is set either, Kubernetes requests the limit. `default` is
    `RunnerSettings.default_memory`: None for no default limit."""
    if default is None:
        return
    for container in [*pod.get("initContainers", ()), *pod["containers"]]:
        resources = container.setdefault("resources", {})
        if "memory" in resources.get("limits", {}):
            continue
        requested = resources.get("requests", {}).get("memory")
        bigger = (
            requested is not None
            and QUANTITY.fullmatch(str(requested))
            and quantity_bytes(str(requested)) > quantity_bytes(default)
        )
        resources.setdefault("limits", {})["memory"] = requested if bigger else default


RUNNER_UID = 1000


def pod_security() -> Manifest:
    """The runner pod's securityContext: the runner image's non-root user, seccomp's default profile."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNNER_UID,
        "runAsGroup": RUNNER_UID,
        "fsGroup": RUNNER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
}


def container(
    name: str,
    command: list[str],
    *,
    image: str,
    env: list[Manifest],
    resources: Manifest,
    spec: Evaluation | None = None,
) -> Manifest:
    container: Manifest = {
        "name": name,
        "image": image,
        "command": command,
        "env": env,
        "securityContext": dict(_CONTAINER_SECURITY),
        "volumeMounts": [
            {"name": "cache", "mountPath": CACHE_MOUNT},
            {"name": "output", "mountPath": OUTPUT_MOUNT},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": SPEC_VOLUME, "mountPath": SPEC_MOUNT, "readOnly": True},
        ],
    }
    if spec is not None and spec.endpoint is not None and spec.endpoint.ca_bundle is not None:
        container["volumeMounts"].append({"name": "endpoint-ca", "mountPath": ENDPOINT_CA_MOUNT, "readOnly": True})
    if spec is not None:
        container["volumeMounts"] += task_sources.mounts(spec)
    if resources:
        container["resources"] = resources
    return container


def spec_volume(annotation: str) -> Manifest:
    """The pod's own annotation `annotation` as the file SPEC_KEY: the kubelet writes it from the
    pod's metadata, so the runner reads its spec with no API request and no permission to read anything."""
    field = {"fieldPath": f"metadata.annotations['{annotation}']"}
    return {"name": SPEC_VOLUME, "downwardAPI": {"items": [{"path": SPEC_KEY, "fieldRef": field}]}}


def volumes(spec: Evaluation, *, spec_annotation: str) -> list[Manifest]:
    def claim_or_scratch(name: str, pvc: str | None) -> Manifest:
        if pvc:
            return {"name": name, "persistentVolumeClaim": {"claimName": pvc}}
        return {"name": name, "emptyDir": {}}

    out = [
        claim_or_scratch("cache", spec.cache.pvc),
        claim_or_scratch("output", spec.output.pvc),
        {"name": "tmp", "emptyDir": {}},
        # NCCL, data loaders and vLLM's engine (160 MiB of queues) share memory through
        # /dev/shm, 64 MiB by default.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        spec_volume(spec_annotation),
        *task_sources.volumes(spec),
    ]
    if spec.endpoint is not None and spec.endpoint.ca_bundle is not None:
        bundle = spec.endpoint.ca_bundle
        out.append(
            {
                "name": "endpoint-ca",
                "configMap": {"name": bundle.name, "items": [{"key": bundle.key, "path": bundle.key}]},
            }
        )
    return out


def placement(template: PodTemplate) -> Manifest:
    """The pod spec fields the Evaluation's podTemplate sets (those it leaves unset stay out)."""
    fields: Manifest = {}
    if template.node_selector:
        fields["nodeSelector"] = dict(template.node_selector)
    if template.tolerations:
        fields["tolerations"] = [dict(t) for t in template.tolerations]
    if template.affinity:
        fields["affinity"] = dict(template.affinity)
    if template.priority_class_name:
        fields["priorityClassName"] = template.priority_class_name
    return fields
