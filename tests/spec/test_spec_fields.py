"""The spec's one table of fields (`assay.spec.fields`) and the four places a field lives.

The CRD's schema (both copies), the parser, the `Evaluation` record and the serializer are
each held to the table field by field: a field added to one and not the others fails here,
naming it. Each field also has an example below, parsed into its attribute and written back
by the serializer: a new row without one fails `test_every_field_has_an_example`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.errors import UserError
from assay.spec import Evaluation, fields, parse_spec, parsing
from assay.spec.serialize import spec_to_dict

REPO = Path(__file__).resolve().parents[2]
CRDS = [
    REPO / "deploy" / "crds" / "evaluations.assay.dev.yaml",
    REPO / "deploy/helm/assay/crds/evaluations.assay.dev.yaml",
]
REQUIRED = {"model": "hf", "tasks": ["arc_easy"]}

EXAMPLES: dict[str, dict[str, Any]] = {
    "model": {"model": "dummy"},
    "modelArgs": {"modelArgs": {"pretrained": "m"}},
    "tasks": {"tasks": ["arc_easy", "piqa"]},
    "numFewshot": {"numFewshot": 3},
    "limit": {"limit": 5},
    "samples": {"samples": {"arc_easy": [1, 2]}},
    "batchSize": {"batchSize": 4},
    "maxBatchSize": {"maxBatchSize": 8},
    "genKwargs": {"genKwargs": {"temperature": 0.5}},
    "seed": {"seed": 7},
    "bootstrapIters": {"bootstrapIters": 0},
    "applyChatTemplate": {"applyChatTemplate": True},
    "chatTemplate": {"applyChatTemplate": True, "chatTemplate": "{{ messages }}"},
    "fewshotAsMultiturn": {"applyChatTemplate": True, "fewshotAsMultiturn": True},
    "systemInstruction": {"systemInstruction": "Be brief."},
    "logSamples": {"logSamples": True},
    "predictOnly": {"predictOnly": True},
    "metadata": {"metadata": {"max_seq_lengths": [1024]}},
    "trustRemoteCode": {"trustRemoteCode": True},
    "allowUnsafeCode": {"allowUnsafeCode": True},
    "resources": {"resources": {"nodes": 2, "gpusPerNode": 1}},
    "image": {"image": "registry.local/runner:2"},
    "hfTokenSecret": {"hfTokenSecret": {"name": "hf", "key": "token"}},
    "endpoint": {"model": "local-completions", "endpoint": {"url": "http://vllm:8000/v1/completions"}},
    "cache": {"cache": {"pvc": "models", "offline": True}},
    "output": {"output": {"pvc": "results"}},
    "podTemplate": {"podTemplate": {"nodeSelector": {"pool": "gpu"}}},
    "backoffLimit": {"backoffLimit": 2},
    "activeDeadlineSeconds": {"activeDeadlineSeconds": 600},
    "suspend": {"suspend": True},
    "taskSources": {"taskSources": [{"configMap": "my-tasks"}]},
    "baseline": {"baseline": {"path": "runs/v1"}},
    "gate": {"baseline": {"path": "runs/v1"}, "gate": {"alpha": 0.01}},
    "stopAt": {"stopAt": {"ciHalfWidth": 0.02}},
    "sentinels": {"sentinels": {"strict": True}},
}
"""Per field, a spec fragment that sets it to something other than its default."""


def _spec_schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _schema_type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        assert "type" not in node
        return fields.INT_OR_STRING
    return str(node["type"])


@pytest.mark.parametrize("path", CRDS, ids=["deploy", "chart"])
def test_the_crds_spec_schema_has_the_tables_fields_types_and_required_ones(path: Path) -> None:
    schema = _spec_schema(path)
    table = [(f.key, f.schema_type) for f in fields.FIELDS]
    assert [(key, _schema_type(node)) for key, node in schema["properties"].items()] == table
    assert sorted(schema["required"]) == sorted(f.key for f in fields.FIELDS if f.required)


def test_the_record_has_one_attribute_per_field() -> None:
    assert [f.name for f in dataclasses.fields(Evaluation)] and {f.name for f in dataclasses.fields(Evaluation)} == {
        field.attribute for field in fields.FIELDS
    }
    assert len({field.attribute for field in fields.FIELDS}) == len(fields.FIELDS)


def test_the_parsers_rows_name_the_tables_attributes() -> None:
    assert parsing._TOP_FIELDS == set(fields.KEYS)
    for attribute, key, _, _ in parsing._PLAIN_FIELDS:
        assert fields.BY_KEY[key].attribute == attribute, key


def test_the_serializer_writes_the_tables_keys_in_its_order() -> None:
    everything = parse_spec({**REQUIRED, **EXAMPLES["gate"], **EXAMPLES["chatTemplate"], "fewshotAsMultiturn": True})
    written = list(spec_to_dict(everything))
    order = [f.key for f in fields.FIELDS]
    assert written == [key for key in order if key in written]
    assert set(written) <= fields.KEYS


@pytest.mark.parametrize("key", [f.key for f in fields.FIELDS if f.required])
def test_a_required_field_left_out_is_named(key: str) -> None:
    with pytest.raises(UserError, match=f"spec.{key}"):
        parse_spec({k: v for k, v in REQUIRED.items() if k != key})


def test_every_field_has_an_example() -> None:
    assert set(EXAMPLES) == fields.KEYS


@pytest.mark.parametrize("field", fields.FIELDS, ids=lambda f: f.key)
def test_each_field_reaches_its_attribute_and_is_written_back(field: fields.SpecField) -> None:
    """The parser reads the key into the table's attribute, and the serializer writes it back as it was read."""
    spec = {**REQUIRED, **EXAMPLES[field.key]}
    parsed = parse_spec(spec)
    bare = parse_spec({**REQUIRED, **{k: v for k, v in EXAMPLES[field.key].items() if k != field.key}})
    assert getattr(parsed, field.attribute) != getattr(bare, field.attribute), field.key
    written = spec_to_dict(parsed)
    assert field.key in written
    assert parse_spec(written) == parsed


def test_spec_bootstrap_iters_is_lm_evals_flag_bounded() -> None:
    assert parse_spec(REQUIRED).run_options().bootstrap_iters == 100_000  # lm-eval's default
    assert parse_spec({**REQUIRED, "bootstrapIters": 0}).run_options().bootstrap_iters == 0
    for bad, words in (
        (-1, "must be at least 0"),
        (2_000_000, "must be at most 1,000,000"),
        ("many", "must be an integer"),
    ):
        with pytest.raises(UserError, match=f"spec.bootstrapIters {words}"):
            parse_spec({**REQUIRED, "bootstrapIters": bad})
