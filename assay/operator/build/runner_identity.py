"""The runners' identity in one namespace: ServiceAccount, Role and RoleBinding `assay-runner`.

One per namespace, made once when the namespace's first run is decided and kept as this
operator makes it (`runtime.namespace_identity`), never per run: a run costs no request for
its identity. Its Role allows `patch` on the status subresource of Evaluations, nothing else:

- no `get` or `list`: a runner reads its spec from its own pod (a downward API file), so it
  reads no Evaluation, not another's spec, and no Secret or ConfigMap;
- no write of an Evaluation itself: code in a runner cannot change a spec (image,
  hfTokenSecret) for the operator to run.

Which Evaluation's status a runner may patch, RBAC cannot say for one account shared by the
namespace's runners: the chart's ValidatingAdmissionPolicy (`templates/runner-policy.yaml`)
allows a patch by `assay-runner` only when the pod its token is bound to is a pod of the Job
that Evaluation's `status.jobName` names.

These objects carry the operator's managed-by label and no owner: no one Evaluation's
deletion removes them. An object of one of these names without that label is not the
operator's to change (`runtime.owned`): every run of the namespace fails as InvalidSpec
naming it, and it is left as it is.
"""

from __future__ import annotations

from typing import Any

from assay import spec as spec_module

Manifest = dict[str, Any]

ACCOUNT = "assay-runner"
"""The name of the ServiceAccount, Role and RoleBinding; the chart's admission policy matches it."""
MANAGED_BY = "assay-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"


def _metadata(namespace: str) -> Manifest:
    return {
        "name": ACCOUNT,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/name": ACCOUNT, LABEL_MANAGED_BY: MANAGED_BY},
    }


def service_account(namespace: str, *, pull_secrets: tuple[str, ...] = ()) -> Manifest:
    """The account; `pull_secrets`: the chart's runner.imagePullSecrets (`RunnerSettings.pull_secrets`)."""
    account: Manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(namespace)}
    # Secrets live per namespace: each namespace that runs Evaluations needs its own copy of them.
    if pull_secrets:
        account["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return account


def role(namespace: str) -> Manifest:
    """Progress and results, to the status subresource only; which Evaluation, the admission policy says."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(namespace),
        "rules": [
            {"apiGroups": [spec_module.GROUP], "resources": [f"{spec_module.PLURAL}/status"], "verbs": ["patch"]},
        ],
    }


def role_binding(namespace: str) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
    }


def manifests(namespace: str, *, pull_secrets: tuple[str, ...] = ()) -> list[Manifest]:
    """In the order to make them: the account, its Role, then the binding between them."""
    return [service_account(namespace, pull_secrets=pull_secrets), role(namespace), role_binding(namespace)]
