"""An Evaluation's child objects, as plain manifests.

Pure functions from (the Evaluation's identity, its parsed spec) to dicts the API server
accepts, so that what the operator creates can be read and tested without a cluster.
Every child carries an ownerReference to the Evaluation (deleting it deletes them) and a
name derived from the Evaluation's name, its uid (`owner_mark`) and its run (its generation,
and the `evaluations.assay.dev/rerun` token if one is set): a restarted operator re-creates
the same names, gets AlreadyExists (409), and so never starts a duplicate run. An object of
that name that is not this Evaluation's is never changed (`runtime.owned`).

Every runner of a namespace runs as its one ServiceAccount `assay-runner`
(`runner_identity`, made once per namespace), whose Role allows `patch` on the status
subresource of Evaluations and nothing else: no `get` of any object, so no runner reads
another's spec, and code in the runner cannot rewrite its own spec (image, hfTokenSecret) for
the operator to run. Which Evaluation a runner may write is the chart's admission policy's
rule: the one whose `status.jobName` is the Job of the pod its token is bound to. Every
runner Job is Indexed, so its pods are named `<job>-<index>-<5 random>`, which that policy
matches exactly.

The spec reaches the runner as a file: the pod template carries it as JSON in the annotation
`assay.dev/spec`, which a downward API volume writes as the file the runner reads
(ASSAY_EVALUATION_FILE). Not an environment variable (Linux refuses one over 128 KiB, so a
long `samples` list kept the container from starting), and no ConfigMap per run (one more
request per run, and a read the runner would have to be allowed). Kubernetes bounds a pod's
annotations at 256 KiB; admission refuses a larger spec (`admission.spec_size`). The
operator's caches drop the annotation from the Jobs and pods they keep (`runtime.watched`).

Names. An Evaluation's name is a DNS-1123 subdomain of up to 253 characters (dots and
leading digits allowed); its children need less: the Job doubles as the headless Service's
name (a DNS-1035 label: no dots, a letter first, at most 63) and gives Indexed pods the
hostname `<job>-<index>` (a DNS label), and label values hold at most 63 characters. A
name that already fits is used as it is; any other gets a stable 6-hex hash of the full
name, so that `a.b` and `a-b`, or two long names with one prefix, never share a child.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from assay import spec as spec_module
from assay.operator.admission import placement_policy, spec_size, task_sources
from assay.operator.build import containers, failure_policy, names, runner_identity
from assay.operator.build.names import child_name, digest, label_value
from assay.operator.build.runner_images import runner_image
from assay.operator.build.runner_settings import RunnerSettings
from assay.spec import Evaluation

Manifest = dict[str, Any]

MANAGED_BY = runner_identity.MANAGED_BY
LABEL_MANAGED_BY = runner_identity.LABEL_MANAGED_BY
LABEL_EVALUATION = "assay.dev/evaluation"
LABEL_GENERATION = "assay.dev/generation"
LABEL_JOB = "assay.dev/job"
ANNOTATION_SPEC_HASH = "assay.dev/spec-hash"
ANNOTATION_SPEC = spec_size.SPEC_ANNOTATION
"""On a runner pod (its Job's template): the spec as JSON, which the runner reads as a file."""
ANNOTATION_RERUN = "evaluations.assay.dev/rerun"
"""On an Evaluation: a token whose change asks for a fresh run of the same spec (GitOps users
bump it in Git). On a Job: the token the Job was made for. Outside the `assay.dev/` prefix,
which kopf's own annotations use and strips from the changes it compares."""
KUEUE_QUEUE_LABEL = placement_policy.QUEUE_LABEL
RDZV_PORT = 29400
RUNNER_CONTAINER = "runner"
CHECK_CONTAINER = "check"

ANNOTATION_EVALUATION = "assay.dev/evaluation-name"
"""The Evaluation's full name on its Jobs and pods (the label holds at most 63 characters)."""


@dataclasses.dataclass(frozen=True)
class EvaluationRef:
    """Who the children belong to: the Evaluation's identity at one generation."""

    name: str
    namespace: str
    uid: str
    generation: int
    rerun: str | None = None
    """The rerun token: with the generation, it tells one run from another."""

    @classmethod
    def from_body(cls, body: Any) -> EvaluationRef:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            generation=int(meta.get("generation", 1)),
            rerun=rerun_token(body),
        )


def evaluation_name(obj: Any) -> str | None:
    """The Evaluation a Job or pod belongs to: its annotation, else the Job's controller, else the label."""
    meta = obj.get("metadata") or {}
    annotated = (meta.get("annotations") or {}).get(ANNOTATION_EVALUATION)
    if annotated:
        return str(annotated)
    for owner in meta.get("ownerReferences") or ():
        if owner.get("kind") == spec_module.KIND and owner.get("apiVersion", "").startswith(f"{spec_module.GROUP}/"):
            return str(owner["name"])
    label = (meta.get("labels") or {}).get(LABEL_EVALUATION)
    return str(label) if label else None


def rerun_token(body: Any) -> str | None:
    """The `evaluations.assay.dev/rerun` annotation, else the token the last run was accepted with.

    Removing the annotation so asks for nothing: no re-run, and no return to the first
    run's un-suffixed names, whose Job and output directory a fresh run would overwrite.
    """
    token = ((body.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RERUN) or (
        body.get("status") or {}
    ).get("rerunToken")
    return str(token) if token else None


def owner_mark(ref: EvaluationRef) -> str:
    """What ends every child's name: from the Evaluation's uid, which no tenant chooses (`names.owner_mark`)."""
    return names.owner_mark(ref.uid)


def run_suffix(ref: EvaluationRef) -> str:
    """`g<generation>`, and `-r<6 hex>` of the token for a re-run: a token is any string, names are DNS labels."""
    suffix = f"g{ref.generation}"
    return suffix if ref.rerun is None else f"{suffix}-r{digest(ref.rerun)}"


def job_name(ref: EvaluationRef) -> str:
    """The Job (and headless Service, and NetworkPolicy) of one run: `<name>-g<generation>-<mark>`,
    or `<name>-g<generation>-r<hash>-<mark>` for a re-run."""
    return child_name(ref.name, f"{run_suffix(ref)}-{owner_mark(ref)}")


def spec_hash(spec: Evaluation) -> str:
    """Identifies a run: the spec without `suspend`, which pauses a run but is the same run."""
    data = spec.to_dict()
    data.pop("suspend", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def output_dir(ref: EvaluationRef, spec: Evaluation) -> str:
    # Each run its own directory by default: a re-run keeps the earlier run's results.
    return f"{containers.OUTPUT_MOUNT}/{spec.output.path or f'{ref.name}/{run_suffix(ref)}'}"


def response_cache(ref: EvaluationRef, spec: Evaluation) -> str:
    """The sqlite response cache of one run (`<prefix>_rank<r>.db` per rank), on the output volume.

    A pod that is deleted, evicted or OOMKilled is replaced by one that finds the answers
    already computed there and sends the model only the rest: the path is in the Job's pod
    template, so every pod of one run gets the same one. Keyed by the run, not just the
    output directory: the cache's keys are the requests alone (lm-eval's), so another
    Evaluation, spec or re-run sharing a fixed `output.path` must not be answered from this
    run's model. `<uid>-<spec hash>/<run suffix>`: the uid tells apart two Evaluations, and
    one deleted and re-created under its name (GitOps replace) that restarts at generation 1;
    the spec hash guards the rest (a restored object that kept its uid and generation but
    not its spec). The runner also refuses a cache written for another model
    (`assay.runner.models.caching`). Both parts are short and path-safe (49 and under 30 characters).
    """
    uid = (
        ref.uid
        if 0 < len(ref.uid) <= 36 and all(c in _UID_CHARS for c in ref.uid)
        else hashlib.sha256(ref.uid.encode()).hexdigest()[:16]
    )
    return f"{output_dir(ref, spec)}/.assay-cache/{uid}-{spec_hash(spec)[:12]}/{run_suffix(ref)}/responses"


_UID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz-")  # an API server's uid is a lowercase UUID


def owner_reference(ref: EvaluationRef) -> Manifest:
    return {
        "apiVersion": spec_module.API_VERSION,
        "kind": spec_module.KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels(ref: EvaluationRef) -> dict[str, str]:
    value = label_value(ref.name)
    return {
        "app.kubernetes.io/name": "assay-runner",
        "app.kubernetes.io/instance": value,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_EVALUATION: value,
    }


def child_metadata(ref: EvaluationRef, name: str, **extra_labels: str) -> Manifest:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": {**labels(ref), **extra_labels},
        "ownerReferences": [owner_reference(ref)],
    }


def headless_service(ref: EvaluationRef, *, job: str) -> Manifest:
    """DNS for the pods of an Indexed Job, so that every node finds rank 0's rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(ref, job, **{LABEL_GENERATION: str(ref.generation)}),
        "spec": {
            "clusterIP": "None",
            "selector": {LABEL_JOB: job},
            # Rendezvous happens before any pod is Ready.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rdzv", "port": RDZV_PORT, "targetPort": RDZV_PORT, "protocol": "TCP"}],
        },
    }


def uses_torchrun(spec: Evaluation) -> bool:
    if spec.endpoint is not None:
        return False  # one pod, no GPUs (spec parsing allows nodes: 1 only)
    return spec.resources.nodes > 1 or spec.resources.gpus_per_node > 1


def queued(spec: Evaluation) -> bool:
    """Whether Kueue manages the run's Job (a queue label): then only Kueue flips its `suspend`."""
    return KUEUE_QUEUE_LABEL in spec.pod_template.labels


def runner_command(spec: Evaluation, *, job: str) -> list[str]:
    resources = spec.resources
    if not uses_torchrun(spec):
        return ["python", "-m", "assay.runner"]
    nproc = max(resources.gpus_per_node, 1)
    if resources.nodes == 1:
        rendezvous = ["--standalone"]
    else:
        rendezvous = [
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={job}-0.{job}:{RDZV_PORT}",
            f"--rdzv_id={job}",
        ]
    # torchrun's launcher, keeping a worker's exit code for the podFailurePolicy (torchrun says 1).
    return [
        "python",
        "-m",
        "assay.runner.launch",
        f"--nnodes={resources.nodes}",
        f"--nproc_per_node={nproc}",
        *rendezvous,
        "--max_restarts=0",
        "-m",
        "assay.runner",
    ]


def runner_env(
    ref: EvaluationRef, spec: Evaluation, *, allow_task_code: bool = False, baseline: Manifest | None = None
) -> list[Manifest]:
    """The runner container's environment; `baseline` is what the baseline Evaluation the spec names
    showed when the run was decided (`baseline_view.view`), which the runner may not read itself."""
    env: list[Manifest] = [
        {"name": spec_module.ENV_SPEC_FILE, "value": containers.SPEC_FILE},
        {"name": spec_module.ENV_NAME, "value": ref.name},
        {"name": spec_module.ENV_NAMESPACE, "value": ref.namespace},
        {"name": spec_module.ENV_GENERATION, "value": str(ref.generation)},
        {"name": spec_module.ENV_OUTPUT_DIR, "value": output_dir(ref, spec)},
        {"name": spec_module.ENV_OUTPUT_ROOT, "value": containers.OUTPUT_MOUNT},
        {"name": spec_module.ENV_USE_CACHE, "value": response_cache(ref, spec)},
        {"name": spec_module.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "HF_HOME", "value": f"{containers.CACHE_MOUNT}/huggingface"},
        # The root filesystem is read-only; libraries that cache under $HOME use /tmp.
        {"name": "HOME", "value": "/tmp"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    if spec.cache.datasets_dir:
        env.append({"name": "HF_DATASETS_CACHE", "value": f"{containers.CACHE_MOUNT}/{spec.cache.datasets_dir}"})
    if spec.cache.local_datasets_dir:
        env.append({"name": "ASSAY_DATASETS_DIR", "value": f"{containers.CACHE_MOUNT}/{spec.cache.local_datasets_dir}"})
    if spec.cache.offline:
        env += [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "HF_DATASETS_OFFLINE", "value": "1"}]
    if spec.hf_token_secret:
        secret = {"name": spec.hf_token_secret.name, "key": spec.hf_token_secret.key}
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": secret}})
    if spec.endpoint is not None and spec.endpoint.api_key_secret is not None:
        key = spec.endpoint.api_key_secret
        env.append({"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": key.name, "key": key.key}}})
        # error messages name the Secret, never the key
        env.append({"name": "ASSAY_API_KEY_SECRET", "value": f"{key.name}/{key.key}"})
    if spec.baseline is not None and spec.baseline.evaluation is not None:
        view = json.dumps(baseline, sort_keys=True, separators=(",", ":")) if baseline is not None else ""
        env.append({"name": spec_module.ENV_BASELINE_EVALUATION, "value": view})
    if spec.task_sources:
        env.append({"name": task_sources.ENV_INCLUDE_PATH, "value": task_sources.MOUNT})
        # The runner enforces it too: a ConfigMap edited after the operator's check reaches a retry's pod.
        code = "allowed" if allow_task_code else "refused"
        env.append({"name": spec_module.ENV_TASK_CODE, "value": code})
    return env


def job(
    ref: EvaluationRef,
    spec: Evaluation,
    *,
    name: str | None = None,
    runner: RunnerSettings = RunnerSettings(),
    placement: placement_policy.Placement | None = None,
    baseline: Manifest | None = None,
) -> Manifest:
    """The run's Job with the operator's `runner` settings; `placement` (by default its policy's) fills in the rest."""
    name = name or job_name(ref)
    image = spec.image or runner_image(spec.model, runner)
    env = runner_env(ref, spec, allow_task_code=runner.policy.allow_task_code, baseline=baseline)
    env.append({"name": spec_module.ENV_JOB_NAME, "value": name})  # is my run still current?
    template = spec.pod_template
    pod_labels = {**template.labels, **labels(ref), LABEL_JOB: name, LABEL_GENERATION: str(ref.generation)}
    job_labels = {LABEL_GENERATION: str(ref.generation)}
    if KUEUE_QUEUE_LABEL in template.labels:
        job_labels[KUEUE_QUEUE_LABEL] = template.labels[KUEUE_QUEUE_LABEL]

    pod_spec = _pod_spec(spec, name=name, image=image, env=env, runner=runner)

    pod_metadata: Manifest = {
        "labels": pod_labels,
        "annotations": {**template.annotations, ANNOTATION_EVALUATION: ref.name, ANNOTATION_SPEC: spec.to_json()},
    }

    job_spec: Manifest = {
        "backoffLimit": spec.backoff_limit,
        "completions": spec.resources.nodes,
        "parallelism": spec.resources.nodes,
        # Pods `<job>-<index>-<5 random>`, one or many: what the chart's runner policy matches exactly.
        "completionMode": "Indexed",
        # Kueue admits a queued Job by unsuspending it: it must be created suspended.
        "suspend": spec.suspend or queued(spec),
        "podFailurePolicy": failure_policy.pod_failure_policy(),
        "template": {"metadata": pod_metadata, "spec": pod_spec},
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds

    metadata = child_metadata(ref, name, **job_labels)
    metadata["annotations"] = _job_annotations(ref, spec)
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
    placement_policy.fill_runner_pod(manifest, placement or runner.policy.placement)
    containers.limit_memory(pod_spec, runner.default_memory)  # after the admin's policy, whose limits come first
    return manifest


def _pod_spec(spec: Evaluation, *, name: str, image: str, env: list[Manifest], runner: RunnerSettings) -> Manifest:
    """The runner pod: its container (and a multi-rank run's check before it) as the namespace's runner."""
    template = spec.pod_template
    pod_spec: Manifest = {
        "restartPolicy": "Never",
        "serviceAccountName": runner_identity.ACCOUNT,
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": containers.pod_security(),
        "containers": [
            containers.container(
                RUNNER_CONTAINER,
                runner_command(spec, job=name),
                image=image,
                env=env,
                resources=containers.resources(spec, gpus=runner.gpu_resource),
                spec=spec,
            ),
        ],
        "volumes": containers.volumes(spec, spec_annotation=ANNOTATION_SPEC),
    }
    if uses_torchrun(spec):
        pod_spec["initContainers"] = [_check_container(spec, image=image, env=env)]
    if spec.resources.nodes > 1:
        pod_spec["subdomain"] = name
    pod_spec.update(containers.placement(template))
    return pod_spec


def _check_container(spec: Evaluation, *, image: str, env: list[Manifest]) -> Manifest:
    """Before the ranks wait for each other: a spec that cannot run fails here with 78."""
    check = ["python", "-m", "assay.runner", "--check"]
    return containers.container(
        CHECK_CONTAINER, check, image=image, env=env, resources=containers.resources(spec, gpus=None), spec=spec
    )


def _job_annotations(ref: EvaluationRef, spec: Evaluation) -> dict[str, str]:
    """What `reconcile` tells the current run's Job by: its spec hash and its rerun token."""
    annotations = {ANNOTATION_SPEC_HASH: spec_hash(spec), ANNOTATION_EVALUATION: ref.name}
    if ref.rerun is not None:
        annotations[ANNOTATION_RERUN] = ref.rerun
    return annotations
