"""The chart as platform teams run it: values checked by values.schema.json, private registries
(imagePullSecrets for the operator and every runner account), and the GPU resource name."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest
import yaml

from assay.operator.build import builders, runner_identity, runner_settings
from assay.operator.settings import from_env
from assay.spec import parse_spec
from tests.operator.helm_chart import CHART, HELM, needs_helm, render

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
REF = builders.EvaluationRef(name="ev", namespace="team-a", uid="u1", generation=1)


def test_the_schema_accepts_the_charts_own_values() -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), SCHEMA)


@needs_helm
@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("operator.logLvel=debug", "operator: Additional property logLvel is not allowed"),
        ("operator.replicas=-1", "operator.replicas: Must be greater than or equal to 0"),
        ("runner.gpuResourceName=nvidia gpu", "runner.gpuResourceName: Does not match pattern"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy: image.pullPolicy must be one of the following"),
    ],
)
def test_helm_refuses_values_the_schema_does_not_allow(value: str, complaint: str) -> None:
    result = subprocess.run([HELM, "template", "ev", str(CHART), "--set", value], capture_output=True, text=True)
    assert result.returncode != 0
    assert complaint in result.stderr, result.stderr


def _env(documents: list[dict]) -> dict[str, str]:
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


@needs_helm
def test_pull_secrets_reach_the_operator_account_and_the_runner_account() -> None:
    documents = render(
        "--set", "imagePullSecrets[0].name=regcred", "--set", "runner.imagePullSecrets={runner-reg,mirror}"
    )
    (account,) = [d for d in documents if d["kind"] == "ServiceAccount"]
    assert account["imagePullSecrets"] == [{"name": "regcred"}]
    env = _env(documents)
    assert env[runner_settings.PULL_SECRETS_ENV] == "runner-reg,mirror"
    # What the operator makes of that variable, for each namespace's runner account.
    secrets = from_env(env).runner.pull_secrets
    pulls = runner_identity.service_account("evals", pull_secrets=secrets)["imagePullSecrets"]
    assert pulls == [{"name": "runner-reg"}, {"name": "mirror"}]
    assert "imagePullSecrets" not in runner_identity.service_account(
        "evals", pull_secrets=from_env(_env(render())).runner.pull_secrets
    )
    assert runner_settings.PULL_SECRETS_ENV not in _env(render())


@needs_helm
@pytest.mark.parametrize("name", ["nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"])
def test_the_gpu_resource_name_reaches_the_runner_pods(name: str) -> None:
    args = () if name == "nvidia.com/gpu" else ("--set", f"runner.gpuResourceName={name}")  # the default
    env = _env(render(*args))
    assert env[runner_settings.GPU_RESOURCE_ENV] == name
    spec = parse_spec({"model": "dummy", "tasks": ["arc_easy"], "resources": {"gpusPerNode": 2}})
    settings = from_env({k: v for k, v in env.items() if v is not None})
    runner = builders.job(REF, spec, runner=settings.runner)["spec"]["template"]["spec"]["containers"][0]
    assert runner["resources"]["limits"] == {name: "2", "memory": runner_settings.BUILT_IN_DEFAULT_MEMORY}
