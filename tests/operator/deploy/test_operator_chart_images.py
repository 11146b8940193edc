"""The chart's images: by tag or by digest, and which ones an Evaluation's spec.image may name.

Rendered by a real `helm template`; the policy it renders is read by the operator's own
`AdminPolicy.from_json`, as the operator reads ASSAY_POLICY, and asked about real references.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
import yaml

from assay.operator.admission.policy import AdminPolicy
from tests.operator.helm_chart import CHART, HELM, needs_helm

pytestmark = needs_helm

DIGEST = "sha256:" + "0123456789abcdef" * 4
OTHER = "sha256:" + "fedcba9876543210" * 4
VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


def _env(*values: str) -> dict[str, str]:
    assert HELM is not None
    args = [a for value in values for a in ("--set", value)]
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--namespace", "assay-system", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (deployment,) = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {"image": container["image"], **{e["name"]: e.get("value", "") for e in container["env"]}}


def _failure(*values: str) -> str:
    assert HELM is not None
    args = [a for value in values for a in ("--set", value)]
    result = subprocess.run([HELM, "template", "ev", str(CHART), *args], capture_output=True, text=True)
    assert result.returncode != 0
    return result.stderr


def _policy(env: dict[str, str]) -> AdminPolicy:
    return AdminPolicy.from_json(env["ASSAY_POLICY"])


def test_images_by_tag_by_default() -> None:
    env = _env()
    assert env["image"] == f"ghcr.io/assay-dev/assay-operator:{VERSION}"
    assert env["ASSAY_RUNNER_IMAGE"] == f"ghcr.io/assay-dev/assay-runner:{VERSION}"
    assert env["ASSAY_RUNNER_VLLM_IMAGE"] == f"ghcr.io/assay-dev/assay-runner-vllm:{VERSION}"


def test_a_digest_in_values_deploys_repository_at_digest() -> None:
    env = _env(
        f"image.digest={DIGEST}",
        "image.tag=ignored",
        f"runnerImage.digest={DIGEST}",
        f"runnerVllmImage.repository=registry.example.com:5000/ml/vllm@{OTHER}",
    )
    assert env["image"] == f"ghcr.io/assay-dev/assay-operator@{DIGEST}"
    assert env["ASSAY_RUNNER_IMAGE"] == f"ghcr.io/assay-dev/assay-runner@{DIGEST}"
    assert env["ASSAY_RUNNER_VLLM_IMAGE"] == f"registry.example.com:5000/ml/vllm@{OTHER}"  # as given
    # A whole reference string keeps its digest too.
    assert (
        _env(f"runnerImage=reg.example/team/runner@{DIGEST}")["ASSAY_RUNNER_IMAGE"]
        == f"reg.example/team/runner@{DIGEST}"
    )


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (("image.digest=latest",), "image.digest"),  # the schema: sha256:<64 hex> or empty
        ((f"runnerImage.digest={DIGEST}", f"runnerImage.repository=reg/x@{OTHER}"), "not both"),
    ],
)
def test_a_bad_digest_is_refused_when_rendering(values: tuple[str, ...], says: str) -> None:
    assert says in _failure(*values)


def test_by_default_spec_image_may_name_only_the_charts_runner_images() -> None:
    policy = _policy(_env())
    assert policy.allowed_image_prefixes == ("ghcr.io/assay-dev/assay-runner", "ghcr.io/assay-dev/assay-runner-vllm")
    for image in (
        f"ghcr.io/assay-dev/assay-runner:{VERSION}",
        "ghcr.io/assay-dev/assay-runner:0.0.1",
        f"ghcr.io/assay-dev/assay-runner@{DIGEST}",
        f"ghcr.io/assay-dev/assay-runner-vllm:{VERSION}",
    ):
        assert policy.allows_image(image), image
    for image in (
        "docker.io/attacker/runner:1",
        "ghcr.io/assay-dev/assay-runner-evil:1",
        "ghcr.io/assay-dev/assay-operator:1",  # the operator's image is not a runner
        "ghcr.io/assay-dev:1",
    ):
        assert not policy.allows_image(image), image


def test_the_runner_images_given_elsewhere_are_the_ones_allowed() -> None:
    """The e2e installs name their own runner image (a whole reference): it is what is allowed."""
    policy = _policy(
        _env(
            "runnerImage=localhost:5000/team/assay-runner:dev",
            f"runnerVllmImage.repository=reg.example/vllm@{DIGEST}",
        )
    )
    assert policy.allowed_image_prefixes == ("localhost:5000/team/assay-runner", "reg.example/vllm")
    assert policy.allows_image("localhost:5000/team/assay-runner:other")
    assert not policy.allows_image("ghcr.io/assay-dev/assay-runner:1")


def test_listed_prefixes_add_to_the_runner_images_and_any_image_is_asked_for_by_name() -> None:
    listed = _policy(_env("policy.allowedImagePrefixes={registry.example.com/ml}"))
    assert listed.allowed_image_prefixes[0] == "registry.example.com/ml"
    assert listed.allows_image("registry.example.com/ml/runner:2") and listed.allows_image(
        f"ghcr.io/assay-dev/assay-runner:{VERSION}"
    )
    anything = _env("policy.allowAnyImage=true")
    assert "allowAnyImage" not in json.loads(anything["ASSAY_POLICY"])  # the chart's key, not the operator's
    assert _policy(anything).allows_image("docker.io/anyone/anything:1")
    both = _failure("policy.allowAnyImage=true", "policy.allowedImagePrefixes={reg.example}")
    assert "contradict" in both


def test_the_rest_of_the_policy_reaches_the_operator_unchanged() -> None:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    rendered = json.loads(_env()["ASSAY_POLICY"])
    expected = {k: v for k, v in values.items() if k not in ("allowAnyImage", "allowedImagePrefixes")}
    assert {k: v for k, v in rendered.items() if k != "allowedImagePrefixes"} == expected
