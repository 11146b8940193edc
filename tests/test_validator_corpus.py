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
from assay.errors import UsageError, UserError
from assay.runner.models.api_args import APIArgs
from assay.runner.models.hf_args import HFArgs
from assay.runner.models.vllm_args import VLLMArgs
from assay.runner.options import EvalOptions
from assay.spec import parse_spec
from tests.operator.conftest import CRD_PATH, CrdValidator

REPO = Path(__file__).resolve().parents[1]

# (value, accepted?) — the expectation is the CRD's; test_the_crd_says_what_the_corpus_says checks that.
BATCH_SIZES: list[tuple[Any, bool]] = [
    (1, True), (8, True), (2**31, True), ("8", True), ("64", True), ("auto", True), ("auto:1", True),
    ("auto:4", True), ("auto:10", True), ("auto:" + "1" * 27, True),  # 32 characters: the CRD's maxLength
    ("auto:" + "1" * 28, False), ("1" * 33, False),
    ("08", False), ("0", False), (0, False), (-3, False), ("-3", False), ("+8", False), ("auto:01", False),
    ("auto:0", False), ("auto:", False), ("auto:-1", False), ("autoXYZ", False), ("AUTO", False), ("Auto", False),
    ("4.5", False), (4.5, False), (4.0, False), ("1e3", False), (True, False), (False, False), ("", False),
    (" 8", False), ("8 ", False), ("8\n", False), ("auto\n", False), (" auto", False), ("auto:4 ", False),
    ("\u0663", False),  # an Arabic-Indic digit: str.isdigit() says yes, the CRD's [0-9] says no
    ([8], False), ({"size": 8}, False),
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
    return {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": "ev"}, "spec": _spec(**fields)}


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
    cli.run_options(cli.resolve_run_config(args))


def _flag_text(value: Any) -> str | None:
    """The value as typed on a command line; None where a command line cannot carry it."""
    return value if isinstance(value, str) else None if isinstance(value, (list, dict)) else str(value)


def _validators(value: Any, tmp_path: Path) -> dict[str, tuple[bool, str]]:
    said = {
        "spec (apply --local, operator)": _accepts(parse_spec, _spec(batchSize=value)),
        "hf model_args": _accepts(HFArgs.from_model_args, {"pretrained": "m", "batch_size": value}),
        "vllm model_args": _accepts(VLLMArgs.from_model_args, {"pretrained": "m", "batch_size": value}),
        "api model_args": _accepts(APIArgs.from_model_args, "local-completions",
                                   {"base_url": "http://127.0.0.1:9/v1/completions", "model": "m", "batch_size": value}),
        "chat api model_args": _accepts(APIArgs.from_model_args, "local-chat-completions",
                                        {"base_url": "http://127.0.0.1:9/v1/chat/completions", "batch_size": value}),
        "simple_evaluate": _accepts(EvalOptions.build, batch_size=value),
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
    assert not disagree, f"batch_size {value!r}: the CRD {'accepts' if accepted else 'refuses'} it; these do not: {disagree}"
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
    assert parse_spec(_spec(batchSize="8")).batch_size == 8
    assert parse_spec(_spec(batchSize="auto:4")).batch_size == "auto:4"
    assert VLLMArgs.from_model_args({"pretrained": "m", "batch_size": "auto:4"}).batch_size is None
    assert APIArgs.from_model_args("local-completions", {"base_url": "http://h/v1/completions", "model": "m",
                                                         "batch_size": "auto"}).batch_size == 1
    hf = HFArgs.from_model_args({"pretrained": "m", "batch_size": "auto:4"}).batch_size
    assert (hf.fixed, hf.schedule) == (None, 4)


def test_the_command_line_refuses_a_bad_batch_size_in_one_line_without_a_traceback() -> None:
    done = subprocess.run([sys.executable, "-m", "assay", "run", "--tasks", "x", "--batch_size", "08"],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--batch_size '08' is not a batch size" in done.stderr


# --- the counts next to it: maxBatchSize, limit and numFewshot --------------------------------------

# Only numbers: a command line's text and a YAML number are different inputs for these.
COUNTS: list[tuple[str, str, Any, bool]] = [
    ("maxBatchSize", "--max_batch_size", 1, True), ("maxBatchSize", "--max_batch_size", 64, True),
    ("maxBatchSize", "--max_batch_size", 0, False), ("maxBatchSize", "--max_batch_size", -3, False),
    ("maxBatchSize", "--max_batch_size", 1.5, False),
    ("limit", "--limit", 0, False), ("limit", "--limit", 0.0, False), ("limit", "--limit", -1, False),
    ("limit", "--limit", -0.5, False), ("limit", "--limit", 1e-9, True), ("limit", "--limit", 0.5, True),
    ("limit", "--limit", 1, True), ("limit", "--limit", 1.5, True), ("limit", "--limit", 100, True),
    ("numFewshot", "--num_fewshot", -1, False), ("numFewshot", "--num_fewshot", 0, True),
    ("numFewshot", "--num_fewshot", 5, True), ("numFewshot", "--num_fewshot", 1.5, False),
]


@pytest.mark.parametrize("field,flag,value,accepted", COUNTS, ids=[f"{f}={v!r}" for f, _, v, _ in COUNTS])
def test_counts_agree_with_the_crd(crd: CrdValidator, field: str, flag: str, value: Any, accepted: bool) -> None:
    errors = crd.errors(_manifest(**{field: value}))
    assert (errors == []) is accepted, errors
    assert _accepts(parse_spec, _spec(**{field: value}))[0] is accepted
    assert _accepts(_run_flags, [flag, str(value)])[0] is accepted


@pytest.mark.parametrize("value,accepted", [(1, True), (64, True), (0, False), (-3, False), ("8", False), (True, False)])
def test_a_backend_max_batch_size_follows_spec_max_batch_size(value: Any, accepted: bool) -> None:
    assert _accepts(parse_spec, _spec(maxBatchSize=value))[0] is accepted
    assert _accepts(HFArgs.from_model_args, {"pretrained": "m", "max_batch_size": value})[0] is accepted
    assert _accepts(VLLMArgs.from_model_args, {"pretrained": "m", "max_batch_size": value})[0] is accepted
