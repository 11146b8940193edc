"""What to do about an Evaluation's state, by the reason the operator gave it.

The operator's messages say what happened and why (`decide.diagnosis`, `decide.conditions`:
"The runner ... was OOMKilled: it needed more than its memory limit of 1Gi"); this adds the
next step a user takes, which the status has no field for. `{name}` is the Evaluation's
name, so the step can be a command to paste.
"""

from __future__ import annotations

from assay.operator.build import builders
from assay.operator.decide import conditions, diagnosis, outcome, pod_start, regression

_RERUN = f"apply the fixed spec, or set the annotation {builders.ANNOTATION_RERUN} to run it again as it is"
_READ_LOG = "read the runner's log (`assay logs {name}`) for the error"

BY_REASON = {
    # The run's phase.
    "InvalidSpec": "Fix the spec as the message says and apply it again.",
    "SpecValid": "Nothing: the spec was accepted and its Job created.",
    conditions.PODS_PENDING: "Nothing yet; if it lasts, read the events below (scheduling, image pulls, volumes).",
    "PodsRunning": "Nothing: it is running; follow it with `assay logs {name} -f`.",
    "JobComplete": "Nothing: the scores are in status; print them with `assay results {name}`.",
    "Suspended": "It starts once Kueue admits it from its queue, or once spec.suspend is false.",
    "Terminating": "Wait: the Job is ending its pods; the reason of the failure follows.",
    "BackoffLimitExceeded": f"Every attempt failed: {_READ_LOG}, then {_RERUN}.",
    "DeadlineExceeded": f"Raise spec.activeDeadlineSeconds or evaluate fewer documents (spec.limit), then {_RERUN}.",
    "PodFailurePolicy": f"The runner stopped on a configuration error, which retries cannot fix: {_READ_LOG}.",
    "MaxFailedIndexesExceeded": f"Too many ranks failed: read them all (`assay logs {{name}} --all-ranks`), then {_RERUN}.",
    outcome.RESULTS_NOT_RECORDED: "The runner could not write its scores to status: read `assay logs {name}` for the API "
    "server's answer (RBAC, an admission webhook, the API server away).",
    # Problems the operator read from the pods and Events (`decide.diagnosis`).
    diagnosis.IMAGE_PULL_BACKOFF: "Check the image name and tag, and that the nodes may pull it (imagePullSecrets, "
    "registry access).",
    diagnosis.IMAGE_PULL_FAILED: f"Fix spec.image (or the operator's runner image) or the registry access, then {_RERUN}.",
    diagnosis.INVALID_IMAGE_NAME: "Fix spec.image: it is not a valid image reference.",
    diagnosis.UNSCHEDULABLE: "Ask for less (spec.resources) or for nodes that fit: check GPUs, memory, nodeSelector and "
    "tolerations in spec.podTemplate.",
    diagnosis.FAILED_CREATE: "A ResourceQuota or LimitRange of the namespace forbade the pod: lower spec.resources or "
    "ask for more quota.",
    diagnosis.CRASH_LOOP_BACKOFF: f"The runner keeps crashing: {_READ_LOG}.",
    diagnosis.CONTAINER_CONFIG_ERROR: "A Secret or ConfigMap the pod needs is missing or lacks a key (spec.hfTokenSecret, "
    "spec.endpoint.apiKeySecret): create it.",
    diagnosis.CONTAINER_CREATE_ERROR: "The container runtime could not start the runner: read the events below.",
    diagnosis.OOM_KILLED: f"Give the runner more memory (spec.resources.memory) or smaller batches (spec.batchSize), then {_RERUN}.",
    pod_start.POD_REJECTED: f"The node refused the pod before the runner ran (often its labels changed while the pod "
    f"was being scheduled): {_RERUN}; spec.backoffLimit of 1 or more lets the Job retry it.",
    diagnosis.PEER_FAILURES_EXCEEDED: "One rank keeps failing and stopping the others: find it with "
    "`assay logs {name} --all-ranks`.",
    pod_start.START_ERROR: "The runner's command could not start in its image: check spec.image.",
    pod_start.FAILED_MOUNT: "A volume could not be mounted: check that the claims in spec.cache and spec.output exist and bind.",
    pod_start.FAILED_ATTACH_VOLUME: "A volume could not be attached to the node: read the events below.",
}

BY_REGRESSION_REASON = {
    regression.REGRESSED: "Compare the metrics below with the baseline's; `assay compare` on the two output folders "
    "shows every document.",
    regression.INCONCLUSIVE: "Evaluate more documents (a larger spec.limit, or none) so the comparison can tell.",
    regression.BASELINE_UNAVAILABLE: "Make sure the baseline Evaluation succeeded and wrote its files to the same "
    "output volume.",
    regression.RUN_FAILED: "Fix the run first: nothing was compared.",
    regression.NO_REGRESSION: "Nothing: no metric is worse than the gate allows.",
}


def next_step(reason: str, *, name: str) -> str | None:
    """What to do for the phase's reason; None when there is no advice for it."""
    text = BY_REASON.get(reason)
    return text.replace("{name}", name) if text else None


def regression_step(reason: str) -> str | None:
    return BY_REGRESSION_REASON.get(reason)
