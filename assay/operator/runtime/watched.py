"""The latest body of each Evaluation, runner Job and runner pod, as the watches deliver them.

Why: the handlers used to read what they needed on every event — a Job event cost a GET of
its Evaluation and a LIST of its pods, a pod event another GET — which at a burst of 300
Evaluations was half of the operator's API requests. kopf already streams every one of
these objects; keeping the last body of each costs memory proportional to the runs, not
requests proportional to their events.

kopf fills these through index handlers (see `handlers`): it runs them for every object
of the initial listing before any other handler starts, so no handler reads a half-listed
cluster, and for each later event before that event's handlers. The operator's own status
writes go in too (from their responses), so a handler acting right after a write never
reads the body from before it. Bodies handed out are shared: read them, do not change them.

A runner pod carries its spec as an annotation (`builders.ANNOTATION_SPEC`), and its Job's
pod template too: kept whole, a thousand runs of a large spec would hold a thousand copies
of it twice over. What is kept of a Job or pod is a copy without it (nothing here reads it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, cast

from assay.operator import objects
from assay.operator.build import builders

Body = Mapping[str, Any]
Key = tuple[str, str]
Object = TypeVar("Object", bound=Body)
"""The kind of object kept (`objects`' TypedDicts)."""


def _key(body: Body) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def _version(body: Body) -> int | None:
    raw = (body.get("metadata") or {}).get("resourceVersion")
    # Opaque to clients by contract; etcd's are integers, and only those are compared.
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


class WatchedObjects(Generic[Object]):
    """(namespace, name) → the newest body seen, optionally grouped by a label value."""

    def __init__(self, *, group_label: str | None = None, trim: Callable[[Object], Object] | None = None) -> None:
        self._trim = trim
        self._bodies: dict[Key, Object] = {}
        self._groups: dict[Key, set[str]] = {}
        self._group_label = group_label
        self._lock = threading.Lock()

    def observe(self, body: Object) -> None:
        """Keep `body` unless an newer version of the object is kept already (a late watch event
        of a change older than the operator's own write)."""
        key = _key(body)
        if self._trim is not None:
            body = self._trim(body)
        with self._lock:
            kept = self._bodies.get(key)
            if kept is not None:
                old, new = _version(kept), _version(body)
                if old is not None and new is not None and new < old:
                    return
                self._ungroup(key, kept)
            self._bodies[key] = body
            group = self._group_of(body)
            if group is not None:
                self._groups.setdefault((key[0], group), set()).add(key[1])

    def forget(self, body: Body) -> None:
        key = _key(body)
        with self._lock:
            kept = self._bodies.pop(key, None)
            if kept is not None:
                self._ungroup(key, kept)

    def get(self, namespace: str, name: str) -> Object | None:
        with self._lock:
            return self._bodies.get((namespace, name))

    def in_group(self, namespace: str, group: str) -> list[Object]:
        """The objects of `namespace` whose `group_label` is `group` (a Job's pods, by their Job label)."""
        with self._lock:
            names = sorted(self._groups.get((namespace, group), ()))
            return [self._bodies[(namespace, name)] for name in names]

    def __len__(self) -> int:
        with self._lock:
            return len(self._bodies)

    def _group_of(self, body: Body) -> str | None:
        if self._group_label is None:
            return None
        value = ((body.get("metadata") or {}).get("labels") or {}).get(self._group_label)
        return str(value) if value else None

    def _ungroup(self, key: Key, body: Body) -> None:
        group = self._group_of(body)
        if group is not None:
            members = self._groups.get((key[0], group))
            if members is not None:
                members.discard(key[1])
                if not members:
                    del self._groups[(key[0], group)]


class Watched:
    """What the operator's watches have shown it: Evaluations, runner Jobs, runner pods by Job."""

    def __init__(self, *, job_label: str) -> None:
        self.evaluations: WatchedObjects[objects.Evaluation] = WatchedObjects()
        self.jobs: WatchedObjects[objects.Job] = WatchedObjects(trim=_job_without_spec)
        self.pods: WatchedObjects[objects.Pod] = WatchedObjects(group_label=job_label, trim=_without_spec)


def _without_spec(body: Object) -> Object:
    """`body` itself, or a shallow copy whose metadata lacks the spec annotation."""
    meta = body.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if builders.ANNOTATION_SPEC not in annotations:
        return body
    kept = {k: v for k, v in annotations.items() if k != builders.ANNOTATION_SPEC}
    return cast(Object, {**body, "metadata": {**meta, "annotations": kept}})


def _job_without_spec(body: objects.Job) -> objects.Job:
    """A Job without the spec annotation of its pod template."""
    spec = body.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return body
    trimmed = _without_spec(template)
    if trimmed is template:
        return body
    return cast(objects.Job, {**body, "spec": {**spec, "template": trimmed}})
