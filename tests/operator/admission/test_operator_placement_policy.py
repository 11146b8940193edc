"""The admin's placement policy: priority, tolerations, the Kueue queue, and the defaults a
runner pod gets; refused with one sentence, enforced in the spec, filled into the Job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from assay.errors import UserError
from assay.operator.admission import placement_policy, policy
from assay.operator.admission.placement_policy import GPU_TOLERATION, Placement, Toleration
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.spec import parse_spec
from tests.operator.helm_chart import needs_helm, render

BASE: dict[str, Any] = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}
REF = builders.EvaluationRef(name="tiny", namespace="evals", uid="u1", generation=1)
NONE = Placement(runner_requests=(), empty_dir_size_limit="", default_active_deadline_seconds=0)
"""A placement that fills nothing in."""


def _refusal(template: dict[str, Any], placement: Placement = Placement()) -> str:
    with pytest.raises(UserError) as caught:
        policy.check(parse_spec({**BASE, "podTemplate": template}), AdminPolicy(placement=placement))
    message = str(caught.value)
    assert message.count(". ") == 0 and message.endswith("."), message  # one sentence, for status and Events
    return message


def _allowed(template: dict[str, Any], placement: Placement = Placement()) -> None:
    policy.check(parse_spec({**BASE, "podTemplate": template}), AdminPolicy(placement=placement))


def test_a_priority_class_only_from_the_admins_list() -> None:
    message = _refusal({"priorityClassName": "system-cluster-critical"})
    assert (
        message.startswith(
            "spec.podTemplate.priorityClassName 'system-cluster-critical' is not allowed in this "
            "cluster (allowed: none)"
        )
        and "policy.allowedPriorityClasses" in message
    )
    listed = Placement(allowed_priority_classes=("batch-low", "batch-high"))
    _allowed({"priorityClassName": "batch-low"}, listed)
    assert "(allowed: batch-low, batch-high)" in _refusal({"priorityClassName": "critical"}, listed)
    _allowed({})  # no priority asked for: the cluster's default


def test_by_default_only_the_gpu_taint_is_tolerated() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    _allowed({"tolerations": [gpu]})
    _allowed({"tolerations": [{"key": "nvidia.com/gpu", "value": "a100", "effect": "NoSchedule"}]})  # narrower
    message = _refusal(
        {
            "tolerations": [
                gpu,
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            ]
        }
    )
    assert message.startswith(
        "spec.podTemplate.tolerations[1] (node-role.kubernetes.io/control-plane:NoSchedule) is "
        "not allowed in this cluster (allowed: nvidia.com/gpu:NoSchedule)"
    )
    # Wider than the allowed one: every effect (NoExecute too), every key.
    assert "(nvidia.com/gpu with any effect)" in _refusal(
        {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    )
    assert "(every taint)" in _refusal({"tolerations": [{"operator": "Exists"}]})
    assert "(every NoSchedule taint)" in _refusal({"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]})
    assert "(allowed: none)" in _refusal({"tolerations": [gpu]}, Placement(allowed_tolerations=()))


@pytest.mark.parametrize(
    ("allowed", "asked", "covered"),
    [
        (
            Toleration("dedicated", "Equal", "evals", "NoSchedule"),
            Toleration("dedicated", "Equal", "evals", "NoSchedule"),
            True,
        ),
        (
            Toleration("dedicated", "Equal", "evals", "NoSchedule"),
            Toleration("dedicated", "Equal", "other", "NoSchedule"),
            False,
        ),
        (
            Toleration("dedicated", "Equal", "evals", "NoSchedule"),
            Toleration("dedicated", "Exists", "", "NoSchedule"),
            False,
        ),
        (Toleration("dedicated", "Equal", "evals", ""), Toleration("dedicated", "Equal", "evals", "NoExecute"), True),
        (Toleration("dedicated", "Exists", "", "NoExecute"), Toleration("dedicated", "Equal", "x", "NoExecute"), True),
        (
            Toleration("dedicated", "Exists", "", "NoExecute"),
            Toleration("dedicated", "Exists", "", "NoSchedule"),
            False,
        ),
        (Toleration("", "Exists", "", ""), Toleration("", "Exists", "", ""), True),
        (GPU_TOLERATION, Toleration("", "Exists", "", "NoSchedule"), False),
    ],
)
def test_a_toleration_is_allowed_only_when_it_tolerates_no_more(
    allowed: Toleration, asked: Toleration, covered: bool
) -> None:
    assert allowed.covers(asked) is covered


def test_a_required_queue_is_refused_when_missing_unless_the_admin_gives_a_default() -> None:
    required = Placement(require_queue=True)
    message = _refusal({}, required)
    assert (
        message.startswith("spec.podTemplate.labels has no kueue.x-k8s.io/queue-name")
        and "policy.defaultQueue" in message
    )
    _allowed({"labels": {builders.KUEUE_QUEUE_LABEL: "team"}}, required)
    assert "has no kueue" in _refusal({"labels": {builders.KUEUE_QUEUE_LABEL: ""}}, required)
    # A default queue: the spec is put in it, and its Job is created suspended for Kueue to admit.
    defaulted = AdminPolicy(placement=Placement(require_queue=True, default_queue="evals-queue"))
    spec = parse_spec(dict(BASE))
    policy.check(spec, defaulted)
    queued = policy.enforce(spec, defaulted)
    assert queued.pod_template.labels == {builders.KUEUE_QUEUE_LABEL: "evals-queue"} and builders.queued(queued)
    job = builders.job(REF, queued, placement=NONE)
    assert job["metadata"]["labels"][builders.KUEUE_QUEUE_LABEL] == "evals-queue" and job["spec"]["suspend"] is True
    # A queue the spec names is kept.
    own = policy.enforce(
        parse_spec({**BASE, "podTemplate": {"labels": {builders.KUEUE_QUEUE_LABEL: "mine"}}}), defaulted
    )
    assert own.pod_template.labels[builders.KUEUE_QUEUE_LABEL] == "mine"


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def test_runner_pods_get_the_admins_defaults_where_the_spec_leaves_them_unset() -> None:
    placement = Placement(
        runner_requests=(("cpu", "1"), ("memory", "2Gi")),
        runner_limits=(("memory", "8Gi"),),
        empty_dir_size_limit="5Gi",
        default_active_deadline_seconds=3600,
    )
    job = builders.job(REF, parse_spec(dict(BASE)), placement=placement)
    (runner,) = _pod(job)["containers"]
    assert runner["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    scratch = {v["name"]: v["emptyDir"] for v in _pod(job)["volumes"] if "emptyDir" in v}
    assert set(scratch) == {"cache", "output", "tmp", "dshm"}
    assert all(d["sizeLimit"] == "5Gi" for d in scratch.values()) and scratch["dshm"]["medium"] == "Memory"
    client.V1Job.model_validate(job)  # sizeLimit and the rest where the API server reads them

    # What the spec sets is the spec's: its cpu (request and limit), its deadline, its PVCs.
    spec = parse_spec(
        {
            **BASE,
            "resources": {"nodes": 2, "gpusPerNode": 1, "cpu": "8"},
            "activeDeadlineSeconds": 60,
            "cache": {"pvc": "models"},
        }
    )
    job = builders.job(REF, spec, placement=placement)
    for container in [*_pod(job)["initContainers"], *_pod(job)["containers"]]:  # the check container too
        assert container["resources"]["requests"] == {"cpu": "8", "memory": "2Gi"}
        assert container["resources"]["limits"]["cpu"] == "8" and container["resources"]["limits"]["memory"] == "8Gi"
    assert job["spec"]["activeDeadlineSeconds"] == 60
    cache = next(v for v in _pod(job)["volumes"] if v["name"] == "cache")
    assert cache == {"name": "cache", "persistentVolumeClaim": {"claimName": "models"}}

    # Nothing to fill in: the Job is as the spec alone makes it, with the memory limit every runner gets.
    job = builders.job(REF, parse_spec(dict(BASE)), placement=NONE)
    assert _pod(job)["containers"][0]["resources"] == {"limits": {"memory": "16Gi"}}
    assert "activeDeadlineSeconds" not in job["spec"]
    assert all(v["emptyDir"].get("sizeLimit") is None for v in _pod(job)["volumes"] if "emptyDir" in v)


def test_pod_defaults_change_no_spec_hash() -> None:
    """A new default never replaces a running Job: it is no part of what identifies the run."""
    spec = parse_spec(dict(BASE))
    hashes = {
        builders.job(REF, spec, placement=p)["metadata"]["annotations"][builders.ANNOTATION_SPEC_HASH]
        for p in (Placement(), NONE, Placement(default_active_deadline_seconds=5))
    }
    assert hashes == {builders.spec_hash(spec)}


def test_the_job_takes_the_defaults_from_the_operators_policy_env() -> None:
    from assay.operator.settings import from_env

    raw = json.dumps(
        {"runnerResources": {"requests": {"cpu": 2}}, "emptyDirSizeLimit": "1Gi", "defaultActiveDeadlineSeconds": 0}
    )
    job = builders.job(REF, parse_spec(dict(BASE)), runner=from_env({placement_policy.POLICY_ENV: raw}).runner)
    # YAML's `cpu: 2` is the quantity "2"; the memory limit is every runner's default
    assert _pod(job)["containers"][0]["resources"] == {"requests": {"cpu": "2"}, "limits": {"memory": "16Gi"}}
    assert {v["emptyDir"]["sizeLimit"] for v in _pod(job)["volumes"] if "emptyDir" in v} == {"1Gi"}
    assert "activeDeadlineSeconds" not in job["spec"]
    job = builders.job(REF, parse_spec(dict(BASE)), runner=from_env({}).runner)  # no policy: the chart's defaults
    assert _pod(job)["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "16Gi"},
    }
    assert job["spec"]["activeDeadlineSeconds"] == 86400


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ({"allowedPriorityClasses": "high"}, "allowedPriorityClasses must be a list"),
        (
            {"allowedTolerations": [{"key": "gpu", "operator": "In"}]},
            "allowedTolerations[0] needs operator Equal or Exists",
        ),
        (
            {"allowedTolerations": [{"effect": "NoSchedule"}]},
            "allowedTolerations[0] without a key must have operator Exists",
        ),
        ({"allowedTolerations": [{"key": "gpu", "tolerationSeconds": 5}]}, "with only key, operator, value and effect"),
        ({"requireQueue": "yes"}, "requireQueue must be true or false"),
        ({"defaultQueue": 3}, "defaultQueue must be a LocalQueue name"),
        ({"runnerResources": {"requests": {"gpu": 1}}}, "runnerResources.requests must map cpu and memory"),
        (
            {"runnerResources": {"requests": {"memory": "lots"}}},
            "runnerResources.requests.memory must be a Kubernetes quantity",
        ),
        ({"emptyDirSizeLimit": "big"}, "emptyDirSizeLimit must be a Kubernetes quantity"),
        ({"defaultActiveDeadlineSeconds": -1}, "defaultActiveDeadlineSeconds must be a whole number"),
        ({"maxPeerFailureRetries": True}, "maxPeerFailureRetries must be a whole number"),
    ],
)
def test_a_bad_placement_value_is_one_sentence_naming_it(raw: dict[str, Any], words: str) -> None:
    with pytest.raises(UserError) as caught:
        AdminPolicy.from_json(json.dumps(raw))
    assert words in str(caught.value) and str(caught.value).startswith(f"{policy.POLICY_ENV}.")


def test_placement_values_read_from_json() -> None:
    admin = AdminPolicy.from_json(
        json.dumps(
            {
                "allowedPriorityClasses": ["batch-low"],
                "allowedTolerations": [],
                "requireQueue": True,
                "defaultQueue": "q",
                "runnerResources": {"requests": {}, "limits": {"cpu": "4"}},
                "emptyDirSizeLimit": "",
                "defaultActiveDeadlineSeconds": 0,
                "maxPeerFailureRetries": 0,
            }
        )
    )
    assert admin.placement == Placement(
        allowed_priority_classes=("batch-low",),
        allowed_tolerations=(),
        require_queue=True,
        default_queue="q",
        runner_requests=(),
        runner_limits=(("cpu", "4"),),
        empty_dir_size_limit="",
        default_active_deadline_seconds=0,
        max_peer_failure_retries=0,
    )
    assert AdminPolicy.from_json("").placement == Placement()


@needs_helm
def test_the_charts_placement_values_reach_the_operator() -> None:
    def placement(*args: str) -> Placement:
        deployment = next(d for d in render(*args) if d["kind"] == "Deployment")
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        return AdminPolicy.from_json(env[policy.POLICY_ENV]).placement

    assert placement() == Placement()  # the chart's defaults are the code's
    assert placement(
        "--set",
        "policy.allowedPriorityClasses={batch-low}",
        "--set-json",
        'policy.allowedTolerations=[{"key":"dedicated","value":"evals","effect":"NoSchedule"}]',
        "--set",
        "policy.defaultQueue=evals",
        "--set",
        "policy.runnerResources.requests.cpu=2",
        "--set",
        "policy.maxPeerFailureRetries=1",
    ) == Placement(
        allowed_priority_classes=("batch-low",),
        allowed_tolerations=(Toleration("dedicated", "Equal", "evals", "NoSchedule"),),
        default_queue="evals",
        runner_requests=(("cpu", "2"), ("memory", "512Mi")),
        max_peer_failure_retries=1,
    )
