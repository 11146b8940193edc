"""What the operator keeps in memory of an Evaluation whose spec is large.

Why: the watches deliver each Evaluation whole and `watched` keeps the newest body of each.
A spec is normally a few hundred bytes, but the API server admits one up to etcd's object
limit (about 1.5 MiB: a long `samples` list, a large `systemInstruction`, big `modelArgs`),
and a JSON document of 1 MiB is five to eight times that as Python objects. A hundred such
Evaluations would pass the chart's memory limit, and since a restarted operator lists them
all again, it would crash-loop for every tenant of the cluster.

So a spec over `KEPT_SPEC_BYTES` of JSON is kept without its large fields (a large mapping
keeps its small entries: a model's `pretrained` and `revision` stay for the metrics' labels).
The kept body is a fresh copy (see `kept`). What reads the kept body between decisions (metrics, conditions, sweeps, pod and Job
mirroring) reads none of them. Deciding a run needs the whole spec: it reads the Evaluation
from the API server first (`whole`), one GET per decision for such Evaluations only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from assay.operator import objects

Body = Mapping[str, Any]

KEPT_SPEC_BYTES = 64 * 1024
"""A spec up to this size (compact JSON) is kept whole: every spec a person writes by hand."""
KEPT_FIELD_BYTES = 1024
"""In a larger spec, a field (or an entry of a mapping field) up to this size is kept."""
ELIDED = "assay.dev/elidedSpecFields"
"""Top-level key of a kept body whose spec lost fields: their names. Never sent anywhere."""


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str))


def kept(body: Body) -> Body:
    """`body` itself when its spec is small; else a shallow copy whose spec holds the small fields only."""
    spec = body.get("spec")
    if not isinstance(spec, Mapping) or _size(spec) <= KEPT_SPEC_BYTES:
        return body
    small: dict[str, Any] = {}
    elided: list[str] = []
    for field, value in spec.items():
        if _size(value) <= KEPT_FIELD_BYTES:
            small[field] = value
            continue
        elided.append(field)
        if isinstance(value, Mapping):
            small[field] = {key: item for key, item in value.items() if _size(item) <= KEPT_FIELD_BYTES}
    # A fresh copy, not the small parts of the decoded body: those were allocated among the
    # large fields' objects, and would keep the allocator's arenas that held them (about as
    # much memory as the whole body) from being given back once the rest is freed.
    copied: dict[str, Any] = json.loads(json.dumps({**body, "spec": small, ELIDED: elided}, default=str))
    return copied


def is_elided(body: Body) -> bool:
    return bool(body.get(ELIDED))


def whole(body: objects.Evaluation, *, read: Callable[[], objects.Evaluation | None]) -> objects.Evaluation | None:
    """The Evaluation with its whole spec: `body` when nothing was left out of it, else what
    `read` returns (the API server's current object; None when it is gone)."""
    return read() if is_elided(body) else body
