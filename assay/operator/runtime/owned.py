"""Objects the operator owns: made, or changed only while they are its own.

A child's name is the operator's choice (`names`: it ends in a mark of the Evaluation's
uid), but another object may hold it: made by hand or by another tool, or left over. The
operator writes an object only when it carries this Evaluation's controller reference
(its uid) and the operator's managed-by label; any other holder of the name fails the run
as InvalidSpec (`NotOwned`) and nothing of it changes. Before this rule, an Evaluation
named `gitlab` rewrote an existing Role `gitlab-runner`, made itself its controller, and
ran its runner as the existing ServiceAccount of that name, with all its bindings.

The namespace's runner identity (`build.runner_identity`: `assay-runner`) is no one
Evaluation's: `uid` None, and the managed-by label alone is the proof (with, for its
RoleBinding, the Role it binds, which cannot change).

Each object costs one request on the path a decision usually takes:

- created once (the Job, the headless Service): create. AlreadyExists, read it: ours is
  done (a decision carried out twice), another's is NotOwned.
- kept up to date (`children.UPDATED_FIELDS`): create where it likely does not exist yet
  (a run's NetworkPolicy for a new run), else one JSON patch whose `test` operations check the reference and the
  label and whose `add` operations write the fields. The API server applies a JSON patch
  all or none, so a test that fails changes nothing, and nothing can come between the check
  and the write. A failed test is followed by one read: ours (its reference at another
  place in the list) is patched again on its resourceVersion, another's is NotOwned. A
  patch of nothing (NotFound) creates; a create that finds one (AlreadyExists) patches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.kube import api_errors
from assay.operator.build import builders, children
from assay.operator.kube import kube

Manifest = dict[str, Any]


class NotOwned(Exception):
    """An object's name is held by an object that is not the operator's: the run fails, nothing is changed."""

    def __init__(self, kind: str, name: str, *, namespace_wide: bool = False) -> None:
        if namespace_wide:
            message = (
                f"{kind} {name} exists and is not the Assay operator's (it lacks the label "
                f"{builders.LABEL_MANAGED_BY}={builders.MANAGED_BY}); the operator runs every runner of the "
                f"namespace as {name} and changes only objects it made: delete or rename that {kind}."
            )
        else:
            message = (
                f"{kind} {name} exists and is not this Evaluation's; the operator changes only objects it made for "
                f"this Evaluation: delete or rename that {kind}, or delete and create the Evaluation again (its "
                "children's names carry its uid)."
            )
        super().__init__(message)
        self.kind, self.name = kind, name


def owned_by(obj: Mapping[str, Any], uid: str | None) -> bool:
    """Whether `obj` is the operator's: the child of the Evaluation `uid` (its controller reference and the
    operator's label), or with `uid` None one of the namespace's own objects (the label)."""
    meta = obj.get("metadata") or {}
    labelled = (meta.get("labels") or {}).get(builders.LABEL_MANAGED_BY) == builders.MANAGED_BY
    if uid is None:
        return labelled
    controlled = any(
        ref.get("uid") == uid and ref.get("controller") is True for ref in meta.get("ownerReferences") or ()
    )
    return controlled and labelled


def ensure(manifest: Manifest, *, uid: str | None, likely: bool = False) -> bool:
    """Make `manifest` hold as the child of Evaluation `uid` (None: the namespace's own object);
    True when it was created now.

    Raises NotOwned when an object of its name is another's, Refused when the API server
    refuses it for what it is, ApiError for anything to try again."""
    if manifest["kind"] not in children.UPDATED_FIELDS:
        if kube.create(manifest):
            return True
        _check(manifest, uid)
        return False
    if not likely and kube.create(manifest):
        return True
    if _update(manifest, uid):
        return False
    if kube.create(manifest):  # it was gone
        return True
    # Made meanwhile (patched now), or nothing made: the namespace is being deleted.
    _update(manifest, uid)
    return False


def _update(manifest: Manifest, uid: str | None) -> bool:
    """Write the fields of an existing child that is ours; False when there is none."""
    writes = _writes(manifest)
    try:
        kube.json_patch(manifest, [*_tests(manifest, uid), *writes])
        return True
    except api_errors.ApiError as error:
        if error.reason == api_errors.NOT_FOUND:
            return False
        if error.reason != api_errors.INVALID:
            raise
    # A test failed (or the fields were refused): the object itself tells which.
    found = _check(manifest, uid)
    if found is None:
        return False
    version = _version(found)
    try:
        kube.json_patch(manifest, [{"op": "test", "path": "/metadata/resourceVersion", "value": version}, *writes])
    except api_errors.Refused:
        now = _check(manifest, uid)
        if now is not None and _version(now) == version:
            raise  # the fields themselves were refused
        # changed between the read and the patch: the next decision reads it again
        raise api_errors.ApiError(
            code=409, reason=api_errors.CONFLICT, message="changed while it was written"
        ) from None
    return True


def _version(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("resourceVersion")


def _check(manifest: Manifest, uid: str | None) -> Manifest | None:
    """The object of the manifest's name (None if there is none); NotOwned if it is another's."""
    meta = manifest["metadata"]
    found = kube.get(manifest["kind"], manifest["apiVersion"], namespace=meta["namespace"], name=meta["name"])
    if found is not None and not (owned_by(found, uid) and _same_role(found, manifest)):
        raise NotOwned(manifest["kind"], meta["name"], namespace_wide=uid is None)
    return found


def _same_role(found: Mapping[str, Any], manifest: Manifest) -> bool:
    """A RoleBinding's roleRef cannot change: one of ours binding another Role is not ours to write."""
    return manifest["kind"] != "RoleBinding" or found.get("roleRef") == manifest.get("roleRef")


def _tests(manifest: Manifest, uid: str | None) -> list[Manifest]:
    """JSON patch tests that the object is the operator's, as it makes them: one ownerReference, the
    Evaluation's, as controller (for a child); the managed-by label; a RoleBinding's Role."""
    label = builders.LABEL_MANAGED_BY.replace("~", "~0").replace("/", "~1")  # a JSON pointer's escapes
    tests: list[Manifest] = [{"op": "test", "path": f"/metadata/labels/{label}", "value": builders.MANAGED_BY}]
    if uid is not None:
        tests[:0] = [
            {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": uid},
            {"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": True},
        ]
    if manifest["kind"] == "RoleBinding":
        tests.append({"op": "test", "path": "/roleRef", "value": manifest["roleRef"]})
    return tests


def _writes(manifest: Manifest) -> list[Manifest]:
    fields = children.UPDATED_FIELDS[manifest["kind"]]
    return [{"op": "add", "path": f"/{name}", "value": manifest.get(name, empty)} for name, empty in fields.items()]
