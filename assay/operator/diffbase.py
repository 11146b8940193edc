"""Where kopf keeps the last handled spec, without the secrets a refused spec carried.

kopf stores each Evaluation's last handled spec in an annotation (to tell what a later
update changed) and, at debug level, logs the patch that writes it. A spec refused for a
literal token in `modelArgs` would so copy the token into the object's metadata and the
operator's log. The stored essence keeps the key and drops the value: removing the key or
any other change is still a change; swapping one literal token for another is not, and
the spec stays refused either way.
"""

from __future__ import annotations

from typing import Any, Iterable

import kopf

from assay.operator import policy

REDACTED = "<redacted>"


class RedactingDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        essence = super().build(body=body, extra_fields=extra_fields)
        model_args = (essence.get("spec") or {}).get("modelArgs")
        if isinstance(model_args, dict):
            for key in policy.secret_keys(model_args):
                model_args[key] = REDACTED
        return essence
