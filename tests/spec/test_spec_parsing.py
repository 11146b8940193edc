"""assay.spec: parsing the Evaluation spec, its errors, and the run options it gives."""

from __future__ import annotations

import inspect

import pytest

from assay import spec as spec_module
from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.spec import Seed, parse_manifest, parse_spec

MINIMAL = {"model": "hf", "tasks": ["arc_easy"]}


def test_defaults_follow_lm_eval() -> None:
    spec = parse_spec(MINIMAL)
    options = spec.run_options()
    assert options.batch_size == BatchSize(1) and options.batch_size.given == 1
    assert (options.random_seed, options.numpy_random_seed, options.torch_random_seed, options.fewshot_random_seed) == (
        0,
        1234,
        1234,
        1234,
    )
    assert options.num_fewshot is None and options.limit is None
    assert options.apply_chat_template is False and options.fewshot_as_multiturn is False
    assert options.confirm_run_unsafe_code is False and options.log_samples is False
    assert spec.resources.nodes == 1 and spec.resources.gpus_per_node == 1


def test_every_field_maps_through() -> None:
    spec = parse_spec(
        {
            "model": "hf",
            "modelArgs": {"pretrained": "org/m", "dtype": "bfloat16"},
            "tasks": ["a", "b"],
            "numFewshot": 5,
            "limit": 0.5,
            "batchSize": "auto:2",
            "maxBatchSize": 32,
            "genKwargs": {"temperature": 0},
            "seed": 7,
            "applyChatTemplate": True,
            "chatTemplate": "default",
            "systemInstruction": "Be brief.",
            "predictOnly": True,
            "metadata": {"max_seq_lengths": [2048]},
            "trustRemoteCode": True,
            "allowUnsafeCode": True,
        }
    )
    options = spec.run_options(use_cache="/cache/requests")
    assert (
        options.model_args
        == options.parsed_model_args
        == {"pretrained": "org/m", "dtype": "bfloat16", "trust_remote_code": True}
    )
    assert list(options.tasks) == ["a", "b"] and options.num_fewshot == 5 and options.limit == 0.5
    assert options.batch_size == BatchSize(None, 2, "auto:2") and options.max_batch_size == 32
    assert options.gen_kwargs == {"temperature": 0} and options.use_cache == "/cache/requests"
    assert {options.random_seed, options.numpy_random_seed, options.torch_random_seed, options.fewshot_random_seed} == {
        7
    }
    # A named template is passed by name; few-shot as multiturn defaults on with a chat template.
    assert options.apply_chat_template == "default" and options.fewshot_as_multiturn is True
    assert options.system_instruction == "Be brief."
    assert options.predict_only is True and options.log_samples is True  # predict_only implies log_samples
    assert options.metadata == {"max_seq_lengths": [2048]}
    assert options.confirm_run_unsafe_code is True
    assert spec.model_label == "org/m"


def test_batch_size_is_the_record_and_round_trips() -> None:
    # a digit string is kept as its int: the results echo 8, and to_dict() writes 8
    spec = parse_spec({**MINIMAL, "batchSize": "8"})
    assert spec.batch_size == BatchSize(8, 1, 8) and spec.to_dict()["batchSize"] == 8
    assert parse_spec(spec.to_dict()) == spec


def test_seed_slots_and_integer_limit() -> None:
    spec = parse_spec({**MINIMAL, "seed": "0, None, 3, 4", "limit": 10})
    assert spec.seed == Seed(0, None, 3, 4)
    assert spec.limit == 10 and isinstance(spec.limit, int)
    assert parse_spec(spec.to_dict()) == spec


def test_spec_is_frozen() -> None:
    spec = parse_spec(MINIMAL)
    with pytest.raises(AttributeError):
        spec.model = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    "fields,expected",
    [
        ({"model": None}, "spec.model is required"),
        ({"tasks": "arc_easy"}, "spec.tasks must be a list of task names, not a string: write tasks: [arc_easy]."),
        ({"tasks": {"arc_easy": 1}}, "spec.tasks must be a list of task names, not a mapping."),
        ({"tasks": []}, "spec.tasks is required"),
        ({"tasks": ["ok", 3]}, "spec.tasks[1]"),
        ({"taks": ["x"]}, "Did you mean 'tasks'?"),
        ({"numFewshot": "5"}, "spec.numFewshot must be an integer"),
        ({"resources": {"gpus": 2}}, "spec.resources.gpus"),
        ({"batchSize": "auto:x"}, "spec.batchSize"),
        ({"podTemplate": {"labels": {"tier": 1}}}, "quote it"),
        ({"hfTokenSecret": {"key": "k"}}, "spec.hfTokenSecret.name is required"),
        ({"modelArgs": "pretrained=x"}, "spec.modelArgs must be a mapping"),
    ],
)
def test_errors_name_the_field(fields: dict, expected: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_spec({**MINIMAL, **fields})
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message and message.endswith(".")


def test_manifest_checks_kind_and_name() -> None:
    manifest = {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "x"}, "spec": MINIMAL}
    metadata, spec = parse_manifest(manifest)
    assert metadata["name"] == "x" and spec.model == "hf"
    with pytest.raises(UserError, match="apiVersion"):
        parse_manifest({**manifest, "kind": "Job"})
    with pytest.raises(UserError, match="metadata.name"):
        parse_manifest({**manifest, "metadata": {}})


def test_the_runner_contract_is_documented() -> None:
    doc = inspect.getdoc(spec_module) or ""
    for name in (
        "ASSAY_EVALUATION_FILE",
        "ASSAY_EVALUATION_NAME",
        "ASSAY_EVALUATION_NAMESPACE",
        "ASSAY_OUTPUT_DIR",
        "--spec",
        "--check",
        str(spec_module.CONFIG_ERROR_EXIT_CODE),
    ):
        assert name in doc
