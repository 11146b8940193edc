"""The operator's API calls, with plain dicts in and out.

Manifests from `builders` are plain dicts, sent as JSON to fixed REST paths by the one
client (`api_client`). Every call is synchronous: handlers run them in kopf's thread pool.
Nothing here knows the operator's labels or names: callers pass selectors (`converge`), so
the client sits below everything that decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, cast

from assay import spec as spec_module
from assay.kube import api_errors
from assay.operator import objects
from assay.operator.kube import api_client, refusals

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
"""RFC 6902: a list of operations, applied all or none; a failed `test` is 422 Invalid."""
CLIENT_NAME = api_client.CLIENT_NAME
"""The operator's name to the API server: its User-Agent and the component of its Events.
The same name as the managed-by label of its children (`builders.MANAGED_BY`), which
builds no request."""
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Asks the API server for an object's metadata alone (no fallback to the whole object)."""

PLURALS = {
    "ConfigMap": "configmaps",
    "Event": "events",
    "Job": "jobs",
    "NetworkPolicy": "networkpolicies",
    "Pod": "pods",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "Secret": "secrets",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    spec_module.KIND: spec_module.PLURAL,
}
"""The kinds the operator touches. Their paths are fixed, so no discovery is read: the dynamic
client's discovery (about 20 requests) was repeated under a burst of handlers."""


def _raise_if_refused(error: api_errors.ApiError) -> None:
    said = refusals.final(error)
    if said is not None:
        raise api_errors.Refused(error, said=said) from None


def path(
    api_version: str, kind: str, *, namespace: str, name: str | None = None, subresource: str | None = None
) -> str:
    """The REST path of a namespaced kind (and of one object, and its subresource)."""
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    try:
        plural = PLURALS[kind]
    except KeyError:
        raise ValueError(f"the operator has no path for kind {kind!r}") from None
    url = f"{root}/namespaces/{namespace}/{plural}"
    if name is not None:
        url += f"/{name}"
    if subresource is not None:
        url += f"/{subresource}"
    return url


def create(manifest: Manifest) -> bool:
    """Create one object; False if it already existed (AlreadyExists), which is success too, or
    when its namespace is being deleted (nothing is to be made there any more: an unfinished
    run would have its Job created again). Raises Refused when the API server refuses the
    object itself (`refusals`), ApiError otherwise."""
    namespace = manifest["metadata"]["namespace"]
    try:
        api_client.request("POST", path(manifest["apiVersion"], manifest["kind"], namespace=namespace), body=manifest)
    except api_errors.ApiError as error:
        if error.reason == api_errors.ALREADY_EXISTS:
            return False
        if not refusals.namespace_terminating(error):
            _raise_if_refused(error)
            raise
        logger.info(
            "Namespace %s is being deleted: %s %s not created.",
            namespace,
            manifest["kind"],
            manifest["metadata"]["name"],
        )
        return False
    return True


def json_patch(manifest: Manifest, operations: list[Manifest]) -> Manifest:
    """Apply RFC 6902 `operations` to the object `manifest` names, all or none; the object as written.

    Raises ApiError: NotFound when there is no such object, and Refused for a final refusal
    (`refusals`), which includes a `test` operation that failed (422 Invalid): the caller
    that tests tells the two apart."""
    meta = manifest["metadata"]
    url = path(manifest["apiVersion"], manifest["kind"], namespace=meta["namespace"], name=meta["name"])
    try:
        written: Manifest = api_client.request("PATCH", url, body=operations, content_type=JSON_PATCH)
    except api_errors.ApiError as error:
        _raise_if_refused(error)
        raise
    return written


def list_children(
    kind: str, api_version: str, *, namespace: str, label_selector: str, owner_uid: str | None = None
) -> list[Manifest]:
    """Children of one owner: by label (two owners may share a label), then by the controller
    ownerReference when `owner_uid` is given."""
    found = list_objects(kind, api_version, namespace=namespace, label_selector=label_selector)
    if owner_uid is None:
        return found
    return [
        o
        for o in found
        if any(r.get("uid") == owner_uid for r in (o.get("metadata") or {}).get("ownerReferences") or ())
    ]


def get(kind: str, api_version: str, *, namespace: str, name: str) -> Manifest | None:
    try:
        found: Manifest = api_client.request("GET", path(api_version, kind, namespace=namespace, name=name))
    except api_errors.ApiError as error:
        if error.reason == api_errors.NOT_FOUND:
            return None
        raise
    return found


def get_metadata(kind: str, api_version: str, *, namespace: str, name: str) -> Manifest | None:
    """One object's metadata alone (PartialObjectMetadata), None if it does not exist: a
    Secret's labels are read without its values ever reaching the operator."""
    try:
        found = api_client.request(
            "GET", path(api_version, kind, namespace=namespace, name=name), accept=PARTIAL_METADATA
        )
    except api_errors.ApiError as error:
        if error.reason == api_errors.NOT_FOUND:
            return None
        raise
    metadata: Manifest = dict((found or {}).get("metadata") or {})
    return metadata


def secret_metadata(namespace: str) -> Callable[[str], Manifest | None]:
    """Secret name → its metadata (`get_metadata`: the values never reach the operator); None
    when the namespace has no such Secret. What `secret_consent.check` reads."""
    return lambda name: get_metadata("Secret", "v1", namespace=namespace, name=name)


def list_objects(
    kind: str, api_version: str, *, namespace: str, label_selector: str | None = None, field_selector: str | None = None
) -> list[Manifest]:
    query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
    found = api_client.request("GET", path(api_version, kind, namespace=namespace), query=query)
    items: list[Manifest] = found.get("items") or []
    # A list's items carry no kind; the handlers tell Jobs from pods by it.
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


def list_events(*, namespace: str, kind: str, name: str) -> list[objects.Event]:
    """core/v1 Events about one object (the Job controller's, the kubelet's, the scheduler's)."""
    found = list_objects(
        "Event", "v1", namespace=namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
    )
    return cast(list[objects.Event], found)


def get_job(*, namespace: str, name: str) -> objects.Job | None:
    return cast(objects.Job | None, get("Job", "batch/v1", namespace=namespace, name=name))


def list_pods(*, namespace: str, label_selector: str) -> list[objects.Pod]:
    return cast(list[objects.Pod], list_objects("Pod", "v1", namespace=namespace, label_selector=label_selector))


def _merge_patch(
    api_version: str, kind: str, *, namespace: str, name: str, body: Mapping[str, Any], subresource: str | None = None
) -> Manifest:
    url = path(api_version, kind, namespace=namespace, name=name, subresource=subresource)
    written: Manifest = api_client.request("PATCH", url, body=dict(body), content_type=MERGE_PATCH)
    return written


def end_job(*, namespace: str, name: str) -> None:
    """Fail a Job now and remove its pods, keeping the Job and its Events to look at.

    activeDeadlineSeconds is one of the few mutable fields of a Job; at 1 the Job controller
    fails it at once (reason DeadlineExceeded) and deletes its running pods.
    """
    _merge_patch("batch/v1", "Job", namespace=namespace, name=name, body={"spec": {"activeDeadlineSeconds": 1}})


def create_event(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> None:
    """A core/v1 Event about `obj`, posted now on this thread's connection (`events.EventPoster` posts later)."""
    send_event(event_body(obj, type=type, reason=reason, message=message))


def event_body(obj: Mapping[str, Any], *, type: str, reason: str, message: str) -> Manifest:
    """The Event about `obj`, stamped with the moment it is made (not the moment it is sent)."""
    import datetime
    import socket

    meta = obj["metadata"]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": CLIENT_NAME},
        "reportingComponent": CLIENT_NAME,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def send_event(event: Mapping[str, Any], *, update: bool = False) -> None:
    """POST an Event body; with `update`, merge-patch the `count`, `lastTimestamp` and
    `message` of the Event of its name instead (`event_correlation`), POSTing it whole if
    that one is gone (expired, or its create failed). A failure is logged, not raised.

    Not through kopf's poster: it sends each Event with its own aiohttp client from the
    event loop, which under a burst of Evaluations was a seventh of the operator's CPU."""
    namespace, obj = event["metadata"]["namespace"], event["involvedObject"]
    try:
        if update:
            try:
                _merge_patch(
                    "v1",
                    "Event",
                    namespace=namespace,
                    name=event["metadata"]["name"],
                    body={k: event[k] for k in ("count", "lastTimestamp", "message")},
                )
                return
            except api_errors.ApiError as error:
                if error.reason != api_errors.NOT_FOUND:
                    raise
        api_client.request("POST", path("v1", "Event", namespace=namespace), body=event)
    except Exception as error:
        logger.warning("Could not post Event %s on %s/%s: %s", event["reason"], namespace, obj["name"], error)


def delete(kind: str, api_version: str, *, namespace: str, name: str) -> None:
    try:
        # Background: the Job goes now, its pods right after (no orphans left running).
        api_client.request(
            "DELETE", path(api_version, kind, namespace=namespace, name=name), body={"propagationPolicy": "Background"}
        )
    except api_errors.ApiError as error:
        if error.reason != api_errors.NOT_FOUND:
            raise


def patch_job_suspend(*, namespace: str, name: str, suspend: bool) -> None:
    _merge_patch("batch/v1", "Job", namespace=namespace, name=name, body={"spec": {"suspend": suspend}})


def get_evaluation(*, namespace: str, name: str) -> objects.Evaluation | None:
    return cast(
        objects.Evaluation | None, get(spec_module.KIND, spec_module.API_VERSION, namespace=namespace, name=name)
    )


def patch_evaluation_status(*, namespace: str, name: str, status: Mapping[str, Any]) -> objects.Evaluation:
    """Merge-patch one Evaluation's status; returns the Evaluation as written."""
    written = _merge_patch(
        spec_module.API_VERSION,
        spec_module.KIND,
        namespace=namespace,
        name=name,
        body={"status": dict(status)},
        subresource="status",
    )
    return cast(objects.Evaluation, written)
