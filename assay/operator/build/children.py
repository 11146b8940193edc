"""The children of one Evaluation's run, in the order they are made: the runner's identity and
access (ServiceAccount, Role, RoleBinding), its spec ConfigMap, the headless Service of a
multi-node run, and the Job (`builders` makes each of the others)."""

from __future__ import annotations

import os

from assay import spec as spec_module
from assay.operator.admission import placement_policy
from assay.operator.build import builders
from assay.spec import Evaluation

Manifest = builders.Manifest


def service_account(ref: builders.EvaluationRef) -> Manifest:
    account: Manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": builders.child_metadata(ref, builders.runner_account_name(ref))}
    # Secrets live per namespace: each Evaluation's namespace needs its own copy of them.
    secrets = [name.strip() for name in os.environ.get(builders.PULL_SECRETS_ENV, "").split(",") if name.strip()]
    if secrets:
        account["imagePullSecrets"] = [{"name": name} for name in secrets]
    return account


APPLIED_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding", "ConfigMap"})
"""Children applied (`kube.apply`) at every decision, to what this operator makes them: the runner's access, and
the run's spec ConfigMap; the others are created once."""


def role(ref: builders.EvaluationRef, spec: Evaluation | None = None) -> Manifest:
    """The runner's access: its own Evaluation, and reading the one its spec names as baseline."""
    readable = [ref.name]
    if spec is not None and spec.baseline is not None and spec.baseline.evaluation not in (None, ref.name):
        # Its status says whether it succeeded and where its results are; the spec is read
        # for its output volume, which must be this run's.
        readable.append(spec.baseline.evaluation)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": builders.child_metadata(ref, builders.runner_account_name(ref)),
        "rules": [
            # Reading its Evaluation tells the runner whether its run was superseded.
            {"apiGroups": [spec_module.GROUP], "resources": [spec_module.PLURAL], "resourceNames": readable,
             "verbs": ["get"]},
            # Progress and results; a spec patch (another image, another Secret) stays forbidden.
            {"apiGroups": [spec_module.GROUP], "resources": [f"{spec_module.PLURAL}/status"],
             "resourceNames": [ref.name], "verbs": ["patch"]},
        ],
    }


def role_binding(ref: builders.EvaluationRef) -> Manifest:
    name = builders.runner_account_name(ref)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": builders.child_metadata(ref, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }


def children(ref: builders.EvaluationRef, spec: Evaluation, *, job_name_override: str | None = None,
             default_image: str | None = None, placement: placement_policy.Placement | None = None) -> list[Manifest]:
    """Every child, in the order to create them (the Job last, once its identity and its spec exist);
    those of `APPLIED_KINDS` are applied rather than created."""
    name = job_name_override or builders.job_name(ref)
    out = [service_account(ref), role(ref, spec), role_binding(ref), builders.spec_config_map(ref, spec, job=name)]
    if spec.resources.nodes > 1:
        out.append(builders.headless_service(ref, job=name))
    out.append(builders.job(ref, spec, name=name, default_image=default_image, placement=placement))
    return out
