"""The Evaluation spec (assay.dev/v1alpha1) as one typed, frozen record.

The same record is read by three programs: the operator (from the custom resource), the
runner pod (from a file its environment names) and `assay apply --local` (from a manifest file). It
sits below both `assay.runner` and `assay.operator` so that all three parse a spec the
same way and reject the same mistakes with the same sentence. The cross-field rules here
mirror the CEL rules of deploy/crds/evaluations.assay.dev.yaml, so a manifest that
`--local` accepts is one the API server accepts too.

Runner-pod contract
-------------------
The operator starts `python -m assay.runner` (one process) or
`torchrun ... -m assay.runner` (several) in a Job, and tells it everything through
its environment:

``ASSAY_EVALUATION_FILE``
    A file holding the spec as JSON (the CR's `spec`, as `Evaluation.to_json()` writes
    it): in a pod, the run's own ConfigMap (`<job>-spec`, owned by the Evaluation,
    deleted with a superseded run's Job) mounted read-only at /etc/assay/spec; under
    `assay apply --local`, a temporary file. ``--spec FILE`` (JSON or YAML, either the spec
    itself or a whole Evaluation manifest) takes precedence. The spec is never in the
    environment itself: Linux refuses a variable over 128 KiB (a long `samples` list) and
    the container would not start, and a Job's pod template, copied into every pod, would
    carry it through etcd and every watch of Jobs and pods.
``ASSAY_EVALUATION_NAME`` / ``ASSAY_EVALUATION_NAMESPACE``
    The Evaluation to report to; with both set (and in-cluster credentials) the runner's
    rank 0 patches `status.progress` and `status.results` through
    `assay.runner.results.status_sink.sink_from_env()`.
``ASSAY_EVALUATION_GENERATION`` / ``ASSAY_JOB_NAME``
    The run's identity: the sink's writes are JSON patches that first test
    `status.jobName` (the generation when no Job name is known), so a superseded run's
    late report never lands in a newer run's status.
``ASSAY_OUTPUT_DIR``
    Where full results JSON (and samples JSONL with `logSamples`) go: the output volume.
``ASSAY_POD_NAME``
    The pod's own name (downward API), for logs and output file names.
``ASSAY_INCLUDE_PATH`` / ``ASSAY_TASK_CODE``
    The tenant's task sources (spec.taskSources) as a folder, and whether their
    `!function` helpers may run (`allowed`, from the admin's policy; otherwise `refused`).
    Their names may not reuse the task library's.
``ASSAY_STATUS_FILE``
    Optional; `assay apply --local` sets it so the runner writes its condensed status
    as JSON to that file instead of the API server.

Exit codes: 0 on success; ``CONFIG_ERROR_EXIT_CODE`` (78, sysexits' EX_CONFIG) when the
spec cannot run as written (an `assay.errors.UserError`: unknown task, bad model
argument, missing dataset in offline mode). The Job's podFailurePolicy fails the Job at
once on 78 instead of retrying. ``PEER_FAILED_EXIT_CODE`` (75) when this rank stopped
because another rank reported its own failure: the podFailurePolicy ignores it (the
failing rank's exit counts). ``RESULTS_NOT_RECORDED_EXIT_CODE`` (74, sysexits' EX_IOERR)
when the evaluation finished but its last status write (the scores) did not land: refused
(403, 404, 422) or the API server unreachable past the sink's patience; the podFailurePolicy
fails the Job at once and the operator shows reason ResultsNotRecorded. Rank 0 reports the
scores to status first and writes the files after (saying where in its log), so a full
output volume does not lose scores already in status: it only sets the condition
OutputWritten to False. With several processes the runner starts under
`python -m assay.runner.launch` (torchrun, keeping a worker's exit code where torchrun
would say 1), after `python -m assay.runner --check` as an init container, which parses
the spec, resolves tasks and the model, and exits 78 on a UserError without loading the
model or meeting the other ranks.
"""

from assay.spec.model import (
    API_MODELS,
    API_VERSION,
    CONFIG_ERROR_EXIT_CODE,
    ENDPOINT_CA_MOUNT,
    ENV_BASELINE_EVALUATION,
    ENV_GENERATION,
    ENV_JOB_NAME,
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_OUTPUT_DIR,
    ENV_OUTPUT_ROOT,
    ENV_POD_NAME,
    ENV_PROGRESS_INTERVAL,
    ENV_SPEC_FILE,
    ENV_STATUS_FILE,
    ENV_TASK_CODE,
    ENV_USE_CACHE,
    GROUP,
    JSON,
    KIND,
    PEER_FAILED_EXIT_CODE,
    PLURAL,
    QUANTITY_RE,
    RESULTS_NOT_RECORDED_EXIT_CODE,
    SEED_STRING_RE,
    VERSION,
    Cache,
    ConfigMapKey,
    Endpoint,
    Evaluation,
    Output,
    PodTemplate,
    Resources,
    SecretKey,
    Seed,
)
from assay.spec.parsing import _TOP_FIELDS, SpecReading, parse_manifest, parse_spec, read_manifest, read_spec

__all__ = [
    "API_VERSION",
    "CONFIG_ERROR_EXIT_CODE",
    "PEER_FAILED_EXIT_CODE",
    "RESULTS_NOT_RECORDED_EXIT_CODE",
    "ENV_BASELINE_EVALUATION",
    "ENV_GENERATION",
    "ENV_JOB_NAME",
    "ENV_NAME",
    "ENV_NAMESPACE",
    "ENV_OUTPUT_DIR",
    "ENV_OUTPUT_ROOT",
    "ENV_POD_NAME",
    "ENV_PROGRESS_INTERVAL",
    "ENV_SPEC_FILE",
    "ENV_STATUS_FILE",
    "ENV_TASK_CODE",
    "ENV_USE_CACHE",
    "GROUP",
    "JSON",
    "KIND",
    "PLURAL",
    "QUANTITY_RE",
    "SEED_STRING_RE",
    "VERSION",
    "Cache",
    "Evaluation",
    "Output",
    "PodTemplate",
    "Resources",
    "SecretKey",
    "Seed",
    "API_MODELS",
    "ENDPOINT_CA_MOUNT",
    "ConfigMapKey",
    "Endpoint",
    "_TOP_FIELDS",
    "parse_manifest",
    "parse_spec",
    "read_manifest",
    "read_spec",
    "SpecReading",
]
