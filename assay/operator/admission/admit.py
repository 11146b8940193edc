"""One admission for every path that may start a run: the new decision and the re-creation of
a lost Job check the same things in the same order, and so does the tenant-attempt corpus.

The order matters: the admin's policy first, before the task index sees a path it would
walk; the Secrets' consent; the tasks (a tenant's ConfigMaps parsed in a bounded child
first); then the policy's defaults filled in, and the spec's size as its runner's pod carries it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay import spec as spec_module
from assay.operator.admission import policy, secret_consent, spec_size, task_sources, validation


@dataclasses.dataclass(frozen=True)
class Admitted:
    spec: spec_module.Evaluation
    """The spec with the admin's defaults filled in."""
    task_sources: list[dict[str, Any]] | None
    """status.taskSources for a new run; None where the tasks were not checked again."""


def admit(
    raw_spec: Mapping[str, Any],
    *,
    namespace: str,
    admin: policy.AdminPolicy,
    secret_metadata: secret_consent.MetadataGetter,
    config_map: task_sources.ConfigMapGetter | None,
) -> Admitted:
    """The spec as it may run, or a `UserError` naming why not. `config_map` None: the tasks were
    checked when the run was accepted (a lost Job made again), and are not read again."""
    spec = spec_module.parse_spec(dict(raw_spec))
    policy.check(spec, admin)
    secret_consent.check(spec, label=admin.secret_consent_label, namespace=namespace, get=secret_metadata)
    sources = None
    if config_map is not None:
        sources = validation.validate_with_sources(
            spec, namespace=namespace, get=config_map, allow_task_code=admin.allow_task_code
        )
    enforced = policy.enforce(spec, admin)
    spec_size.check(enforced)  # the spec as its runner's pod will carry it
    return Admitted(enforced, sources)
