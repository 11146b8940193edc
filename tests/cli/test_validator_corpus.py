"""One corpus of values, every validator: the CRD (schema + CEL), the spec parser, `assay run`'s
flags and each backend's model_args must say yes or no together.

The CRD is the API (the API server enforces it; `assay apply --local` and the operator use
`assay.spec.parse_spec`; the command line and model_args use `assay.batch_size`). They used to
disagree: the command line took "08" and "auto:01", the vLLM and API backends took 0 and -3.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay import cli
from assay.errors import UserError
from assay.runner.models.api.args import APIArgs
from assay.runner.models.hf.args import HFArgs
from assay.runner.models.vllm.args import VLLMArgs
from assay.spec import parse_spec
from tests.operator.conftest import CRD_PATH, CrdValidator

REPO = Path(__file__).resolve().parents[2]

# (value, accepted?) — the expectation is the CRD's; test_the_crd_says_what_the_corpus_says checks that.
BATCH_SIZES: list[tuple[Any, bool]] = [
    (1, True),
    (8, True),
    (2**31, True),
    ("8", True),
    ("64", True),
    ("auto", True),
    ("auto:1", True),
    ("auto:4", True),
    ("auto:10", True),
    ("auto:" + "1" * 27, True),  # 32 characters: the CRD's maxLength
    ("auto:" + "1" * 28, False),
    ("1" * 33, False),
    ("08", False),
    ("0", False),
    (0, False),
    (-3, False),
    ("-3", False),
    ("+8", False),
    ("auto:01", False),
    ("auto:0", False),
    ("auto:", False),
    ("auto:-1", False),
    ("autoXYZ", False),
    ("AUTO", False),
    ("Auto", False),
    ("4.5", False),
    (4.5, False),
    (4.0, False),
    ("1e3", False),
    (True, False),
    (False, False),
    ("", False),
    (" 8", False),
    ("8 ", False),
    ("8\n", False),
    ("auto\n", False),
    (" auto", False),
    ("auto:4 ", False),
    ("\u0663", False),  # an Arabic-Indic digit: str.isdigit() says yes, the CRD's [0-9] says no
    ([8], False),
    ({"size": 8}, False),
]
IDS = [repr(value)[:20] for value, _ in BATCH_SIZES]


@pytest.fixture(scope="module")
def crd() -> CrdValidator:
    pytest.importorskip("jsonschema", reason="jsonschema validates the CRD's OpenAPI schema (pip install jsonschema)")
    pytest.importorskip("celpy", reason="cel-python evaluates the CRD's CEL rules (pip install cel-python)")
    return CrdValidator(yaml.safe_load(CRD_PATH.read_text()))


def _spec(**fields: Any) -> dict[str, Any]:
    return {"model": "hf", "modelArgs": {"pretrained": "EleutherAI/pythia-160m"}, "tasks": ["arc_easy"], **fields}


def _manifest(**fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "ev"},
        "spec": _spec(**fields),
    }


def _accepts(check: Any, *args: Any, **kwargs: Any) -> tuple[bool, str]:
    """(accepted, the error's text); only the project's one-sentence errors count as a refusal."""
    try:
        check(*args, **kwargs)
    except UserError as err:  # UsageError is a UserError
        return False, str(err)
    return True, ""


def _run_flags(argv: list[str]) -> None:
    """`assay run`'s parsing, start to end, without running: argparse, resolution, the options record."""
    parser = cli.build_parser()
    args = parser.parse_args(cli.normalize_argv(["run", "--tasks", "x", *argv], parser))
    cli.resolve_run_config(args).run_options()


def _simple_evaluate_options(**kwargs: Any) -> None:
    """simple_evaluate's checks of its keywords, start to end, with the engine's `run` stubbed out."""
    from assay.runner import evaluator

    real = evaluator.run
    evaluator.run = lambda *args, **kw: None  # type: ignore[assignment]
    try:
        evaluator.simple_evaluate("hf", tasks=["x"], **kwargs)
    finally:
        evaluator.run = real


def _flag_text(value: Any) -> str | None:
    """The value as typed on a command line; None where a command line cannot carry it."""
    return value if isinstance(value, str) else None if isinstance(value, (list, dict)) else str(value)


def _validators(value: Any, tmp_path: Path) -> dict[str, tuple[bool, str]]:
    said = {
        "spec (apply --local, operator)": _accepts(parse_spec, _spec(batchSize=value)),
        "hf model_args": _accepts(HFArgs.from_model_args, {"pretrained": "m", "batch_size": value}),
        "vllm model_args": _accepts(VLLMArgs.from_model_args, {"pretrained": "m", "batch_size": value}),
        "api model_args": _accepts(
            APIArgs.from_model_args,
            "local-completions",
            {"base_url": "http://127.0.0.1:9/v1/completions", "model": "m", "batch_size": value},
        ),
        "chat api model_args": _accepts(
            APIArgs.from_model_args,
            "local-chat-completions",
            {"base_url": "http://127.0.0.1:9/v1/chat/completions", "batch_size": value},
        ),
        "simple_evaluate": _accepts(_simple_evaluate_options, batch_size=value),
    }
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"tasks": ["x"], "batch_size": value}))
    said["assay run --config"] = _accepts(_run_flags, ["--config", str(config)])
    text = _flag_text(value)
    if text is not None:
        said["assay run --batch_size"] = _accepts(_run_flags, ["--batch_size", text])
    return said


@pytest.mark.parametrize("value,accepted", BATCH_SIZES, ids=IDS)
def test_the_crd_says_what_the_corpus_says(crd: CrdValidator, value: Any, accepted: bool) -> None:
    errors = crd.errors(_manifest(batchSize=value))
    assert (errors == []) is accepted, errors


@pytest.mark.parametrize("value,accepted", BATCH_SIZES, ids=IDS)
def test_every_validator_agrees_with_the_crd_on_batch_size(value: Any, accepted: bool, tmp_path: Path) -> None:
    said = _validators(value, tmp_path)
    disagree = {name: message for name, (yes, message) in said.items() if yes is not accepted}
    assert not disagree, (
        f"batch_size {value!r}: the CRD {'accepts' if accepted else 'refuses'} it; these do not: {disagree}"
    )
    for name, (_, message) in said.items():
        if not accepted:  # one sentence naming the input and the accepted forms
            assert repr(value) in message and '"auto:N"' in message, (name, message)
            assert "\n" not in message.rstrip("\n").replace(repr(value), "") and message.endswith("."), (name, message)


def test_a_refused_batch_size_is_named_where_it_came_from(tmp_path: Path) -> None:
    said = _validators("auto:01", tmp_path)
    assert said["spec (apply --local, operator)"][1].startswith("spec.batchSize 'auto:01' is not a batch size")
    assert said["assay run --batch_size"][1].startswith("--batch_size 'auto:01'")
    assert said["vllm model_args"][1].startswith("model_args batch_size 'auto:01'")


def test_an_accepted_batch_size_means_the_same_everywhere() -> None:
    assert parse_spec(_spec(batchSize="8")).batch_size.given == 8  # the spec holds the parsed record
    assert parse_spec(_spec(batchSize="auto:4")).batch_size.given == "auto:4"
    assert VLLMArgs.from_model_args({"pretrained": "m", "batch_size": "auto:4"}).batch_size is None
    assert (
        APIArgs.from_model_args(
            "local-completions", {"base_url": "http://h/v1/completions", "model": "m", "batch_size": "auto"}
        ).batch_size
        == 1
    )
    hf = HFArgs.from_model_args({"pretrained": "m", "batch_size": "auto:4"}).batch_size
    assert (hf.fixed, hf.schedule) == (None, 4)


def test_the_command_line_refuses_a_bad_batch_size_in_one_line_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "assay", "run", "--tasks", "x", "--batch_size", "08"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--batch_size '08' is not a batch size" in done.stderr


# --- the counts next to it: maxBatchSize, limit and numFewshot --------------------------------------

# Only numbers: a command line's text and a YAML number are different inputs for these.
COUNTS: list[tuple[str, str, Any, bool]] = [
    ("maxBatchSize", "--max_batch_size", 1, True),
    ("maxBatchSize", "--max_batch_size", 64, True),
    ("maxBatchSize", "--max_batch_size", 0, False),
    ("maxBatchSize", "--max_batch_size", -3, False),
    ("maxBatchSize", "--max_batch_size", 1.5, False),
    ("limit", "--limit", 0, False),
    ("limit", "--limit", 0.0, False),
    ("limit", "--limit", -1, False),
    ("limit", "--limit", -0.5, False),
    ("limit", "--limit", 1e-9, True),
    ("limit", "--limit", 0.5, True),
    ("limit", "--limit", 1, True),
    ("limit", "--limit", 1.5, False),  # lm-eval runs int(1.5) = 1 document without a word
    ("limit", "--limit", 2.0, True),
    ("limit", "--limit", 0.999, True),
    ("limit", "--limit", 100, True),
    ("numFewshot", "--num_fewshot", -1, False),
    ("numFewshot", "--num_fewshot", 0, True),
    ("numFewshot", "--num_fewshot", 5, True),
    ("numFewshot", "--num_fewshot", 1.5, False),
]


@pytest.mark.parametrize("field,flag,value,accepted", COUNTS, ids=[f"{f}={v!r}" for f, _, v, _ in COUNTS])
def test_counts_agree_with_the_crd(crd: CrdValidator, field: str, flag: str, value: Any, accepted: bool) -> None:
    errors = crd.errors(_manifest(**{field: value}))
    assert (errors == []) is accepted, errors
    assert _accepts(parse_spec, _spec(**{field: value}))[0] is accepted
    assert _accepts(_run_flags, [flag, str(value)])[0] is accepted


@pytest.mark.parametrize(
    "value,accepted", [(1, True), (64, True), (0, False), (-3, False), ("8", False), (True, False)]
)
def test_a_backend_max_batch_size_follows_spec_max_batch_size(value: Any, accepted: bool) -> None:
    assert _accepts(parse_spec, _spec(maxBatchSize=value))[0] is accepted
    assert _accepts(HFArgs.from_model_args, {"pretrained": "m", "max_batch_size": value})[0] is accepted
    assert _accepts(VLLMArgs.from_model_args, {"pretrained": "m", "max_batch_size": value})[0] is accepted


# --- bounds and Kubernetes names: every field a user fills ------------------------------------------
# The CRD bounds every string, list and map, and checks label keys and values, object names and
# tolerations and affinity as Kubernetes checks a pod's. `assay apply --local` must refuse what the
# API server refuses, and only that. The ids say what each value is; the expectations are Kubernetes'.

SUBDOMAIN_253 = ".".join(["b" * 63] * 3 + ["b" * 61])
LABEL_KEYS: list[tuple[str, bool]] = [
    ("a", True),
    ("a/b", True),
    ("example.com/x", True),
    ("kueue.x-k8s.io/queue-name", True),
    ("A_b.c-D", True),
    ("app.kubernetes.io/name", True),
    ("a" * 63, True),
    (f"{SUBDOMAIN_253}/{'n' * 63}", True),
    ("a" * 64, False),
    ("-bad", False),
    ("bad-", False),
    ("_a", False),
    ("UPPER/x", False),
    ("Example.com/x", False),
    ("/x", False),
    ("a/", False),
    ("a/b/c", False),
    ("", False),
    ("a b", False),
    ("a\n", False),
    ("é", False),
    (f"c{SUBDOMAIN_253}/x", False),  # a prefix of 254 characters
    ("example..com/x", False),
    ("-example.com/x", False),
    ("example.com-/x", False),
    ("example.com/" + "n" * 64, False),
]
LABEL_VALUES: list[tuple[str, bool]] = [
    ("", True),
    ("a", True),
    ("A.b_c-9", True),
    ("a" * 63, True),
    ("a" * 64, False),
    ("-a", False),
    ("a-", False),
    ("a b", False),
    ("a\n", False),
    ("a/b", False),
    ("é", False),
]


def _in_labels(key: str) -> dict[str, Any]:
    return {"podTemplate": {"labels": {key: "v"}}}


def _in_node_selector(key: str) -> dict[str, Any]:
    return {"podTemplate": {"nodeSelector": {key: "v"}}}


def _in_match_labels(key: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {key: "v"}}, "topologyKey": "kubernetes.io/hostname"}
    return {
        "podTemplate": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    }


def _as_toleration_key(key: str) -> dict[str, Any]:
    # an empty key is a toleration of every taint, and valid: the rule is tested on its own below
    return {"podTemplate": {"tolerations": [{"key": key or "-", "operator": "Exists"}]}}


def _as_node_requirement_key(key: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "Exists"}]}
    return {
        "podTemplate": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
            }
        }
    }


def _as_topology_key(key: str) -> dict[str, Any]:
    term = {"podAffinityTerm": {"topologyKey": key}, "weight": 10}
    return {"podTemplate": {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}}}


def _as_match_label_key(key: str) -> dict[str, Any]:
    term = {"labelSelector": {}, "topologyKey": "zone", "matchLabelKeys": [key]}
    return {"podTemplate": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}}


KEY_PLACES = [
    _in_labels,
    _in_node_selector,
    _in_match_labels,
    _as_toleration_key,
    _as_node_requirement_key,
    _as_topology_key,
    _as_match_label_key,
]


def _value_in_labels(value: str) -> dict[str, Any]:
    return {"podTemplate": {"labels": {"app": value}}}


def _value_in_node_selector(value: str) -> dict[str, Any]:
    return {"podTemplate": {"nodeSelector": {"pool": value}}}


def _value_in_toleration(value: str) -> dict[str, Any]:
    return {"podTemplate": {"tolerations": [{"key": "gpu", "value": value, "effect": "NoSchedule"}]}}


def _value_in_selector(value: str) -> dict[str, Any]:
    term = {
        "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", value]}]},
        "weight": 1,
    }
    return {"podTemplate": {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}}}


VALUE_PLACES = [_value_in_labels, _value_in_node_selector, _value_in_toleration, _value_in_selector]


def _toleration(**fields: Any) -> dict[str, Any]:
    return {"podTemplate": {"tolerations": [fields]}}


def _node_affinity(**fields: Any) -> dict[str, Any]:
    return {"podTemplate": {"affinity": {"nodeAffinity": fields}}}


def _required_nodes(*terms: Any) -> dict[str, Any]:
    return _node_affinity(requiredDuringSchedulingIgnoredDuringExecution={"nodeSelectorTerms": list(terms)})


def _node_expression(operator: str, values: list[str] | None = None) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": "nvidia.com/gpu.product", "operator": operator}
    if values is not None:
        expression["values"] = values
    return _required_nodes({"matchExpressions": [expression]})


def _pod_term(**fields: Any) -> dict[str, Any]:
    term = {"topologyKey": "kubernetes.io/hostname", **fields}
    return {
        "podTemplate": {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    }


def _pod_expression(operator: str, values: list[str] | None = None) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": "app", "operator": operator}
    if values is not None:
        expression["values"] = values
    return _pod_term(labelSelector={"matchExpressions": [expression]})


def _endpoint(**fields: Any) -> dict[str, Any]:
    return {
        "model": "local-completions",
        "modelArgs": {},
        "endpoint": {"url": "http://vllm.ml:8000/v1/completions", **fields},
    }


def _many(n: int, value: Any = "v") -> dict[str, Any]:
    return {f"k{i}": value for i in range(n)}


def _url(length: int) -> str:
    head = "http://h/"
    return head + "p" * (length - len(head))


FIELDS: list[tuple[str, dict[str, Any], bool]] = [
    # maps of free-form arguments: 256 entries each
    ("modelArgs 256", {"modelArgs": _many(256)}, True),
    ("modelArgs 257", {"modelArgs": _many(257)}, False),
    ("genKwargs 256", {"genKwargs": _many(256)}, True),
    ("genKwargs 257", {"genKwargs": _many(257)}, False),
    ("metadata 256", {"metadata": _many(256)}, True),
    ("metadata 257", {"metadata": _many(257)}, False),
    # samples: 1000 tasks, 100000 indices a task (a 200 KiB list is admitted)
    ("samples 200 KiB", {"samples": {"arc_easy": list(range(10_000, 44_000))}}, True),
    ("samples 100000", {"samples": {"arc_easy": list(range(100_000))}}, True),
    ("samples 100001", {"samples": {"arc_easy": list(range(100_001))}}, False),
    ("samples 1000 tasks", {"samples": {f"t{i}": [0] for i in range(1000)}}, True),
    ("samples 1001 tasks", {"samples": {f"t{i}": [0] for i in range(1001)}}, False),
    ("samples -1", {"samples": {"arc_easy": [0, -1]}}, False),
    ("samples task 256", {"samples": {"t" * 256: [0]}}, True),
    ("samples task 257", {"samples": {"t" * 257: [0]}}, False),
    ("samples task ''", {"samples": {"": [0]}}, False),
    # tasks
    ("tasks 1000", {"tasks": [f"t{i}" for i in range(1000)]}, True),
    ("tasks 1001", {"tasks": [f"t{i}" for i in range(1001)]}, False),
    ("task 256", {"tasks": ["t" * 256]}, True),
    ("task 257", {"tasks": ["t" * 257]}, False),
    # text
    ("systemInstruction 65536", {"systemInstruction": "s" * 65536}, True),
    ("systemInstruction 65537", {"systemInstruction": "s" * 65537}, False),
    ("systemInstruction ''", {"systemInstruction": ""}, True),
    ("chatTemplate 65536", {"applyChatTemplate": True, "chatTemplate": "c" * 65536}, True),
    ("chatTemplate 65537", {"applyChatTemplate": True, "chatTemplate": "c" * 65537}, False),
    ("chatTemplate ''", {"applyChatTemplate": True, "chatTemplate": ""}, False),
    ("seed 128", {"seed": "1" * 122 + ",1,1,1"}, True),
    ("seed 129", {"seed": "1" * 123 + ",1,1,1"}, False),
    ("seed newline", {"seed": "0,1,2,3\n"}, False),
    ("cpu 64", {"resources": {"cpu": "1" * 64}}, True),
    ("cpu 65", {"resources": {"cpu": "1" * 65}}, False),
    ("memory newline", {"resources": {"memory": "64Gi\n"}}, False),
    ("image 1024", {"image": "r/" + "i" * 1022}, True),
    ("image 1025", {"image": "r/" + "i" * 1023}, False),
    ("image ''", {"image": ""}, False),
    # object names (DNS subdomains of 253) and Secret and ConfigMap keys
    ("secret hf.token", {"hfTokenSecret": {"name": "hf.token"}}, True),
    ("secret 253", {"hfTokenSecret": {"name": SUBDOMAIN_253}}, True),
    ("secret 254", {"hfTokenSecret": {"name": "c" + SUBDOMAIN_253}}, False),
    ("secret Hf", {"hfTokenSecret": {"name": "Hf"}}, False),
    ("secret hf_token", {"hfTokenSecret": {"name": "hf_token"}}, False),
    ("secret ''", {"hfTokenSecret": {"name": ""}}, False),
    ("secret hf\\n", {"hfTokenSecret": {"name": "hf\n"}}, False),
    ("secret key .a", {"hfTokenSecret": {"name": "hf", "key": ".a"}}, True),
    ("secret key a..b_C-1", {"hfTokenSecret": {"name": "hf", "key": "a..b_C-1"}}, True),
    ("secret key 253", {"hfTokenSecret": {"name": "hf", "key": "k" * 253}}, True),
    ("secret key 254", {"hfTokenSecret": {"name": "hf", "key": "k" * 254}}, False),
    ("secret key .", {"hfTokenSecret": {"name": "hf", "key": "."}}, False),
    ("secret key ..", {"hfTokenSecret": {"name": "hf", "key": ".."}}, False),
    ("secret key ..a", {"hfTokenSecret": {"name": "hf", "key": "..a"}}, False),
    ("secret key a/b", {"hfTokenSecret": {"name": "hf", "key": "a/b"}}, False),
    ("secret key ''", {"hfTokenSecret": {"name": "hf", "key": ""}}, False),
    ("cache.pvc", {"cache": {"pvc": "models"}}, True),
    ("cache.pvc Models", {"cache": {"pvc": "Models"}}, False),
    ("output.pvc 254", {"output": {"pvc": "c" + SUBDOMAIN_253}}, False),
    ("output.path 1025", {"output": {"path": "p" * 1025}}, False),
    ("taskSources 16", {"taskSources": [{"configMap": f"c{i}"} for i in range(16)]}, True),
    ("taskSources 17", {"taskSources": [{"configMap": f"c{i}"} for i in range(17)]}, False),
    ("taskSources My_Tasks", {"taskSources": [{"configMap": "My_Tasks"}]}, False),
    ("priorityClassName", {"podTemplate": {"priorityClassName": "low"}}, True),
    ("priorityClassName ''", {"podTemplate": {"priorityClassName": ""}}, False),
    ("priorityClassName Low", {"podTemplate": {"priorityClassName": "Low"}}, False),
    # the endpoint
    ("url 2048", _endpoint(url=_url(2048)), True),
    ("url 2049", _endpoint(url=_url(2049)), False),
    ("servedModel 1024", _endpoint(servedModel="m" * 1024), True),
    ("servedModel 1025", _endpoint(servedModel="m" * 1025), False),
    ("tokenizer 1025", _endpoint(tokenizer="t" * 1025), False),
    ("apiKeySecret", _endpoint(apiKeySecret={"name": "openai", "key": "api-key"}), True),
    ("apiKeySecret name", _endpoint(apiKeySecret={"name": "OpenAI"}), False),
    ("caBundle key", _endpoint(caBundle={"configMap": "ca", "key": "../ca.crt"}), False),
    ("caBundle configMap", _endpoint(caBundle={"configMap": "ca bundle"}), False),
    # pod labels, node selector and annotations: 64 entries
    ("labels 64", {"podTemplate": {"labels": _many(64)}}, True),
    ("labels 65", {"podTemplate": {"labels": _many(65)}}, False),
    ("nodeSelector 65", {"podTemplate": {"nodeSelector": _many(65)}}, False),
    ("label value 5", {"podTemplate": {"labels": {"a": 5}}}, False),
    ("annotations 64", {"podTemplate": {"annotations": _many(64, "a" * 3072)}}, True),
    ("annotations 65", {"podTemplate": {"annotations": _many(65)}}, False),
    ("annotation 3073", {"podTemplate": {"annotations": {"a": "a" * 3073}}}, False),
    ("annotation value free", {"podTemplate": {"annotations": {"note": "any text: / \n é"}}}, True),
    ("annotation key UPPER/x", {"podTemplate": {"annotations": {"UPPER.Example/x": "v"}}}, True),
    ("annotation key -bad", {"podTemplate": {"annotations": {"-bad": "v"}}}, False),
    ("annotation key a/b/c", {"podTemplate": {"annotations": {"a/b/c": "v"}}}, False),
    ("annotation key 64", {"podTemplate": {"annotations": {"a" * 64: "v"}}}, False),
    # tolerations
    ("toleration Exists", _toleration(key="gpu", operator="Exists"), True),
    ("toleration every taint", _toleration(operator="Exists"), True),
    ("toleration key '' Exists", _toleration(key="", operator="Exists"), True),
    ("toleration Equal", _toleration(key="gpu", operator="Equal", value="h100", effect="NoSchedule"), True),
    ("toleration Equal by default", _toleration(key="gpu", value="h100"), True),
    ("toleration no key Equal", _toleration(operator="Equal"), False),
    ("toleration no key", _toleration(effect="NoSchedule"), False),
    ("toleration Exists with value", _toleration(key="gpu", operator="Exists", value="x"), False),
    ("toleration Exists value ''", _toleration(key="gpu", operator="Exists", value=""), True),
    ("toleration operator In", _toleration(key="gpu", operator="In"), False),
    ("toleration operator exists", _toleration(key="gpu", operator="exists"), False),
    ("toleration effect Evict", _toleration(key="gpu", operator="Exists", effect="Evict"), False),
    ("toleration effect ''", _toleration(key="gpu", operator="Exists", effect=""), False),
    ("tolerationSeconds", _toleration(key="gpu", operator="Exists", effect="NoExecute", tolerationSeconds=300), True),
    ("tolerationSeconds no effect", _toleration(key="gpu", operator="Exists", tolerationSeconds=300), False),
    (
        "tolerationSeconds NoSchedule",
        _toleration(key="gpu", operator="Exists", effect="NoSchedule", tolerationSeconds=3),
        False,
    ),
    (
        "tolerationSeconds '300'",
        _toleration(key="gpu", operator="Exists", effect="NoExecute", tolerationSeconds="300"),
        False,
    ),
    (
        "tolerationSeconds 1.5",
        _toleration(key="gpu", operator="Exists", effect="NoExecute", tolerationSeconds=1.5),
        False,
    ),
    (
        "tolerations 64",
        {"podTemplate": {"tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(64)]}},
        True,
    ),
    (
        "tolerations 65",
        {"podTemplate": {"tolerations": [{"key": f"k{i}", "operator": "Exists"} for i in range(65)]}},
        False,
    ),
    ("toleration not a mapping", {"podTemplate": {"tolerations": ["gpu"]}}, False),
    # node affinity
    ("node In", _node_expression("In", ["H100", "a100-80gb"]), True),
    ("node In no values", _node_expression("In", []), False),
    ("node NotIn unset values", _node_expression("NotIn"), False),
    ("node Exists", _node_expression("Exists"), True),
    ("node DoesNotExist []", _node_expression("DoesNotExist", []), True),
    ("node Exists with values", _node_expression("Exists", ["x"]), False),
    ("node Gt one", _node_expression("Gt", ["5"]), True),
    ("node Lt two", _node_expression("Lt", ["5", "6"]), False),
    ("node Gt none", _node_expression("Gt"), False),
    ("node operator Equal", _node_expression("Equal", ["x"]), False),
    ("node values 256", _node_expression("In", [f"n{i}" for i in range(256)]), True),
    ("node values 257", _node_expression("In", [f"n{i}" for i in range(257)]), False),
    ("node value -x", _node_expression("In", ["-x"]), False),
    ("node terms 16", _required_nodes(*[{}] * 16), True),
    ("node terms 17", _required_nodes(*[{}] * 17), False),
    ("node terms none", _required_nodes(), False),
    ("node selector without terms", _node_affinity(requiredDuringSchedulingIgnoredDuringExecution={}), False),
    ("node expressions 17", _required_nodes({"matchExpressions": [{"key": "k", "operator": "Exists"}] * 17}), False),
    ("node expression no key", _required_nodes({"matchExpressions": [{"operator": "Exists"}]}), False),
    (
        "matchFields",
        _required_nodes({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}),
        True,
    ),
    (
        "matchFields uid",
        _required_nodes({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}),
        False,
    ),
    (
        "matchFields two",
        _required_nodes({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}),
        False,
    ),
    (
        "matchFields Exists",
        _required_nodes({"matchFields": [{"key": "metadata.name", "operator": "Exists", "values": ["a"]}]}),
        False,
    ),
    (
        "matchFields Node_1",
        _required_nodes({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["Node_1"]}]}),
        False,
    ),
    (
        "preferred weight 1",
        _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 1, "preference": {}}]),
        True,
    ),
    (
        "preferred weight 100",
        _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 100, "preference": {}}]),
        True,
    ),
    (
        "preferred weight 0",
        _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 0, "preference": {}}]),
        False,
    ),
    (
        "preferred weight 101",
        _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 101, "preference": {}}]),
        False,
    ),
    ("preferred no preference", _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 5}]), False),
    (
        "preferred 17",
        _node_affinity(preferredDuringSchedulingIgnoredDuringExecution=[{"weight": 5, "preference": {}}] * 17),
        False,
    ),
    # pod affinity and anti-affinity
    ("pod term", _pod_term(labelSelector={"matchLabels": {"app": "vllm"}}), True),
    (
        "pod term no topologyKey",
        {
            "podTemplate": {
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}
            }
        },
        False,
    ),
    ("pod term topologyKey ''", _pod_term(topologyKey=""), False),
    ("pod In", _pod_expression("In", ["a", "b"]), True),
    ("pod In none", _pod_expression("In", []), False),
    ("pod Exists", _pod_expression("Exists"), True),
    ("pod DoesNotExist values", _pod_expression("DoesNotExist", ["a"]), False),
    ("pod Gt", _pod_expression("Gt", ["1"]), False),
    ("pod value a/b", _pod_expression("In", ["a/b"]), False),
    ("namespaces", _pod_term(namespaces=["team-a", "b"]), True),
    ("namespaces Team", _pod_term(namespaces=["Team"]), False),
    ("namespace 63", _pod_term(namespaces=["n" * 63]), True),
    ("namespace 64", _pod_term(namespaces=["n" * 64]), False),
    ("namespaces 65", _pod_term(namespaces=[f"n{i}" for i in range(65)]), False),
    ("namespaceSelector", _pod_term(namespaceSelector={"matchLabels": {"team": "ml"}}), True),
    ("namespaceSelector key", _pod_term(namespaceSelector={"matchLabels": {"Team/x": "ml"}}), False),
    ("matchLabels 65", _pod_term(labelSelector={"matchLabels": _many(65)}), False),
    ("mismatchLabelKeys 16", _pod_term(labelSelector={}, mismatchLabelKeys=[f"k{i}" for i in range(16)]), True),
    ("mismatchLabelKeys 17", _pod_term(labelSelector={}, mismatchLabelKeys=[f"k{i}" for i in range(17)]), False),
    (
        "pod weighted",
        {
            "podTemplate": {
                "affinity": {
                    "podAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}
                        ]
                    }
                }
            }
        },
        True,
    ),
    (
        "pod weighted no term",
        {
            "podTemplate": {
                "affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50}]}}
            }
        },
        False,
    ),
    # baseline and gate
    ("baseline evaluation", {"baseline": {"evaluation": "model-v1"}}, True),
    ("baseline path", {"baseline": {"path": "runs/v1/g1"}}, True),
    ("baseline both", {"baseline": {"evaluation": "v1", "path": "runs"}}, False),
    ("baseline neither", {"baseline": {}}, False),
    ("baseline Name", {"baseline": {"evaluation": "Model_V1"}}, False),
    ("baseline path ..", {"baseline": {"path": "runs/../../etc"}}, False),
    ("baseline path /", {"baseline": {"path": "/etc"}}, False),
    ("baseline path 1024", {"baseline": {"path": "p" * 1024}}, True),
    ("baseline path 1025", {"baseline": {"path": "p" * 1025}}, False),
    ("gate alone", {"gate": {"maxDrop": 0.01}}, False),
    (
        "gate full",
        {
            "baseline": {"evaluation": "v1"},
            "gate": {
                "maxDrop": 0.01,
                "maxDropFor": {"mmlu*:acc": 0.02, "arc_easy": 0},
                "alpha": 0.1,
                "equivalenceMargin": 0.01,
                "strict": True,
                "iterations": 5000,
            },
        },
        True,
    ),
    ("gate iterations 0", {"baseline": {"evaluation": "v1"}, "gate": {"iterations": 0}}, False),
    ("gate iterations 1e6", {"baseline": {"evaluation": "v1"}, "gate": {"iterations": 1_000_000}}, True),
    ("gate iterations 1e6+1", {"baseline": {"evaluation": "v1"}, "gate": {"iterations": 1_000_001}}, False),
    ("gate iterations 2.5", {"baseline": {"evaluation": "v1"}, "gate": {"iterations": 2.5}}, False),
    ("gate maxDrop -0.1", {"baseline": {"evaluation": "v1"}, "gate": {"maxDrop": -0.1}}, False),
    ("gate alpha 0", {"baseline": {"evaluation": "v1"}, "gate": {"alpha": 0}}, False),
    ("gate alpha 0.5", {"baseline": {"evaluation": "v1"}, "gate": {"alpha": 0.5}}, False),
    ("gate alpha 0.49", {"baseline": {"evaluation": "v1"}, "gate": {"alpha": 0.49}}, True),
    ("gate maxDropFor a=b", {"baseline": {"evaluation": "v1"}, "gate": {"maxDropFor": {"a=b": 0.1}}}, False),
    ("gate maxDropFor a:b:c", {"baseline": {"evaluation": "v1"}, "gate": {"maxDropFor": {"a:b:c": 0.1}}}, False),
    ("gate maxDropFor :acc", {"baseline": {"evaluation": "v1"}, "gate": {"maxDropFor": {":acc": 0.1}}}, False),
    ("gate maxDropFor -1", {"baseline": {"evaluation": "v1"}, "gate": {"maxDropFor": {"mmlu": -1}}}, False),
    (
        "gate maxDropFor 257",
        {"baseline": {"evaluation": "v1"}, "gate": {"maxDropFor": {f"t{i}": 0 for i in range(257)}}},
        False,
    ),
    ("gate margin -1", {"baseline": {"evaluation": "v1"}, "gate": {"equivalenceMargin": -1}}, False),
    ("gate strict 'yes'", {"baseline": {"evaluation": "v1"}, "gate": {"strict": "yes"}}, False),
    # sequential runs
    ("gate sequential", {"baseline": {"evaluation": "v1"}, "gate": {"sequential": True, "maxDrop": 0.02}}, True),
    ("gate sequential 'yes'", {"baseline": {"evaluation": "v1"}, "gate": {"sequential": "yes"}}, False),
    ("gate sequential alone", {"gate": {"sequential": True}}, False),
    ("stopAt 0.02", {"stopAt": {"ciHalfWidth": 0.02}}, True),
    (
        "stopAt with a gate",
        {"baseline": {"path": "r"}, "gate": {"sequential": True}, "stopAt": {"ciHalfWidth": 0.1}},
        True,
    ),
    ("stopAt 0", {"stopAt": {"ciHalfWidth": 0}}, False),
    ("stopAt 1", {"stopAt": {"ciHalfWidth": 1}}, False),
    ("stopAt -0.1", {"stopAt": {"ciHalfWidth": -0.1}}, False),
    ("stopAt '0.1'", {"stopAt": {"ciHalfWidth": "0.1"}}, False),
    ("stopAt empty", {"stopAt": {}}, False),
]
for key, ok in LABEL_KEYS:
    FIELDS += [(f"label key {key!r:.20} ({len(key)}) {place.__name__}", place(key), ok) for place in KEY_PLACES]
for value, ok in LABEL_VALUES:
    FIELDS += [
        (f"label value {value!r:.20} ({len(value)}) {place.__name__}", place(value), ok) for place in VALUE_PLACES
    ]


@pytest.mark.parametrize("fields,accepted", [(f, a) for _, f, a in FIELDS], ids=[name for name, _, _ in FIELDS])
def test_bounds_and_names_agree_with_the_crd(crd: CrdValidator, fields: dict[str, Any], accepted: bool) -> None:
    errors = crd.errors(_manifest(**fields))
    assert (errors == []) is accepted, f"the CRD {'refused' if errors else 'accepted'} it: {str(errors)[:300]}"
    yes, message = _accepts(parse_spec, _spec(**fields))
    assert yes is accepted, f"parse_spec {'accepted' if yes else 'refused'} it: {message[:300]}"
    if not accepted:  # one sentence naming the field
        assert message.startswith(("spec.", "Unknown field spec.")) and message.endswith("."), message[:300]
        assert "\n" not in message, message[:300]


def test_an_empty_toleration_key_tolerates_every_taint_only_with_exists(crd: CrdValidator) -> None:
    for operator, ok in (("Exists", True), ("Equal", False)):
        fields = _toleration(key="", operator=operator)
        assert (crd.errors(_manifest(**fields)) == []) is ok
        assert _accepts(parse_spec, _spec(**fields))[0] is ok


def test_refusals_name_the_field_and_the_fix() -> None:
    said = _accepts(parse_spec, _spec(podTemplate={"labels": {"UPPER/x": "v"}}))[1]
    assert said.startswith(
        "spec.podTemplate.labels key 'UPPER/x' is not a Kubernetes label key: use an optional lowercase"
    )
    said = _accepts(
        parse_spec, _spec(podTemplate={"tolerations": [{"key": "gpu", "operator": "Exists", "value": "x"}]})
    )[1]
    assert said == "spec.podTemplate.tolerations[0] has operator Exists, which matches any value: remove its value."
    said = _accepts(parse_spec, _spec(samples={"arc_easy": list(range(100_001))}))[1]
    assert said.startswith("spec.samples.arc_easy lists 100001 documents; keep at most 100000")
    said = _accepts(parse_spec, _spec(systemInstruction="s" * 70_000))[1]
    assert said == "spec.systemInstruction is 70000 characters long; shorten it to at most 65536."
