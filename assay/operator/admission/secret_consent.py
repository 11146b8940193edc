"""A Secret serves an Evaluation only if it consents: it carries the label the admin chose.

Whoever may create Evaluations in a namespace is a tenant: without this check they could
name any Secret there (spec.hfTokenSecret, spec.endpoint.apiKeySecret), one they cannot
read themselves, and have the runner send its value as a bearer token to a URL of their
choosing. The namespace's admin says which Secrets are for evaluations by labelling them
with the chart's `policy.secretConsentLabel` (default assay.dev/evaluations=allowed).

The operator reads only each Secret's metadata (`kube.get_metadata`, PartialObjectMetadata):
its values never reach the operator. The check runs before any child of a run exists, and
again whenever a lost Job is created anew (consent can be withdrawn). The chart's admission
policy cannot make it: a ValidatingAdmissionPolicy sees the Evaluation, not other objects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from assay.errors import UserError
from assay.spec import Evaluation

MetadataGetter = Callable[[str], Mapping[str, Any] | None]
"""Secret name → its metadata; None when the namespace has no such Secret (`kube.secret_metadata`)."""


def references(spec: Evaluation) -> list[tuple[str, str]]:
    """(field, Secret name) for every Secret the spec names. caBundle is a ConfigMap: public data."""
    found = []
    if spec.hf_token_secret is not None:
        found.append(("spec.hfTokenSecret", spec.hf_token_secret.name))
    if spec.endpoint is not None and spec.endpoint.api_key_secret is not None:
        found.append(("spec.endpoint.apiKeySecret", spec.endpoint.api_key_secret.name))
    return found


def check(spec: Evaluation, *, label: str, namespace: str, get: MetadataGetter) -> None:
    """Raise UserError (one sentence naming the Secret, the label and the fix) unless every
    Secret the spec names exists and carries `label` (`key=value`)."""
    key, _, value = label.partition("=")
    seen: dict[str, Mapping[str, Any] | None] = {}
    for field, name in references(spec):
        if name not in seen:
            seen[name] = get(name)
        metadata = seen[name]
        fix = (
            f"label it with `kubectl label secret {name} -n {namespace} {label}` if the namespace's admin consents, "
            "then rerun the Evaluation"
        )
        if metadata is None:
            raise UserError(
                f"{field} names Secret {name!r}, which does not exist in namespace {namespace}: create it, then {fix}."
            )
        if (metadata.get("labels") or {}).get(key) != value:
            raise UserError(
                f"{field} names Secret {name!r}, which lacks the label {label} that lets Evaluations use it: {fix}."
            )
