"""The operator's API calls, with plain dicts in and out.

Manifests from `builders` are plain dicts, sent as JSON to fixed REST paths over this
thread's connection (`api_session`). Every call is synchronous: handlers run them in
kopf's thread pool. Nothing here knows the operator's labels or names: callers pass
selectors (`converge`), so the client sits below everything that decides.
"""

from __future__ import annotations

import functools
import json
import logging
import urllib.parse
from typing import Any, Callable, Mapping

from assay import spec as spec_module
from assay.operator.kube import api_session, refusals

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
"""Server-side apply; JSON is YAML, so the body is sent as JSON."""
CLIENT_NAME = "assay-operator"
"""The operator's name to the API server: its User-Agent, the component of its Events, and
(FIELD_MANAGER) its name in the managedFields of what it applies. The same name as the
managed-by label of its children (`builders.MANAGED_BY`), which builds no request."""
FIELD_MANAGER = CLIENT_NAME
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""Asks the API server for an object's metadata alone (no fallback to the whole object)."""


def load_config(kubeconfig: str | None = None) -> None:
    """The pod's service account in a cluster, else `kubeconfig` or $KUBECONFIG (~/.kube/config)."""
    from kubernetes import config

    if kubeconfig is not None:
        config.load_kube_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    session.cache_clear()


PLURALS = {
    "ConfigMap": "configmaps", "Event": "events", "Job": "jobs", "Pod": "pods", "Role": "roles",
    "RoleBinding": "rolebindings", "Secret": "secrets", "Service": "services", "ServiceAccount": "serviceaccounts",
    spec_module.KIND: spec_module.PLURAL,
}  # fmt: skip
"""The kinds the operator touches. Their paths are fixed, so no discovery is read: the dynamic
client's discovery (about 20 requests) was repeated under a burst of handlers."""


class ApiError(Exception):
    """An API request that failed: its HTTP status and the server's reason."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"{status} {reason}: {body[:500]}")
        self.status, self.reason, self.body = status, reason, body


class Refused(ApiError):
    """An object the API server refused for what it is (`refusals`): sending it again changes nothing."""

    def __init__(self, error: ApiError, *, said: str) -> None:
        super().__init__(error.status, error.reason, error.body)
        self.said = said
        """The API server's message, one bounded line."""


def _raise_if_refused(error: ApiError) -> None:
    said = refusals.final(error.status, error.body)
    if said is not None:
        raise Refused(error, said=said) from None


def path(api_version: str, kind: str, *, namespace: str, name: str | None = None, subresource: str | None = None) -> str:
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


@functools.lru_cache(maxsize=1)
def session() -> api_session.Session:
    from kubernetes import client

    return api_session.Session(client.Configuration.get_default_copy())


def request(method: str, url: str, *, body: Any = None, label_selector: str | None = None,
            field_selector: str | None = None, content_type: str = "application/json",
            accept: str = "application/json") -> Any:  # fmt: skip
    """One API request; the decoded JSON answer. Raises ApiError for an error status."""
    query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
    if query:
        url += "?" + urllib.parse.urlencode(query)
    api = session()
    headers = {"Accept": accept, "User-Agent": CLIENT_NAME, **api.auth_headers()}
    payload = None
    if body is not None:
        payload = json.dumps(body).encode()
        headers["Content-Type"] = content_type
    response = api.send(method, url, body=payload, headers=headers)
    if response.status >= 400:
        raise ApiError(response.status, response.reason, response.data.decode(errors="replace"))
    return json.loads(response.data) if response.data else None


def create(manifest: Manifest) -> bool:
    """Create one object; False if it already existed (409), which is success too. Raises
    Refused when the API server refuses the object itself (`refusals`), ApiError otherwise."""
    namespace = manifest["metadata"]["namespace"]
    try:
        request("POST", path(manifest["apiVersion"], manifest["kind"], namespace=namespace), body=manifest)
    except ApiError as error:
        if error.status == 409:
            return False
        if not _namespace_terminating(error):
            _raise_if_refused(error)
            raise
        logger.info("Namespace %s is being deleted: %s %s not created.", namespace, manifest["kind"],
                    manifest["metadata"]["name"])  # fmt: skip
        return False
    return True


def _namespace_terminating(error: ApiError) -> bool:
    """Not RBAC: the namespace is being deleted (its Jobs go first, and an unfinished run
    would have its Job created again). Nothing is to be made there any more."""
    return refusals.namespace_terminating(error.status, error.body)


def apply(manifest: Manifest) -> bool:
    """Server-side apply one object: created when missing, else made to hold the fields given.

    Forced, so fields another manager set (an older operator's create, a Role made by hand
    under the runner's name) are taken over; a Role's rules and a RoleBinding's subjects
    are atomic lists, so the object ends with exactly the rules given. One request, as the
    create it replaces was. False when the namespace is being deleted."""
    meta = manifest["metadata"]
    url = path(manifest["apiVersion"], manifest["kind"], namespace=meta["namespace"], name=meta["name"])
    query = urllib.parse.urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
    try:
        request("PATCH", f"{url}?{query}", body=manifest, content_type=APPLY_PATCH)
    except ApiError as error:
        if not _namespace_terminating(error):
            _raise_if_refused(error)
            raise
        logger.info("Namespace %s is being deleted: %s %s not applied.", meta["namespace"], manifest["kind"],
                    meta["name"])  # fmt: skip
        return False
    return True


def list_children(kind: str, api_version: str, *, namespace: str, label_selector: str,
                  owner_uid: str | None = None) -> list[Manifest]:  # fmt: skip
    """Children of one owner: by label (two owners may share a label), then by the controller
    ownerReference when `owner_uid` is given."""
    found = list_objects(kind, api_version, namespace=namespace, label_selector=label_selector)
    if owner_uid is None:
        return found
    return [o for o in found if any(r.get("uid") == owner_uid for r in (o.get("metadata") or {}).get("ownerReferences") or ())]


def get(kind: str, api_version: str, *, namespace: str, name: str) -> Manifest | None:
    try:
        found: Manifest = request("GET", path(api_version, kind, namespace=namespace, name=name))
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    return found


def get_metadata(kind: str, api_version: str, *, namespace: str, name: str) -> Manifest | None:
    """One object's metadata alone (PartialObjectMetadata), None if it does not exist: a
    Secret's labels are read without its values ever reaching the operator."""
    try:
        found = request("GET", path(api_version, kind, namespace=namespace, name=name), accept=PARTIAL_METADATA)
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    metadata: Manifest = dict((found or {}).get("metadata") or {})
    return metadata


def secret_metadata(namespace: str) -> Callable[[str], Manifest | None]:
    """Secret name → its metadata (`get_metadata`: the values never reach the operator); None
    when the namespace has no such Secret. What `secret_consent.check` reads."""
    return lambda name: get_metadata("Secret", "v1", namespace=namespace, name=name)


def list_objects(kind: str, api_version: str, *, namespace: str, label_selector: str | None = None,
                 field_selector: str | None = None) -> list[Manifest]:  # fmt: skip
    found = request("GET", path(api_version, kind, namespace=namespace), label_selector=label_selector,
                    field_selector=field_selector)  # fmt: skip
    items: list[Manifest] = found.get("items") or []
    # A list's items carry no kind; the handlers tell Jobs from pods by it.
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items


def list_events(*, namespace: str, kind: str, name: str) -> list[Manifest]:
    """core/v1 Events about one object (the Job controller's, the kubelet's, the scheduler's)."""
    return list_objects("Event", "v1", namespace=namespace,
                        field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")  # fmt: skip


def _merge_patch(api_version: str, kind: str, *, namespace: str, name: str, body: Mapping[str, Any],
                 subresource: str | None = None) -> Manifest:  # fmt: skip
    written: Manifest = request("PATCH", path(api_version, kind, namespace=namespace, name=name, subresource=subresource),
                                body=dict(body), content_type=MERGE_PATCH)  # fmt: skip
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
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta["name"],
                           "namespace": meta["namespace"], "uid": meta.get("uid")},  # fmt: skip
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
                _merge_patch("v1", "Event", namespace=namespace, name=event["metadata"]["name"],
                             body={k: event[k] for k in ("count", "lastTimestamp", "message")})  # fmt: skip
                return
            except ApiError as error:
                if error.status != 404:
                    raise
        request("POST", path("v1", "Event", namespace=namespace), body=event)
    except Exception as error:  # noqa: BLE001 - an Event is a courtesy; status already says it
        logger.warning("Could not post Event %s on %s/%s: %s", event["reason"], namespace, obj["name"], error)


def delete(kind: str, api_version: str, *, namespace: str, name: str) -> None:
    try:
        # Background: the Job goes now, its pods right after (no orphans left running).
        request("DELETE", path(api_version, kind, namespace=namespace, name=name),
                body={"propagationPolicy": "Background"})  # fmt: skip
    except ApiError as error:
        if error.status != 404:
            raise


def patch_job_suspend(*, namespace: str, name: str, suspend: bool) -> None:
    _merge_patch("batch/v1", "Job", namespace=namespace, name=name, body={"spec": {"suspend": suspend}})


def get_evaluation(*, namespace: str, name: str) -> Manifest | None:
    return get(spec_module.KIND, spec_module.API_VERSION, namespace=namespace, name=name)


def patch_evaluation_status(*, namespace: str, name: str, status: Mapping[str, Any]) -> Manifest:
    """Merge-patch one Evaluation's status; returns the Evaluation as written."""
    return _merge_patch(spec_module.API_VERSION, spec_module.KIND, namespace=namespace, name=name,
                        body={"status": dict(status)}, subresource="status")  # fmt: skip
