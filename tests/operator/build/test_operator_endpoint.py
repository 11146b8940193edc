"""The Evaluation's endpoint form: a served model evaluated by a runner that requests no GPU.

The CRD (with its CEL rules) and the spec parser accept and reject the same manifests; the
runner Job carries the API key from the Secret (never its value), mounts the CA bundle,
asks for no nvidia.com/gpu, and the runner gets lm-eval's model_args for the endpoint.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from assay import spec as spec_module
from assay.errors import UserError
from assay.operator.build import builders

REF = builders.EvaluationRef(name="served", namespace="evals", uid="uid-1", generation=1)
ENDPOINT = {
    "url": "https://vllm.ml.svc:8000/v1/completions",
    "servedModel": "llama-3-8b",
    "tokenizer": "meta-llama/Meta-Llama-3-8B",
    "apiKeySecret": {"name": "vllm-key"},
    "caBundle": {"configMap": "vllm-ca"},
}


def _manifest(make_evaluation: Any, **fields: Any) -> dict[str, Any]:
    manifest = make_evaluation(**fields)
    manifest["spec"]["model"] = fields.get("model", "local-completions")
    manifest["spec"]["modelArgs"] = fields.get("modelArgs", {"num_concurrent": 4})
    return manifest


def test_endpoint_spec_is_valid_for_both_and_round_trips(crd_validator: Any, make_evaluation: Any) -> None:
    manifest = _manifest(make_evaluation, endpoint=ENDPOINT)
    assert crd_validator.errors(manifest) == []
    parsed = spec_module.parse_spec(crd_validator.defaulted(manifest)["spec"])
    assert parsed.endpoint is not None and parsed.endpoint.api_key_secret == spec_module.SecretKey(
        "vllm-key", "api-key"
    )
    assert parsed == spec_module.parse_spec(manifest["spec"])
    assert spec_module.parse_spec(parsed.to_dict()) == parsed
    assert crd_validator.errors(make_evaluation(**parsed.to_dict())) == []
    assert parsed.model_label == "llama-3-8b"


def test_run_options_carry_lm_eval_model_args(make_evaluation: Any) -> None:
    parsed = spec_module.parse_spec(_manifest(make_evaluation, endpoint=ENDPOINT)["spec"])
    assert parsed.run_options().parsed_model_args == {
        "num_concurrent": 4,
        "base_url": ENDPOINT["url"],
        "model": "llama-3-8b",
        "tokenizer": "meta-llama/Meta-Llama-3-8B",
        "tokenizer_backend": "huggingface",
        "ca_cert_path": f"{spec_module.ENDPOINT_CA_MOUNT}/ca.crt",
    }


INVALID = [
    ({"endpoint": ENDPOINT, "model": "hf"}, "endpoint needs"),
    ({"endpoint": {"url": "vllm:8000"}}, "url"),
    ({"endpoint": {"servedModel": "m"}}, "url"),
    ({"endpoint": {**ENDPOINT, "apiKeySecret": {"key": "k"}}}, "name"),
    ({"endpoint": ENDPOINT, "resources": {"nodes": 2}}, "nodes"),
]


@pytest.mark.parametrize("fields,word", INVALID, ids=[w + str(i) for i, (_, w) in enumerate(INVALID)])
def test_invalid_endpoint_specs_fail_both(
    crd_validator: Any, make_evaluation: Any, fields: dict[str, Any], word: str
) -> None:
    manifest = _manifest(make_evaluation, **fields)
    assert crd_validator.errors(manifest), f"the CRD accepted {fields}"
    with pytest.raises(UserError) as caught:
        spec_module.parse_spec(manifest["spec"])
    assert word.lower() in str(caught.value).lower()


def test_model_args_that_the_endpoint_sets_are_refused(make_evaluation: Any) -> None:
    with pytest.raises(UserError, match="spec.modelArgs.base_url is set by spec.endpoint"):
        spec_module.parse_spec(
            _manifest(make_evaluation, endpoint=ENDPOINT, modelArgs={"base_url": "http://x"})["spec"]
        )


def test_runner_job_requests_no_gpu_and_carries_key_and_ca(crd_validator: Any, make_evaluation: Any) -> None:
    manifest = _manifest(make_evaluation, endpoint=ENDPOINT)
    parsed = spec_module.parse_spec(crd_validator.defaulted(manifest)["spec"])
    assert parsed.resources.gpus_per_node == 1  # the CRD default, which an endpoint ignores
    job = builders.job(REF, parsed)
    pod = job["spec"]["template"]["spec"]
    [runner] = pod["containers"]
    assert "nvidia.com/gpu" not in str(runner.get("resources", {}))
    assert runner["command"] == ["python", "-m", "assay.runner"] and "initContainers" not in pod
    env = {e["name"]: e for e in runner["env"]}
    assert env["OPENAI_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "vllm-key", "key": "api-key"}}
    assert env["ASSAY_API_KEY_SECRET"]["value"] == "vllm-key/api-key"
    assert {"name": "endpoint-ca", "mountPath": spec_module.ENDPOINT_CA_MOUNT, "readOnly": True} in runner[
        "volumeMounts"
    ]
    assert {
        "name": "endpoint-ca",
        "configMap": {"name": "vllm-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
    } in pod["volumes"]
    api = client.ApiClient()
    assert api._ApiClient__deserialize(job, "V1Job").spec.template.spec.volumes[-1].config_map.name == "vllm-ca"
