"""The operator's API calls, with plain dicts in and out.

Manifests from `builders` are plain dicts; the dynamic client sends them as they are
(the typed client would first coerce them into its models). Every call is synchronous:
kopf runs sync handlers in its thread pool.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

from assay import spec as spec_module
from assay.operator import builders

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


def load_config() -> None:
    from kubernetes import config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


@functools.lru_cache(maxsize=1)
def dynamic_client() -> Any:
    from kubernetes import client, dynamic

    return dynamic.DynamicClient(client.ApiClient())


def _resource(api_version: str, kind: str) -> Any:
    return dynamic_client().resources.get(api_version=api_version, kind=kind)


def _status(error: Exception) -> int | None:
    return getattr(error, "status", None)


def create(manifest: Manifest) -> bool:
    """Create one object; False if it already existed (409), which is success too."""
    from kubernetes.dynamic import exceptions

    resource = _resource(manifest["apiVersion"], manifest["kind"])
    try:
        resource.create(body=manifest, namespace=manifest["metadata"].get("namespace"))
    except exceptions.ConflictError:
        return False
    return True


def list_children(kind: str, api_version: str, *, namespace: str, evaluation: str) -> list[Manifest]:
    selector = f"{builders.LABEL_EVALUATION}={evaluation},app.kubernetes.io/managed-by={builders.MANAGED_BY}"
    found = _resource(api_version, kind).get(namespace=namespace, label_selector=selector)
    return [item.to_dict() for item in found.items]


def delete(kind: str, api_version: str, *, namespace: str, name: str) -> None:
    from kubernetes.dynamic import exceptions

    try:
        # Background: the Job goes now, its pods right after (no orphans left running).
        _resource(api_version, kind).delete(name=name, namespace=namespace, body={"propagationPolicy": "Background"})
    except exceptions.NotFoundError:
        pass


def patch_job_suspend(*, namespace: str, name: str, suspend: bool) -> None:
    _resource("batch/v1", "Job").patch(
        name=name, namespace=namespace, body={"spec": {"suspend": suspend}}, content_type=MERGE_PATCH
    )


def get_evaluation(*, namespace: str, name: str) -> Manifest | None:
    from kubernetes.dynamic import exceptions

    try:
        return _resource(spec_module.API_VERSION, spec_module.KIND).get(name=name, namespace=namespace).to_dict()
    except exceptions.NotFoundError:
        return None


def patch_evaluation_status(*, namespace: str, name: str, status: Mapping[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi().patch_namespaced_custom_object_status(
        spec_module.GROUP, spec_module.VERSION, namespace, spec_module.PLURAL, name, {"status": dict(status)}
    )
