"""The admin's policy: what a spec may ask for, read from the chart's values by a real `helm`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from assay.errors import UserError
from assay.operator.admission import policy
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.spec import parse_spec
from tests.operator.helm_chart import CHART, needs_helm, render

BASE: dict[str, Any] = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}


def _refusal(spec: dict[str, Any], admin: AdminPolicy = AdminPolicy()) -> str:
    with pytest.raises(UserError) as caught:
        policy.check(parse_spec({**BASE, **spec}), admin)
    return str(caught.value)


def test_the_defaults_refuse_remote_and_unsafe_code() -> None:
    assert "spec.trustRemoteCode is not allowed" in _refusal({"trustRemoteCode": True})
    # The modelArgs spelling is the same request.
    message = _refusal({"modelArgs": {"pretrained": "x", "trust_remote_code": "true"}})
    assert "policy.allowTrustRemoteCode" in message
    assert "spec.allowUnsafeCode is not allowed" in _refusal({"allowUnsafeCode": True})
    allowing = AdminPolicy(allow_trust_remote_code=True, allow_unsafe_code=True)
    policy.check(parse_spec({**BASE, "trustRemoteCode": True, "allowUnsafeCode": True}), allowing)


@pytest.mark.parametrize("tasks", [["/"], ["../etc"], ["arc_easy,/etc"], ["mine.yaml"], ["~/tasks"], ["a\\b"]])
def test_task_paths_are_refused_whatever_the_policy(tasks: list[str]) -> None:
    permissive = AdminPolicy(allow_trust_remote_code=True, allow_unsafe_code=True, allow_online=True)
    message = _refusal({"tasks": ["arc_easy", *tasks]}, permissive)
    assert message.startswith("spec.tasks[1] ") and "is a path" in message


def test_no_library_task_looks_like_a_path() -> None:
    from assay.runner.tasks.index import TaskManager

    names = list(TaskManager().index)
    assert len(names) > 50
    assert not [n for n in names if policy._is_path(n)]


@pytest.mark.parametrize(
    "args",
    [
        {"token": "abc123"},
        {"hf_token": "s3cr3t-value"},
        {"openai_api_key": "sk-1"},
        {"revision": "hf_" + "a1B2" * 9},
        {"db_password": "pw-98765"},
    ],
)
def test_a_literal_secret_in_model_args_is_refused_without_repeating_it(args: dict[str, str]) -> None:
    message = _refusal({"modelArgs": {"pretrained": "x", **args}})
    key = next(iter(args))
    assert message.startswith(f"spec.modelArgs.{key} holds a literal secret") and "spec.hfTokenSecret" in message
    assert args[key] not in message


def test_flags_and_ordinary_model_args_are_not_secrets() -> None:
    args = {
        "pretrained": "EleutherAI/pythia-160m",
        "add_bos_token": True,
        "use_auth_token": "true",
        "tokenizer": "gpt2",
        "max_length": 2048,
    }
    policy.check(parse_spec({**BASE, "modelArgs": args}), AdminPolicy())


def test_images_only_from_allowed_prefixes_at_a_boundary() -> None:
    admin = AdminPolicy(allowed_image_prefixes=("registry.example.com/ml", "ghcr.io/assay-dev/"))
    for image in ("registry.example.com/ml/runner:1", "registry.example.com/ml:2", "ghcr.io/assay-dev/assay-runner"):
        policy.check(parse_spec({**BASE, "image": image}), admin)
    for image in ("registry.example.com/ml-evil/runner:1", "docker.io/attacker/runner:1"):
        message = _refusal({"image": image}, admin)
        assert message.startswith(f"spec.image {image!r} is not from an allowed registry")
    # No prefixes: any image.
    policy.check(parse_spec({**BASE, "image": "docker.io/anyone/runner:1"}), AdminPolicy())


def test_gpu_and_node_caps() -> None:
    admin = AdminPolicy(max_gpus=8, max_nodes=2)
    policy.check(parse_spec({**BASE, "resources": {"nodes": 2, "gpusPerNode": 4}}), admin)
    assert "nodes 3 is above this cluster's limit of 2" in _refusal(
        {"resources": {"nodes": 3, "gpusPerNode": 0}}, admin
    )
    assert "asks for 16 GPUs" in _refusal({"resources": {"nodes": 2, "gpusPerNode": 8}}, admin)


def test_offline_is_enforced_unless_the_policy_lets_runners_online() -> None:
    spec = parse_spec(dict(BASE))
    assert not spec.cache.offline
    ref = builders.EvaluationRef(namespace="ns", name="e", uid="u", generation=1)
    env = {e["name"]: e.get("value") for e in builders.runner_env(ref, policy.enforce(spec, AdminPolicy()))}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_DATASETS_OFFLINE"] == "1"
    assert policy.enforce(spec, AdminPolicy(allow_online=True)) is spec


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{", "is not JSON"),
        ("[]", "must be a JSON object"),
        ('{"allowOnlin": true}', "unknown keys allowOnlin"),
        ('{"allowOnline": "yes"}', "allowOnline must be true or false"),
        ('{"maxGpusPerEvaluation": -1}', "maxGpusPerEvaluation must be a whole number"),
        ('{"allowedImagePrefixes": "reg/x"}', "allowedImagePrefixes must be a list"),
    ],
)
def test_a_bad_policy_is_one_sentence(raw: str, words: str) -> None:
    with pytest.raises(UserError, match=words):
        AdminPolicy.from_json(raw)


def test_unset_policy_is_the_safe_default() -> None:
    assert AdminPolicy.from_env({}) == AdminPolicy()


@needs_helm
def test_the_chart_hands_its_policy_values_to_the_operator() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]

    def operator_policy(*args: str) -> AdminPolicy:
        deployment = next(d for d in render(*args) if d["kind"] == "Deployment")
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert json.loads(env[policy.POLICY_ENV]).keys() == defaults.keys() - {"allowAnyImage"}  # the chart's own
        return AdminPolicy.from_json(env[policy.POLICY_ENV])

    # The chart's runner images are always allowed, and by default nothing else (test_operator_chart_images).
    runner_images = ("ghcr.io/assay-dev/assay-runner", "ghcr.io/assay-dev/assay-runner-vllm")
    assert operator_policy() == AdminPolicy(allowed_image_prefixes=runner_images)
    assert operator_policy(
        "--set",
        "policy.allowedImagePrefixes={reg.example/ml,ghcr.io/x/}",
        "--set",
        "policy.maxGpusPerEvaluation=8",
        "--set",
        "policy.allowOnline=true",
    ) == AdminPolicy(
        allowed_image_prefixes=("reg.example/ml", "ghcr.io/x/", *runner_images), max_gpus=8, allow_online=True
    )


@pytest.mark.parametrize("word", ["on", "y", "enabled", "On", "2"])
def test_trust_remote_code_words_that_are_not_booleans_are_refused_whatever_the_policy(word: str) -> None:
    """The hf backend once read these as true (bool(str)) while this gate read them as false."""
    spec = {"modelArgs": {"pretrained": "x", "trust_remote_code": word}}
    for admin in (AdminPolicy(), AdminPolicy(allow_trust_remote_code=True)):
        message = _refusal(spec, admin)
        assert message.startswith("spec.modelArgs.trust_remote_code must be true or false")
    # spec.trustRemoteCode does not excuse the word either.
    assert "must be true or false" in _refusal(
        {**spec, "trustRemoteCode": True}, AdminPolicy(allow_trust_remote_code=True)
    )


@pytest.mark.parametrize("word", ["no", "No", "false", "0"])
def test_trust_remote_code_no_is_false_and_needs_no_policy(word: str) -> None:
    policy.check(parse_spec({**BASE, "modelArgs": {"pretrained": "x", "trust_remote_code": word}}), AdminPolicy())


def test_the_engine_check_reads_the_modelarg_as_the_gate_does() -> None:
    from assay.operator.admission import validation

    said_no = parse_spec({**BASE, "modelArgs": {"pretrained": "x", "trust_remote_code": "no"}})
    assert validation.remote_code_error(said_no) is None
    said_yes = parse_spec({**BASE, "modelArgs": {"pretrained": "x", "trust_remote_code": "YES"}})
    assert "set spec.trustRemoteCode: true" in str(validation.remote_code_error(said_yes))
    with pytest.raises(UserError, match="spec.modelArgs.trust_remote_code must be true or false"):
        validation.remote_code_error(parse_spec({**BASE, "modelArgs": {"pretrained": "x", "trust_remote_code": "on"}}))
