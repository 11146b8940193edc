"""The children of one Evaluation's run, in the order they are made: the runner's identity and
access (ServiceAccount, Role, RoleBinding), its spec ConfigMap, the headless Service of a
multi-node run, its NetworkPolicy, and the Job (`builders` makes each of the others)."""

from __future__ import annotations

from typing import Any

from assay import spec as spec_module
from assay.operator.admission import placement_policy
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.spec import Evaluation

Manifest = builders.Manifest


def service_account(ref: builders.EvaluationRef, *, pull_secrets: tuple[str, ...] = ()) -> Manifest:
    account: Manifest = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": builders.child_metadata(ref, builders.runner_account_name(ref))}
    # Secrets live per namespace: each Evaluation's namespace needs its own copy of them.
    if pull_secrets:
        account["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return account


UPDATED_FIELDS: dict[str, dict[str, Any]] = {
    "ServiceAccount": {"imagePullSecrets": []},
    "Role": {"rules": []},
    "RoleBinding": {"subjects": []},  # its roleRef is immutable, and always its own Role
    "ConfigMap": {"data": {}},
    "NetworkPolicy": {"spec": {}},
}
"""Children brought to what this operator makes them at every decision, when they are this
Evaluation's (`runtime.owned`): kind → the top-level fields written, with the value a
manifest without one stands for. The runner's access (a Role an older operator made wider
is tightened), the run's spec (there again for a Job made again after it was lost) and
its NetworkPolicy. The Job and the headless Service are created once."""
PER_EVALUATION_KINDS = frozenset({"ServiceAccount", "Role", "RoleBinding"})
"""Children made once per Evaluation (the runner's identity and access); the others are one run's."""


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


def network_policy(ref: builders.EvaluationRef, *, job: str, egress: tuple[Manifest, ...] | None = None) -> Manifest:
    """Who may reach the run's pods: the pods of the same Job, on any port, and nobody else.

    A multi-node run's rank 0 serves torch's c10d store (the rendezvous port), which
    unpickles what a client writes, and gloo and NCCL listen on ports they pick: the Job's
    pods need each other on every port, and a pod of another run, another namespace or
    another tenant must reach none. A `from` pod selector without a namespace selector
    matches pods of the policy's own namespace only; the Job label is the operator's on
    each pod (a spec's pod labels cannot set it). Every run gets one, one pod or many: a
    single-node run listens for nobody either, and one rule for all is one to check.
    Egress too where the chart gives the runners' egress rules (`egress`, ASSAY_RUNNER_EGRESS): the
    Job's own pods, and what the admin allows (the API server, DNS, model servers), in every
    namespace, also those the chart cannot list to render a policy of its own."""
    pods = {"matchLabels": {builders.LABEL_JOB: job}}
    spec: Manifest = {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": pods}]}]}
    if egress is not None:
        spec["policyTypes"] = ["Ingress", "Egress"]
        spec["egress"] = [{"to": [{"podSelector": pods}]}, *egress]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": builders.child_metadata(ref, job, **{builders.LABEL_GENERATION: str(ref.generation)}),
        "spec": spec,
    }


def children(ref: builders.EvaluationRef, spec: Evaluation, *, job_name_override: str | None = None,
             runner: RunnerSettings = RunnerSettings(),
             placement: placement_policy.Placement | None = None) -> list[Manifest]:
    """Every child, in the order to create them: the Job last, once its identity, its spec and
    the policy that fences its pods exist; those of `UPDATED_FIELDS` are also brought up to date."""
    name = job_name_override or builders.job_name(ref)
    out = [service_account(ref, pull_secrets=runner.pull_secrets), role(ref, spec), role_binding(ref), builders.spec_config_map(ref, spec, job=name)]
    if spec.resources.nodes > 1:
        out.append(builders.headless_service(ref, job=name))
    out.append(network_policy(ref, job=name, egress=runner.egress))
    out.append(builders.job(ref, spec, name=name, runner=runner, placement=placement))
    return out
