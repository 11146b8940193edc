"""Small readers of the Jobs, pods and Events that `diagnosis` looks at.

Times as the API server writes them, ages, names, a pod's containers and their statuses,
the Events about one object, and what other components said cut to one bounded sentence:
the field-level reading, kept apart from the rules that decide what a run's problem is.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any

from assay.operator import objects

_MAX_DETAIL = 400


def parse_time(value: Any) -> datetime.datetime | None:
    if not value:
        return None
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    try:
        return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def age(obj: Mapping[str, Any], now: datetime.datetime) -> float:
    """Seconds since `obj` was created (infinite when it does not say)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return (now - created).total_seconds() if created is not None else float("inf")


def sentence(text: str) -> str:
    text = " ".join(str(text).split())
    if len(text) > _MAX_DETAIL:
        text = text[: _MAX_DETAIL - 3].rstrip() + "..."
    return text.rstrip(".")


def name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def pod_finished(pod: objects.Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def containers(pod: objects.Pod) -> dict[str, Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return {str(c.get("name")): c for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]}


def statuses(pod: objects.Pod) -> list[objects.ContainerStatus]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]


def image(pod: objects.Pod, container_status: objects.ContainerStatus) -> str:
    spec = containers(pod).get(str(container_status.get("name"))) or {}
    return str(spec.get("image") or container_status.get("image") or "?")


def memory_limit(pod: objects.Pod, container: str) -> str | None:
    spec = containers(pod).get(container) or {}
    value = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    return str(value) if value is not None else None


def event_time(event: objects.Event, *, first: bool) -> datetime.datetime | None:
    keys = (
        ("firstTimestamp", "eventTime", "lastTimestamp") if first else ("lastTimestamp", "eventTime", "firstTimestamp")
    )
    for key in keys:
        found = parse_time(event.get(key))
        if found:
            return found
    series = event.get("series") or {}
    return parse_time(series.get("lastObservedTime")) or parse_time(
        (event.get("metadata") or {}).get("creationTimestamp")
    )


def about(events: Iterable[objects.Event], kind: str, name: str) -> list[objects.Event]:
    return [
        e
        for e in events
        if (e.get("involvedObject") or {}).get("kind") == kind and (e.get("involvedObject") or {}).get("name") == name
    ]
