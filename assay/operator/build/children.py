"""The children of one Evaluation's run, in the order they are made: the headless Service of a
multi-node run, its NetworkPolicy, and the Job (`builders` makes each of the others).

A run has no identity or spec object of its own: its runner runs as the namespace's
`assay-runner` (`runner_identity`, made once per namespace) and reads its spec from its own
pod's annotation. A run so costs the API server its NetworkPolicy and its Job (and a
multi-node run its headless Service)."""

from __future__ import annotations

from typing import Any

from assay.operator.admission import placement_policy
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.spec import Evaluation

Manifest = builders.Manifest


UPDATED_FIELDS: dict[str, dict[str, Any]] = {
    "ServiceAccount": {"imagePullSecrets": []},
    "Role": {"rules": []},
    "RoleBinding": {"subjects": []},  # its roleRef is immutable, and tested to be the runners' Role
    "NetworkPolicy": {"spec": {}},
}
"""Objects brought to what this operator makes them whenever they are ensured, when they are
its own (`runtime.owned`): kind → the top-level fields written, with the value a manifest
without one stands for. The namespace's runner identity (a Role made wider by hand or by an
older operator is tightened) and a run's NetworkPolicy. The Job and the headless Service
are created once."""


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


def children(
    ref: builders.EvaluationRef,
    spec: Evaluation,
    *,
    job_name_override: str | None = None,
    runner: RunnerSettings = RunnerSettings(),
    placement: placement_policy.Placement | None = None,
    baseline: Manifest | None = None,
) -> list[Manifest]:
    """Every child, in the order to create them: the Job last, once the policy that fences its
    pods exists; those of `UPDATED_FIELDS` are also brought up to date. `baseline`: what the
    baseline Evaluation the spec names shows now (`baseline_view.view`)."""
    name = job_name_override or builders.job_name(ref)
    out: list[Manifest] = []
    if spec.resources.nodes > 1:
        out.append(builders.headless_service(ref, job=name))
    out.append(network_policy(ref, job=name, egress=runner.egress))
    out.append(builders.job(ref, spec, name=name, runner=runner, placement=placement, baseline=baseline))
    return out
