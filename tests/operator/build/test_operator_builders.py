"""Child manifests of an Evaluation, checked against the Kubernetes API's own models.

`kubernetes.client` models are generated from the API's OpenAPI spec and forbid unknown
fields, so `model_validate` catches a misspelt or misplaced field as the server would.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes import client

from assay.errors import UserError
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders, names, runner_identity, runner_settings
from assay.operator.build import children as run_children
from assay.operator.build.runner_settings import RunnerSettings
from assay.spec import CONFIG_ERROR_EXIT_CODE, parse_spec

REF = builders.EvaluationRef(name="pythia-core", namespace="evals", uid="0b5c-uid", generation=3)
MARK = names.owner_mark("0b5c-uid")
JOB = f"pythia-core-g3-{MARK}"
ACCOUNT = "assay-runner"
MODELS = {
    "ServiceAccount": client.V1ServiceAccount,
    "Role": client.V1Role,
    "RoleBinding": client.V1RoleBinding,
    "Service": client.V1Service,
    "ConfigMap": client.V1ConfigMap,
    "Job": client.V1Job,
    "NetworkPolicy": client.V1NetworkPolicy,
}


def _spec(**fields: Any):
    return parse_spec(
        {"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"], **fields}
    )


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("nodes,gpus", [(1, 0), (1, 1), (1, 4), (3, 8)])
def test_children_are_valid_api_objects_owned_by_the_evaluation(nodes: int, gpus: int) -> None:
    children = run_children.children(REF, _spec(resources={"nodes": nodes, "gpusPerNode": gpus}))
    kinds = [c["kind"] for c in children]
    # No identity or spec object per run: the namespace's runner identity, the spec in the pod.
    assert kinds == (["Service"] if nodes > 1 else []) + ["NetworkPolicy", "Job"]
    for child in children:
        MODELS[child["kind"]].model_validate(child)
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "name": "pythia-core",
            "uid": "0b5c-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert child["metadata"]["namespace"] == "evals"
        assert child["metadata"]["labels"][builders.LABEL_EVALUATION] == "pythia-core"


def test_names_are_deterministic_per_generation_and_fit_dns_labels() -> None:
    assert builders.job_name(REF) == JOB
    assert re.fullmatch(r"[0-9a-f]{5}", MARK)
    assert run_children.children(REF, _spec()) == run_children.children(REF, _spec())
    long = builders.EvaluationRef(name="x" * 250, namespace="n", uid="u", generation=12345)
    name = builders.job_name(long)
    assert len(name) <= 52 and name.endswith(f"-g12345-{names.owner_mark('u')}")
    assert builders.job_name(long) != builders.job_name(builders.EvaluationRef("x" * 249 + "y", "n", "u", 12345))


def test_the_namespaces_runner_identity_may_only_patch_evaluation_status() -> None:
    """One account for every runner of a namespace: no `get` of anything (its spec is in its pod),
    no write of an Evaluation itself (the runner cannot rewrite its spec: image, hfTokenSecret)."""
    account, role, binding = runner_identity.manifests("evals")
    for manifest in (account, role, binding):
        MODELS[manifest["kind"]].model_validate(manifest)
        meta = manifest["metadata"]
        assert meta["name"] == ACCOUNT and meta["namespace"] == "evals" and "ownerReferences" not in meta
        assert meta["labels"][builders.LABEL_MANAGED_BY] == builders.MANAGED_BY
    assert role["rules"] == [{"apiGroups": ["assay.dev"], "resources": ["evaluations/status"], "verbs": ["patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": "evals"}]
    assert "imagePullSecrets" not in account


def test_the_runner_account_pulls_with_the_charts_secrets() -> None:
    secrets = runner_settings.from_env(
        {runner_settings.PULL_SECRETS_ENV: "regcred, other ,"}, policy=AdminPolicy()
    ).pull_secrets
    account = runner_identity.service_account("evals", pull_secrets=secrets)
    assert account["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]


def test_single_process_job() -> None:
    job = builders.job(
        REF,
        _spec(resources={"gpusPerNode": 1, "cpu": "4", "memory": "16Gi"}, backoffLimit=2, activeDeadlineSeconds=600),
    )
    spec = job["spec"]
    # Indexed for one pod too: `<job>-0-<5 random>`, the name the chart's admission policy matches.
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 1
    assert spec["backoffLimit"] == 2 and spec["activeDeadlineSeconds"] == 600 and spec["suspend"] is False
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "assay.runner"]
    assert "initContainers" not in pod and "subdomain" not in pod
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
    }
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == ACCOUNT


def test_multi_node_job_is_indexed_with_rendezvous_on_pod_zero() -> None:
    spec = _spec(resources={"nodes": 4, "gpusPerNode": 8})
    job = builders.job(REF, spec)
    service = builders.headless_service(REF, job=JOB)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == JOB
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {builders.LABEL_JOB: JOB}
    assert job["spec"]["template"]["metadata"]["labels"][builders.LABEL_JOB] == JOB
    (runner,) = pod["containers"]
    assert runner["command"] == [
        "python",
        "-m",
        "assay.runner.launch",
        "--nnodes=4",
        "--nproc_per_node=8",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={JOB}-0.{JOB}:29400",
        f"--rdzv_id={JOB}",
        "--max_restarts=0",
        "-m",
        "assay.runner",
    ]
    (check,) = pod["initContainers"]
    assert check["command"] == ["python", "-m", "assay.runner", "--check"]
    assert "nvidia.com/gpu" not in check.get("resources", {}).get("limits", {})


def test_single_node_multi_gpu_uses_standalone_torchrun() -> None:
    command = builders.runner_command(_spec(resources={"gpusPerNode": 4}), job="j")
    assert command[:6] == ["python", "-m", "assay.runner.launch", "--nnodes=1", "--nproc_per_node=4", "--standalone"]


def test_failure_policy_fails_fast_on_config_errors_and_ignores_disruption_and_peer_stops() -> None:
    rules = builders.job(REF, _spec())["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [CONFIG_ERROR_EXIT_CODE]}}
    assert rules[1] == {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [75]}}
    assert rules[2] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def test_pods_are_hardened() -> None:
    pod = builders.job(REF, _spec(resources={"nodes": 2}))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"] + pod["initContainers"]:
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert {m["mountPath"] for m in container["volumeMounts"]} == {
            "/cache",
            "/output",
            "/tmp",
            "/dev/shm",
            "/etc/assay/spec",
        }


def test_environment_carries_the_runner_contract() -> None:
    spec = _spec(
        cache={"pvc": "hf-cache", "offline": True, "datasetsDir": "datasets", "localDatasetsDir": "assay-data"},
        hfTokenSecret={"name": "hf", "key": "tok"},
        output={"pvc": "results"},
    )
    job = builders.job(REF, spec)
    pod = job["spec"]["template"]["spec"]
    env = _env(pod["containers"][0])
    assert env["ASSAY_EVALUATION_FILE"] == "/etc/assay/spec/evaluation.json"
    assert env["ASSAY_EVALUATION_NAME"] == "pythia-core" and env["ASSAY_EVALUATION_NAMESPACE"] == "evals"
    assert env["ASSAY_EVALUATION_GENERATION"] == "3"
    assert env["ASSAY_OUTPUT_DIR"] == "/output/pythia-core/g3"
    assert env["ASSAY_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["HF_HUB_OFFLINE"] == env["HF_DATASETS_OFFLINE"] == "1"
    assert env["HF_HOME"] == "/cache/huggingface" and env["HF_DATASETS_CACHE"] == "/cache/datasets"
    assert env["ASSAY_DATASETS_DIR"] == "/cache/assay-data"
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "tok"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cache"]["persistentVolumeClaim"] == {"claimName": "hf-cache"}
    assert volumes["output"]["persistentVolumeClaim"] == {"claimName": "results"}
    assert "HF_HUB_OFFLINE" not in _env(builders.job(REF, _spec())["spec"]["template"]["spec"]["containers"][0])


def test_the_spec_reaches_the_runner_as_its_pods_annotation_never_in_its_environment() -> None:
    """The pod template carries the spec the runner reads as a downward API file: no ConfigMap to
    create per run, and nothing the runner must be allowed to read."""
    # A long `samples` list: as an environment variable (over 128 KiB) the container would not start.
    spec = _spec(samples={"arc_easy": list(range(25_000))}, resources={"nodes": 2, "gpusPerNode": 2})
    children = {c["kind"]: c for c in run_children.children(REF, spec)}
    assert "ConfigMap" not in children
    job = children["Job"]
    template = job["spec"]["template"]
    text = template["metadata"]["annotations"][builders.ANNOTATION_SPEC]
    assert builders.ANNOTATION_SPEC == "assay.dev/spec"
    assert len(text) > 128 * 1024 and text == spec.to_json()
    assert parse_spec(json.loads(text)) == spec
    pod = template["spec"]
    field = {"fieldPath": "metadata.annotations['assay.dev/spec']"}
    assert {"name": "spec", "downwardAPI": {"items": [{"path": "evaluation.json", "fieldRef": field}]}} in pod[
        "volumes"
    ]
    assert len(pod["initContainers"]) == 1  # the --check container reads it too
    for container in pod["containers"] + pod["initContainers"]:
        env = _env(container)
        assert "ASSAY_EVALUATION" not in env
        assert env["ASSAY_EVALUATION_FILE"] == "/etc/assay/spec/evaluation.json"
        assert {"name": "spec", "mountPath": "/etc/assay/spec", "readOnly": True} in container["volumeMounts"]
        assert all(len(json.dumps(e)) < 1024 for e in container["env"])
    client.V1Job.model_validate(job)


def test_a_tenants_pod_annotation_cannot_replace_the_spec() -> None:
    spec = _spec(podTemplate={"annotations": {builders.ANNOTATION_SPEC: '{"model": "other"}'}})
    annotations = builders.job(REF, spec)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[builders.ANNOTATION_SPEC] == spec.to_json()


def test_each_run_keeps_its_own_response_cache_on_the_output_volume() -> None:
    def cache_of(ref: builders.EvaluationRef, **fields: Any) -> str:
        return _env(builders.job(ref, _spec(**fields))["spec"]["template"]["spec"]["containers"][0])["ASSAY_USE_CACHE"]

    run = f"0b5c-uid-{builders.spec_hash(_spec())[:12]}"
    assert cache_of(REF) == f"/output/pythia-core/g3/.assay-cache/{run}/g3/responses"
    rerun = builders.EvaluationRef(
        name="pythia-core", namespace="evals", uid="0b5c-uid", generation=3, rerun="nightly-2"
    )
    # A fixed output path is shared by every run; the cache is not (its keys are the requests alone).
    shared = {"output": {"pvc": "results", "path": "team/pythia"}}
    shared_run = f"0b5c-uid-{builders.spec_hash(_spec(**shared))[:12]}"
    assert cache_of(REF, **shared) == f"/output/team/pythia/.assay-cache/{shared_run}/g3/responses"
    assert (
        cache_of(rerun, **shared)
        == f"/output/team/pythia/.assay-cache/{shared_run}/{builders.run_suffix(rerun)}/responses"
    )
    assert builders.run_suffix(rerun) != "g3"
    # Another Evaluation on the same path at the same generation, or this one deleted and made
    # again under its name (a new uid), or another spec: each its own cache.
    other = builders.EvaluationRef(name="pythia-other", namespace="evals", uid="7d1e-uid", generation=3)
    again = builders.EvaluationRef(name="pythia-core", namespace="evals", uid="9f00-uid", generation=3)
    other_model = {**shared, "modelArgs": {"pretrained": "EleutherAI/pythia-410m"}}
    caches = {
        cache_of(REF, **shared),
        cache_of(other, **shared),
        cache_of(again, **shared),
        cache_of(REF, **other_model),
    }
    assert len(caches) == 4
    # The same run always gets the same cache (what a replaced pod resumes from); a uid that is
    # not a lowercase UUID still makes one bounded, path-safe directory.
    assert cache_of(REF, **shared) == cache_of(builders.EvaluationRef(**{**vars(REF)}), **shared)
    odd = builders.EvaluationRef(name="x", namespace="evals", uid="../" + "U" * 300, generation=1)
    part = cache_of(odd).split("/.assay-cache/")[1].split("/")[0]
    assert len(part) == 29 and set(part) <= set("0123456789abcdef-")


def test_pod_template_overrides_kueue_and_suspend() -> None:
    spec = _spec(
        podTemplate={
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "batch-low",
            "labels": {"kueue.x-k8s.io/queue-name": "eval-queue", "team": "nlp"},
            "annotations": {"note": "x"},
        },
        suspend=True,
        image="registry.local/assay:dev",
    )
    job = builders.job(REF, spec)
    client.V1Job.model_validate(job)
    pod = job["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"gpu": "h100"}
    assert pod["spec"]["tolerations"][0]["key"] == "gpu"
    assert pod["spec"]["priorityClassName"] == "batch-low" and pod["spec"]["affinity"] == {"nodeAffinity": {}}
    assert pod["metadata"]["labels"]["team"] == "nlp"
    assert pod["metadata"]["annotations"] == {
        "note": "x",
        builders.ANNOTATION_EVALUATION: "pythia-core",
        builders.ANNOTATION_SPEC: spec.to_json(),
    }
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "eval-queue"
    assert job["spec"]["suspend"] is True
    assert pod["spec"]["containers"][0]["image"] == "registry.local/assay:dev"
    # Our selector labels win over user labels of the same key.
    clash = _spec(podTemplate={"labels": {builders.LABEL_EVALUATION: "other"}})
    assert (
        builders.job(REF, clash)["spec"]["template"]["metadata"]["labels"][builders.LABEL_EVALUATION] == "pythia-core"
    )


def test_spec_hash_ignores_suspend_only() -> None:
    assert builders.spec_hash(_spec(suspend=True)) == builders.spec_hash(_spec(suspend=False))
    assert builders.spec_hash(_spec(limit=5)) != builders.spec_hash(_spec())
    assert builders.job(REF, _spec())["metadata"]["annotations"][builders.ANNOTATION_SPEC_HASH] == builders.spec_hash(
        _spec()
    )


def _runner(**env: str) -> RunnerSettings:
    """The runner settings an operator started with `env` reads (`assay.operator.settings.from_env`)."""
    from assay.operator.settings import from_env

    return from_env(env).runner


def test_a_vllm_evaluation_runs_the_vllm_runner_image_unless_it_names_one() -> None:
    from assay.operator.build import runner_images

    def image(spec: Any, runner: RunnerSettings, configured: str | None = None) -> str:
        if configured is not None:  # --runner-image, which `main` puts in the settings
            runner = RunnerSettings(**{**runner.__dict__, "default_image": configured})
        return builders.job(REF, spec, runner=runner)["spec"]["template"]["spec"]["containers"][0]["image"]

    vllm = parse_spec({"model": "vllm", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"]})
    assert image(_spec(), _runner()) == runner_images.DEFAULT_IMAGE
    assert image(vllm, _runner()) == runner_images.DEFAULT_VLLM_IMAGE
    # The chart's two settings reach the operator as environment variables.
    chart = _runner(
        **{
            runner_settings.IMAGE_ENV: "registry.local/runner:2",
            runner_settings.VLLM_IMAGE_ENV: "registry.local/runner-vllm:2",
        }
    )
    assert (
        image(_spec(), chart) == "registry.local/runner:2"
        and image(_spec(), chart, "registry.local/flag:3") == "registry.local/flag:3"
    )
    assert image(vllm, chart, "registry.local/flag:3") == "registry.local/runner-vllm:2"
    mine = parse_spec(
        {"model": "vllm", "modelArgs": {"pretrained": "m"}, "tasks": ["arc_easy"], "image": "registry.local/mine:1"}
    )
    assert image(mine, chart) == "registry.local/mine:1"


@pytest.mark.parametrize("nodes", [1, 3])
def test_each_run_has_a_network_policy_that_admits_only_its_own_jobs_pods(nodes: int) -> None:
    children = {c["kind"]: c for c in run_children.children(REF, _spec(resources={"nodes": nodes, "gpusPerNode": 1}))}
    policy, job = children["NetworkPolicy"], children["Job"]
    assert policy["metadata"]["name"] == job["metadata"]["name"] == JOB
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    # It selects the Job's pods, by a label the operator sets on them last (a spec's pod labels cannot set it) ...
    assert selector == {builders.LABEL_JOB: JOB} and selector.items() <= pod_labels.items()
    forged = builders.job(REF, _spec(podTemplate={"labels": {builders.LABEL_JOB: "someone-else-g1-00000"}}))
    assert forged["spec"]["template"]["metadata"]["labels"][builders.LABEL_JOB] == JOB
    # ... and lets in, on every port (c10d's store, gloo's and NCCL's own), those pods alone: a `from` without
    # a namespaceSelector is the policy's own namespace; no ipBlock, no other selector.
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {builders.LABEL_JOB: JOB}}}]}]
    other = builders.job_name(builders.EvaluationRef(name="pythia-core", namespace="evals", uid="other", generation=3))
    assert other != JOB  # a same-named Evaluation made again is another run's pods


def test_with_the_charts_egress_rules_a_runs_pods_reach_each_other_and_what_the_admin_allows() -> None:
    api_server = {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    dns = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"port": 53, "protocol": "UDP"}],
    }
    runner = _runner(**{runner_settings.RUNNER_EGRESS_ENV: json.dumps([api_server, dns])})
    by_kind = {c["kind"]: c for c in run_children.children(REF, _spec(), runner=runner)}
    policy = by_kind["NetworkPolicy"]["spec"]
    own = {"podSelector": {"matchLabels": {builders.LABEL_JOB: JOB}}}
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["egress"] == [{"to": [own]}, api_server, dns]
    assert policy["ingress"] == [{"from": [own]}]
    with pytest.raises(UserError, match="ASSAY_RUNNER_EGRESS is no JSON list"):
        _runner(**{runner_settings.RUNNER_EGRESS_ENV: '{"to": []}'})


def test_runner_containers_get_a_memory_limit_by_default() -> None:
    from assay.operator.admission import placement_policy

    def limits(
        spec: Any, placement: placement_policy.Placement | None = None, runner: RunnerSettings | None = None
    ) -> list[dict[str, Any]]:
        pod = builders.job(REF, spec, runner=runner or _runner(), placement=placement or placement_policy.Placement())
        return [
            c["resources"]
            for c in [
                *pod["spec"]["template"]["spec"].get("initContainers", ()),
                *pod["spec"]["template"]["spec"]["containers"],
            ]
        ]

    (resources,) = limits(_spec())
    assert runner_settings.BUILT_IN_DEFAULT_MEMORY == "16Gi" and resources["limits"]["memory"] == "16Gi"
    assert resources["requests"] == {"cpu": "250m", "memory": "512Mi"}  # the admin's requests stay as they were
    # torchrun's --check container too.
    assert all(r["limits"]["memory"] == "16Gi" for r in limits(_spec(resources={"nodes": 2})))
    # The spec's memory, and the admin's policy's limit, come first.
    assert limits(_spec(resources={"memory": "2Gi"}))[0]["limits"]["memory"] == "2Gi"
    admin = placement_policy.Placement(runner_limits=(("memory", "4Gi"),))
    assert limits(_spec(), admin)[0]["limits"]["memory"] == "4Gi"
    # A request above the default is not left above its limit (the API server would refuse the Job).
    big = placement_policy.Placement(runner_requests=(("memory", "40Gi"),))
    assert limits(_spec(), big)[0]["limits"]["memory"] == "40Gi"
    # The chart's setting, and `none` for no default.
    given = _runner(**{runner_settings.DEFAULT_MEMORY_ENV: "24Gi"})
    assert limits(_spec(), runner=given)[0]["limits"]["memory"] == "24Gi"
    unlimited = _runner(**{runner_settings.DEFAULT_MEMORY_ENV: "none"})
    assert "memory" not in limits(_spec(), runner=unlimited)[0]["limits"]  # the GPU is all


@pytest.mark.parametrize("value", ["16 GiB", "lots", "-1Gi", "0"])
def test_a_bad_default_memory_setting_is_named(value: str) -> None:
    from assay.errors import UserError

    with pytest.raises(UserError, match=f"ASSAY_RUNNER_DEFAULT_MEMORY='{re.escape(value)}' is no memory quantity"):
        _runner(**{runner_settings.DEFAULT_MEMORY_ENV: value})
