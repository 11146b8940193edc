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
from assay.operator.names import label_value

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


API_POOL_SIZE = 32
"""HTTP connections to the API server: as many as handler threads (the client's default, 10 or
cpus × 5, made a burst's handlers wait for a connection)."""


def load_config() -> None:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_POOL_SIZE
    client.Configuration.set_default(configuration)


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
    namespace = manifest["metadata"].get("namespace")
    try:
        resource.create(body=manifest, namespace=namespace)
    except exceptions.ConflictError:
        return False
    except exceptions.ForbiddenError as error:
        # Not RBAC: the namespace is being deleted (its Jobs go first, and an unfinished run
        # would have its Job created again). Nothing is to be made there any more.
        if "NamespaceTerminating" not in str(getattr(error, "body", "")):
            raise
        logger.info("Namespace %s is being deleted: %s %s not created.", namespace, manifest["kind"],
                    manifest["metadata"]["name"])  # fmt: skip
        return False
    return True


def list_children(kind: str, api_version: str, *, namespace: str, evaluation: str,
                  owner_uid: str | None = None) -> list[Manifest]:  # fmt: skip
    """Children of one Evaluation: by label (a long name's label is shortened, so two
    Evaluations could share one), then by the controller ownerReference when `owner_uid` is given."""
    label = label_value(evaluation)
    selector = f"{builders.LABEL_EVALUATION}={label},app.kubernetes.io/managed-by={builders.MANAGED_BY}"
    found = [item.to_dict() for item in _resource(api_version, kind).get(namespace=namespace, label_selector=selector).items]
    if owner_uid is None:
        return found
    return [o for o in found if any(r.get("uid") == owner_uid for r in (o.get("metadata") or {}).get("ownerReferences") or ())]


def get(kind: str, api_version: str, *, namespace: str, name: str) -> Manifest | None:
    from kubernetes.dynamic import exceptions

    try:
        found: Manifest = _resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        return found
    except exceptions.NotFoundError:
        return None


def list_objects(kind: str, api_version: str, *, namespace: str, label_selector: str | None = None,
                 field_selector: str | None = None) -> list[Manifest]:  # fmt: skip
    found = _resource(api_version, kind).get(namespace=namespace, label_selector=label_selector,
                                             field_selector=field_selector)  # fmt: skip
    return [item.to_dict() for item in found.items]


def list_events(*, namespace: str, kind: str, name: str) -> list[Manifest]:
    """core/v1 Events about one object (the Job controller's, the kubelet's, the scheduler's)."""
    return list_objects("Event", "v1", namespace=namespace,
                        field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")  # fmt: skip


def end_job(*, namespace: str, name: str) -> None:
    """Fail a Job now and remove its pods, keeping the Job and its Events to look at.

    activeDeadlineSeconds is one of the few mutable fields of a Job; at 1 the Job controller
    fails it at once (reason DeadlineExceeded) and deletes its running pods.
    """
    _resource("batch/v1", "Job").patch(
        name=name, namespace=namespace, body={"spec": {"activeDeadlineSeconds": 1}}, content_type=MERGE_PATCH
    )


def create_event(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
    """A core/v1 Event about `obj`, posted directly: for code that runs outside a kopf handler."""
    import datetime
    import socket

    meta = obj["metadata"]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},  # fmt: skip
        "type": type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": builders.MANAGED_BY},
        "reportingComponent": builders.MANAGED_BY,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        _resource("v1", "Event").create(body=event, namespace=meta["namespace"])
    except Exception as error:  # noqa: BLE001 - an Event is a courtesy; status already says it
        logger.warning("Could not post Event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], error)


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
        evaluation: Manifest = _resource(spec_module.API_VERSION, spec_module.KIND).get(name=name, namespace=namespace).to_dict()
        return evaluation
    except exceptions.NotFoundError:
        return None


def patch_evaluation_status(*, namespace: str, name: str, status: Mapping[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi().patch_namespaced_custom_object_status(
        spec_module.GROUP, spec_module.VERSION, namespace, spec_module.PLURAL, name, {"status": dict(status)}
    )
