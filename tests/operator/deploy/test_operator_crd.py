"""The Evaluation CRD: shape, documentation, schema and CEL rules, in agreement with assay.spec."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay import spec as spec_module
from assay.errors import UserError
from assay.operator.decide import conditions, job_status
from assay.run_results import RunResults
from assay.runner.results.status_sink import condense_results

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)


def _spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_identity_scope_and_printer_columns(crd: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "evaluations.assay.dev"
    assert crd["spec"]["group"] == spec_module.GROUP
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == spec_module.KIND
    assert crd["spec"]["names"]["plural"] == spec_module.PLURAL
    # Not "ev": kubectl resolves that to core Events first (the e2e suite found out).
    assert set(crd["spec"]["names"]["shortNames"]) == {"evals"}
    (version,) = crd["spec"]["versions"]
    assert version["name"] == spec_module.VERSION and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = version["additionalPrinterColumns"]
    assert [c["name"] for c in columns] == [
        "Model",
        "Tasks",
        "Phase",
        "Reason",
        "Progress",
        "Regressed",
        "Age",
        "Message",
    ]
    assert [c.get("priority", 0) for c in columns] == [0, 0, 0, 0, 0, 0, 0, 1]  # Message only with -o wide


def test_schema_fields_match_the_spec_parser(crd: dict[str, Any]) -> None:
    assert set(_spec_schema(crd)["properties"]) == spec_module._TOP_FIELDS


def _walk(node: dict[str, Any], path: str):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{key}")


def test_every_field_is_structural_and_documented(crd: dict[str, Any]) -> None:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for section in ("spec", "status"):
        for path, node in _walk(root["properties"][section], section):
            typed = (
                "type" in node
                or node.get("x-kubernetes-int-or-string")
                or node.get("x-kubernetes-preserve-unknown-fields")
            )
            assert typed, f"{path} has no type: the schema would not be structural"
            assert node.get("description"), f"{path} has no description for kubectl explain"


def _every_node(node: dict[str, Any], path: str):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _every_node(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _every_node(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _every_node(node["additionalProperties"], f"{path}[*]")


def test_every_field_a_user_fills_is_bounded(crd: dict[str, Any]) -> None:
    """An unbounded string, list or map lets one Evaluation fill etcd and the operator's memory, and the
    API server refuses a CEL rule whose cost it cannot bound (every rule under a list or map multiplies)."""
    unbounded = []
    for path, node in _every_node(_spec_schema(crd), "spec"):
        if (node.get("type") == "string" or node.get("x-kubernetes-int-or-string")) and "enum" not in node:
            unbounded += [] if "maxLength" in node else [f"{path} (maxLength)"]
        elif node.get("type") == "array":
            unbounded += [] if "maxItems" in node else [f"{path} (maxItems)"]
        elif node.get("type") == "object" and ("additionalProperties" in node or not node.get("properties")):
            unbounded += [] if "maxProperties" in node else [f"{path} (maxProperties)"]
    assert unbounded == []


def test_every_cel_rule_compiles_and_has_a_message(crd_validator: Any, crd: dict[str, Any]) -> None:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            rules.extend(node.get("x-kubernetes-validations") or ())
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(root)
    assert len(rules) >= 6
    for rule in rules:
        assert rule["message"]
        crd_validator.program(rule["rule"])  # raises on a syntax error


def test_the_example_is_valid_for_both(crd_validator: Any) -> None:
    manifest = yaml.safe_load((EXAMPLES / "evaluation.yaml").read_text())
    assert crd_validator.errors(manifest) == []
    _, spec = spec_module.parse_manifest(manifest)
    assert spec.tasks == ("arc_easy", "lambada_openai")


VALID = [
    {},
    {"batchSize": "auto"},
    {"batchSize": "auto:4", "maxBatchSize": 64},
    {"batchSize": 16},
    {"seed": 42},
    {"seed": "0,None,1234,7"},
    {"limit": 0.25},
    {"limit": 100},
    {"samples": {"arc_easy": [0, 3, 5]}},
    {"applyChatTemplate": True, "fewshotAsMultiturn": True, "chatTemplate": "tool_use"},
    {"numFewshot": 5, "genKwargs": {"temperature": 0, "max_gen_toks": 32}, "metadata": {"max_seq_lengths": [4096]}},
    {"resources": {"nodes": 2, "gpusPerNode": 8, "cpu": "32", "memory": "256Gi"}},
    {"resources": {"cpu": 4, "memory": "500M"}},
    {"hfTokenSecret": {"name": "hf"}, "cache": {"pvc": "c", "offline": True, "datasetsDir": "datasets"}},
    {"output": {"pvc": "o", "path": "team/runs"}},
    {
        "podTemplate": {
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "labels": {"kueue.x-k8s.io/queue-name": "eval"},
            "priorityClassName": "low",
        }
    },
    {"backoffLimit": 3, "activeDeadlineSeconds": 3600, "suspend": True},
]


@pytest.mark.parametrize("fields", VALID, ids=[",".join(f) or "minimal" for f in VALID])
def test_valid_specs_pass_both(crd_validator: Any, make_evaluation: Any, fields: dict[str, Any]) -> None:
    manifest = make_evaluation(**fields)
    assert crd_validator.errors(manifest) == []
    spec = spec_module.parse_spec(manifest["spec"])
    # What the operator hands to the runner is itself a valid spec.
    assert crd_validator.errors(make_evaluation(**spec.to_dict())) == []
    assert spec_module.parse_spec(spec.to_dict()) == spec


INVALID = [
    ({"fewshotAsMultiturn": True}, "applyChatTemplate"),
    ({"chatTemplate": "x"}, "applyChatTemplate"),
    ({"limit": 5, "samples": {"arc_easy": [1]}}, "exclude"),
    ({"batchSize": "big"}, "batchSize"),
    ({"batchSize": 0}, "batchSize"),
    ({"batchSize": "auto:0"}, "batchSize"),
    ({"seed": "1,2"}, "seed"),
    ({"seed": True}, "seed"),
    ({"numFewshot": -1}, "numFewshot"),
    ({"limit": 0}, "limit"),
    ({"tasks": []}, "tasks"),
    ({"resources": {"nodes": 0}}, "nodes"),
    ({"resources": {"memory": "lots"}}, "memory"),
    ({"output": {"path": "../elsewhere"}}, "path"),
    ({"cache": {"datasetsDir": "/abs"}}, "datasetsDir"),
    ({"cache": {"localDatasetsDir": "a/../../b"}}, "localDatasetsDir"),
    ({"hfTokenSecret": {"key": "k"}}, "name"),
    ({"activeDeadlineSeconds": 0}, "activeDeadlineSeconds"),
]


@pytest.mark.parametrize("fields,word", INVALID, ids=[w + str(i) for i, (_, w) in enumerate(INVALID)])
def test_invalid_specs_fail_both(crd_validator: Any, make_evaluation: Any, fields: dict[str, Any], word: str) -> None:
    manifest = make_evaluation(**fields)
    assert crd_validator.errors(manifest), f"the CRD accepted {fields}"
    with pytest.raises(UserError) as caught:
        spec_module.parse_spec(manifest["spec"])
    assert word.lower() in str(caught.value).lower()


def test_defaults_match_the_parser(crd_validator: Any, make_evaluation: Any) -> None:
    defaulted = crd_validator.defaulted(make_evaluation())["spec"]
    assert spec_module.parse_spec(defaulted) == spec_module.parse_spec(make_evaluation()["spec"])
    assert defaulted["resources"] == {"nodes": 1, "gpusPerNode": 1}


def test_a_full_status_is_valid(crd_validator: Any, make_evaluation: Any) -> None:
    results = {
        "results": {
            "arc_easy": {
                "alias": "arc_easy",
                "acc,none": 0.5,
                "acc_stderr,none": 0.01,
                "acc_norm,none": 0.6,
                "acc_norm_stderr,none": "N/A",
            }
        },
        "groups": {"mmlu": {"acc,none": 0.3, "acc_stderr,none": 0.02}},
        "n-samples": {"arc_easy": {"original": 2376, "effective": 100}},
        "versions": {"arc_easy": 1.0},
    }
    status = condense_results(RunResults.from_lmeval_dict(results))
    status.update(conditions.accepted(None, job_name="ev-g1", generation=1, now=NOW, new_run=True))
    status = {k: v for k, v in status.items() if v is not None}
    status.update(
        phase="Succeeded",
        model="m",
        outputDir="/output/ev/g1",
        startTime="2025-01-02T03:04:05Z",
        rerunToken="2026-12-01",
        progress={"requestsDone": 10, "requestsTotal": 10, "summary": "100%"},
    )
    manifest = make_evaluation()
    manifest["status"] = status
    assert crd_validator.errors(manifest) == []
    manifest["status"]["phase"] = "Done"
    assert crd_validator.errors(manifest)


def test_every_status_field_the_runner_writes_is_declared(
    crd: dict[str, Any], crd_validator: Any, make_evaluation: Any, tmp_path: Path
) -> None:
    """The API server prunes what the schema does not declare: an undeclared field would be
    dropped without a word (the scores, or whether the files were written)."""
    from assay.runner.results.status_sink import FileStatusSink

    sink = FileStatusSink(tmp_path / "status.json", min_interval=0)
    sink.progress(0, 10)
    sink.progress(5, 10)
    assert sink.finished(
        RunResults.from_lmeval_dict(
            {
                "results": {"arc_easy": {"acc,none": 0.5, "acc_stderr,none": 0.01}},
                "n-samples": {"arc_easy": {"original": 10, "effective": 10}},
                "versions": {"arc_easy": 1},
            }
        )
    )
    sink.output(written=False, message="The results files could not be written under /output/ev/g1 " + "(x) " * 400)
    declared = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(sink.status) <= set(declared), set(sink.status) - set(declared)
    assert set(sink.status["outputFiles"]) <= set(declared["outputFiles"]["properties"])
    assert set(sink.status["timing"]) == set(declared["timing"]["properties"])
    accepted = conditions.accepted(None, job_name="ev-g1", generation=1, now=NOW, new_run=True)
    status = {**{k: v for k, v in accepted.items() if v is not None}, **sink.status}
    status.update(
        job_status.from_job(
            status,
            {"metadata": {"name": "ev-g1"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}},
            generation=1,
            now=NOW,
        )
    )
    assert status["phase"] == "Succeeded" and status["conditions"][-1]["type"] == "OutputWritten"
    manifest = make_evaluation()
    manifest["status"] = status
    assert crd_validator.errors(manifest) == []


def test_every_schema_key_is_a_string() -> None:
    """YAML 1.1 reads a bare `n`, `y`, `on` or `off` key as a boolean: the API server would then prune the field."""

    def keys(node: Any, path: str) -> list[str]:
        if isinstance(node, dict):
            bad = [f"{path}/{key!r}" for key in node if not isinstance(key, str)]
            return bad + [k for key, value in node.items() for k in keys(value, f"{path}/{key}")]
        if isinstance(node, list):
            return [k for index, value in enumerate(node) for k in keys(value, f"{path}[{index}]")]
        return []

    for path in (Path(__file__).resolve().parents[3] / "deploy" / "crds").glob("*.yaml"):
        assert keys(yaml.safe_load(path.read_text()), path.name) == []
