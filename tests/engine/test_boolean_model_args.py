"""Boolean model_args read the same way by every backend and by `assay run`: one strict reading.

`bool("no")` is true, so a backend that converted text that way loaded a model repository's
code for `trust_remote_code=no` (and `on`, `y`, `enabled`) while a gate reading the words
another way let it through. These hold each backend's record to `assay.booleans`.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from assay.errors import UsageError, UserError
from assay.run_arguments import parse_bool_word
from assay.runner.models.api.args import APIArgs
from assay.runner.models.args_check import check_model_args
from assay.runner.models.hf.args import HFArgs
from assay.runner.models.model_args import parse_model_args
from assay.runner.models.vllm.args import VLLMArgs
from assay.runner.results.loggers import HubLogger

REFUSED = ["on", "y", "enabled", "off"]
HF = {"pretrained": "some/model"}
API = {"base_url": "http://127.0.0.1:1/v1/completions", "tokenizer_backend": "none"}


def _records(flag: str, value: Any) -> dict[str, Any]:
    """Each backend's record of `flag=value`, built as a run builds it."""
    return {
        "hf": HFArgs.from_model_args({**HF, flag: value}),
        "vllm": VLLMArgs.from_model_args({**HF, flag: value}),
        "api": APIArgs.from_model_args("local-completions", {**API, flag: value}),
    }


@pytest.mark.parametrize("value", REFUSED)
@pytest.mark.parametrize("model", ["hf", "vllm", "local-completions"])
def test_every_backend_refuses_trust_remote_code_words_that_are_not_booleans(model: str, value: str) -> None:
    args = {**(API if model == "local-completions" else HF), "trust_remote_code": value}
    with pytest.raises(UserError) as caught:
        check_model_args(model, args)
    assert "model_args trust_remote_code must be true or false" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("no", False), ("No", False), ("0", False), (0, False), ("yes", True), (1, True), ("TRUE", True), (True, True)],
)
def test_every_backend_reads_accepted_words_alike(value: Any, expected: bool) -> None:
    records = _records("trust_remote_code", value)
    assert {name: record.trust_remote_code for name, record in records.items()} == dict.fromkeys(records, expected)


def test_vllm_hands_the_engine_a_real_boolean() -> None:
    assert VLLMArgs.from_model_args({**HF, "trust_remote_code": "no"}).engine_kwargs()["trust_remote_code"] is False
    assert VLLMArgs.from_model_args({**HF, "enforce_eager": "yes"}).engine_kwargs()["enforce_eager"] is True
    with pytest.raises(UserError, match="model_args enforce_eager must be"):
        VLLMArgs.from_model_args({**HF, "enforce_eager": "on"})


@pytest.mark.parametrize("flag", ["truncation", "logits_cache", "use_fast_tokenizer", "parallelize", "add_bos_token"])
def test_hf_flags_are_strict_and_none_stays_lm_eval_s_unset(flag: str) -> None:
    assert getattr(HFArgs.from_model_args({**HF, flag: "no"}), flag) is False
    with pytest.raises(UserError, match=f"model_args {flag} must be"):
        HFArgs.from_model_args({**HF, flag: "on"})
    assert not getattr(HFArgs.from_model_args({**HF, flag: None}), flag)


def test_hf_from_pretrained_flags_are_strict() -> None:
    assert HFArgs.from_model_args({**HF, "local_files_only": "no"}).extra["local_files_only"] is False
    with pytest.raises(UserError, match="model_args low_cpu_mem_usage must be"):
        HFArgs.from_model_args({**HF, "low_cpu_mem_usage": "enabled"})


def test_api_verify_certificate_no_turns_verification_off_and_off_is_refused() -> None:
    assert APIArgs.from_model_args("local-completions", {**API, "verify_certificate": "no"}).verify_certificate is False
    assert APIArgs.from_model_args("local-completions", {**API, "verify_certificate": None}).verify_certificate is True
    with pytest.raises(UserError, match="model_args verify_certificate must be"):
        APIArgs.from_model_args("local-completions", {**API, "verify_certificate": "off"})


@pytest.mark.parametrize("value", REFUSED)
def test_assay_run_model_args_text_is_refused_before_anything_loads(value: str) -> None:
    """`--model_args pretrained=x,trust_remote_code=on`, parsed as `assay run` parses it."""
    parsed = parse_model_args(f"pretrained=some/model,trust_remote_code={value}")
    with pytest.raises(UserError, match="trust_remote_code must be true or false"):
        check_model_args("hf", parsed)
    assert (
        HFArgs.from_model_args(parse_model_args("pretrained=some/model,trust_remote_code=no")).trust_remote_code
        is False
    )


def test_a_flag_s_boolean_word_is_strict() -> None:
    assert parse_bool_word("False") is False and parse_bool_word("yes") is True
    with pytest.raises(argparse.ArgumentTypeError, match="true or false"):
        parse_bool_word("on")


def test_hub_public_repo_no_is_private_and_on_is_refused() -> None:
    assert HubLogger({"public_repo": "no"}).public is False
    with pytest.raises(UsageError, match="--hf_hub_log_args public_repo must be"):
        HubLogger({"public_repo": "on"})


def test_hf_combinations_are_judged_on_the_read_flags() -> None:
    """`enable_thinking: "false"` (a spec's JSON string) is false: it needs no think_end_token."""
    assert HFArgs.from_model_args({**HF, "enable_thinking": "false"}).enable_thinking is False
    assert HFArgs.from_model_args({**HF, "parallelize": "no", "tp_plan": "auto"}).parallelize is False
    with pytest.raises(UserError, match="tp_plan and parallelize=True cannot both be set"):
        HFArgs.from_model_args({**HF, "parallelize": "yes", "tp_plan": "auto"})
