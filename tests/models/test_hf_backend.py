"""The hf backend gives lm-eval's HFLM numbers on the same model directory and requests.

Every expected value comes from lm_eval.models.huggingface.HFLM run here on the same tiny
model (GPT-2, a Llama whose tokenizer adds BOS, and T5), never from hard-coded numbers.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, RollingRequest
from model_fixtures import gpt2_dir, llama_dir, t5_dir  # noqa: F401  (session fixtures)
from tests.models.hf_parity import (  # noqa: F401 - model_dirs is a fixture
    TOL,
    Instance,
    assert_ll_equal,
    gen_both,
    ll_both,
    model_dirs,
    pair,
)

pytestmark = pytest.mark.parity
KINDS = ["gpt2", "llama", "t5"]
BATCHES: list[Any] = [1, 8, "auto"]

LL_REQUESTS = [
    ("The capital of France is", " Paris"),
    ("", "Hello world"),  # empty context: the prefix token stands in
    ("", "<|endoftext|> again"),
    ("Question: what is 2+2?\nAnswer:", " A"),  # multiple-choice style shared prefix
    ("Question: what is 2+2?\nAnswer:", " B"),
    ("Question: what is 2+2?\nAnswer:", " C"),
    ("Question: what is 2+2?\nAnswer:", " four and more"),
    ("Trailing space moves ", "to the continuation"),
    ("many words " * 50, "after a context longer than max_length"),
    ("Short", " and sweet."),
    ("Hello world", " Hello world"),
]
ROLLING_TEXTS = [
    "A short document.",
    "This is a longer document that needs several windows. " * 12,
    "x",
]


# -- loglikelihood ----------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("kind", KINDS)
def test_loglikelihood_matches_lm_eval(model_dirs: dict[str, Path], kind: str, batch_size: Any) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    assert_ll_equal(*ll_both(ours, theirs, LL_REQUESTS))


def test_loglikelihood_greedy_continuation_is_greedy(model_dirs: dict[str, Path]) -> None:
    ours, theirs = pair(model_dirs, "gpt2", batch_size=8)
    prompt = "The meaning of life is"
    greedy = theirs.generate_until(
        [Instance("generate_until", {}, (prompt, {"until": [], "max_gen_toks": 3}), 0)], disable_tqdm=True
    )[0]
    mine, ref = ll_both(ours, theirs, [(prompt, greedy), (prompt, greedy + " x")])
    assert_ll_equal(mine, ref)
    assert mine[0].is_greedy and ref[0][1]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_loglikelihood_without_logits_cache(model_dirs: dict[str, Path], kind: str) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=4, logits_cache=False)
    assert_ll_equal(*ll_both(ours, theirs, LL_REQUESTS))


def test_split_point_shared_prefix_fixes_lm_eval_gather(model_dirs: dict[str, Path]) -> None:
    """Two requests with the same tokens split at different points share one forward pass.

    lm-eval then reads the shorter continuation's log-probs from the *first* positions of
    the longer one (a gather bug); Assay reads the right positions, i.e. it gives lm-eval's
    own number without the logits cache.
    """
    reqs = [("The cat", " sat on"), ("The cat sat", " on")]
    ours, theirs = pair(model_dirs, "gpt2", batch_size=8)
    _, no_cache = pair(model_dirs, "gpt2", batch_size=8, logits_cache=False)
    mine = ours.loglikelihood([LoglikelihoodRequest(c, x) for c, x in reqs], disable_tqdm=True)
    ref = no_cache.loglikelihood([Instance("loglikelihood", {}, r, i) for i, r in enumerate(reqs)], disable_tqdm=True)
    assert_ll_equal(mine, ref)


@pytest.mark.parametrize("args", [{"add_bos_token": False}, {"add_bos_token": True}, {"prefix_token_id": 11}])
def test_special_token_args_match(model_dirs: dict[str, Path], args: dict[str, Any]) -> None:
    ours, theirs = pair(model_dirs, "llama", batch_size=8, **args)
    assert_ll_equal(*ll_both(ours, theirs, LL_REQUESTS))
    assert ours.tok_encode("<s>Hi there") == theirs.tok_encode("<s>Hi there")
    assert ours.tok_encode("Hi there") == theirs.tok_encode("Hi there")


def test_auto_schedule_and_max_length_arg(model_dirs: dict[str, Path]) -> None:
    ours, theirs = pair(model_dirs, "gpt2", batch_size="auto:2", max_length=24)
    assert ours.max_length == theirs.max_length == 24
    assert_ll_equal(*ll_both(ours, theirs, LL_REQUESTS))


# -- rolling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("kind", KINDS)
def test_rolling_matches_lm_eval(model_dirs: dict[str, Path], kind: str, batch_size: Any) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    mine = ours.loglikelihood_rolling([RollingRequest(t) for t in ROLLING_TEXTS], disable_tqdm=True)
    ref = theirs.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(ROLLING_TEXTS)], disable_tqdm=True
    )
    assert len(mine) == len(ref)
    for m, r in zip(mine, ref, strict=False):
        assert math.isclose(m, r, abs_tol=TOL * 10, rel_tol=1e-7), (m, r)


# -- generate_until -------------------------------------------------------------------------


def _stop_inside(text: str) -> str:
    """A stop string taken from the middle of a free generation, so that stopping happens."""
    middle = text[len(text) // 2 :].strip()
    return middle[:3] if len(middle) >= 3 else "\n"


@pytest.mark.parametrize("batch_size", BATCHES)
@pytest.mark.parametrize("kind", KINDS)
def test_generate_until_matches_lm_eval(model_dirs: dict[str, Path], kind: str, batch_size: Any) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    prompts = ["Once upon a time", "The weather today", "Question: why?\nAnswer:", "word " * 60]
    free, _ = gen_both(ours, theirs, [(p, {"until": [], "max_gen_toks": 12}) for p in prompts[:2]])
    reqs = [
        (prompts[0], {"until": [_stop_inside(free[0])], "max_gen_toks": 12}),
        (prompts[1], {"until": [_stop_inside(free[1]), "\n\n"], "max_gen_toks": 12, "do_sample": False}),
        (prompts[2], {"until": "\n", "max_gen_toks": 6, "temperature": 0.0}),
        (prompts[3], {"until": ["zzz"], "max_gen_toks": 5}),  # long prompt: left truncation
        (prompts[0], {"until": [], "max_new_tokens": 4}),
        (prompts[1], {"until": [_stop_inside(free[1])], "max_gen_toks": 12}),
    ]
    mine, ref = gen_both(ours, theirs, reqs)
    assert mine == ref


def test_generate_respects_max_gen_toks(model_dirs: dict[str, Path]) -> None:
    ours, theirs = pair(model_dirs, "gpt2", batch_size=1)
    mine, ref = gen_both(ours, theirs, [("Hello", {"until": [], "max_gen_toks": 3})])
    assert mine == ref
    assert len(ours.tokenizer.encode(mine[0])) <= 3


def test_generate_think_end_token_stripped(model_dirs: dict[str, Path]) -> None:
    _, theirs = pair(model_dirs, "gpt2", batch_size=1)
    free = theirs.generate_until(
        [Instance("generate_until", {}, ("Once upon a time", {"until": [], "max_gen_toks": 10}), 0)], disable_tqdm=True
    )[0]
    think = free.split()[1] if len(free.split()) > 1 else free.strip()[:2]
    ours, theirs = pair(model_dirs, "gpt2", batch_size=1, think_end_token=think)
    mine, ref = gen_both(ours, theirs, [("Once upon a time", {"until": [], "max_gen_toks": 10})])
    assert mine == ref


# -- metadata and chat templates ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_model_and_tokenizer_info_match(model_dirs: dict[str, Path], kind: str) -> None:
    from lm_eval.loggers.utils import add_tokenizer_info

    ours, theirs = pair(model_dirs, kind, batch_size=1)
    ref_info = theirs.get_model_info()
    ref_info["model_dtype"] = str(ref_info["model_dtype"])  # how the results JSON writes it
    assert ours.model_info() == ref_info
    storage: dict[str, Any] = {}
    add_tokenizer_info(storage, theirs)
    assert ours.tokenizer_info() == storage
    assert ours.tokenizer_name == theirs.tokenizer_name
    assert ours.max_length == theirs.max_length
    assert ours.prefix_token_id == theirs.prefix_token_id
    assert ours.eot_token_id == theirs.eot_token_id


def test_chat_template_matches(model_dirs: dict[str, Path]) -> None:
    ours, theirs = pair(model_dirs, "llama", batch_size=1)
    assert ours.chat_template(True) == theirs.chat_template(True)
    assert ours.chat_template(False) is None
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert ours.apply_chat_template(history) == theirs.apply_chat_template(history)
    with_answer = history + [{"role": "assistant", "content": "Hello"}]
    assert ours.apply_chat_template(with_answer, False) == theirs.apply_chat_template(with_answer, False)
    gpt2, _ = pair(model_dirs, "gpt2", batch_size=1)
    assert gpt2.chat_template(True) is None


# -- user errors ---------------------------------------------------------------------------------


def test_missing_model_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        HFLM(pretrained=str(tmp_path / "nope"), device="cpu")


def test_hub_id_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="hub id"):
        HFLM(pretrained="assay-tests/no-such-model-xyz", device="cpu")


def test_unknown_model_arg_is_named(gpt2_dir: Path) -> None:
    with pytest.raises(UserError, match="'dtyp'.*Did you mean dtype"):
        HFLM(pretrained=str(gpt2_dir), dtyp="float32")


@pytest.mark.parametrize(
    "args, message",
    [
        ({"dtype": "float33"}, "dtype='float33'"),
        ({"softmax_dtype": "nope"}, "softmax_dtype"),
        ({"batch_size": "big"}, "batch_size"),
        ({"batch_size": "auto:0"}, "batch_size"),
        ({"backend": "encoder"}, "backend"),
        ({"device": "cuda:7"}, "device"),
        ({"peft": "x", "delta": "y"}, "peft and delta"),
        ({"enable_thinking": True}, "think_end_token"),
    ],
)
def test_bad_model_args(gpt2_dir: Path, args: dict[str, Any], message: str) -> None:
    if args.get("device") == "cuda:7":
        import torch

        if torch.cuda.device_count() > 7:
            pytest.skip("this machine has 8 GPUs")
    with pytest.raises(UserError, match=message):
        HFLM(pretrained=str(gpt2_dir), device=args.pop("device", "cpu"), **args)


def test_max_gen_toks_beyond_max_length(model_dirs: dict[str, Path]) -> None:
    ours, _ = pair(model_dirs, "gpt2", batch_size=1)
    with pytest.raises(UserError, match="max_gen_toks"):
        ours.generate_until([GenerationRequest("Hi", {"until": [], "max_gen_toks": 500})], disable_tqdm=True)


def test_dtype_and_device_args(gpt2_dir: Path) -> None:
    import torch

    lm = HFLM(pretrained=str(gpt2_dir), dtype="bfloat16", device=None)
    assert lm.model_info()["model_dtype"] == "torch.bfloat16"
    assert lm.device.type in ("cuda", "mps", "cpu")
    lm = HFLM(pretrained=str(gpt2_dir), dtype=torch.float32, device="cpu", softmax_dtype="float64")
    assert lm.loglikelihood([LoglikelihoodRequest("Hi", " there")], disable_tqdm=True)[0].logprob < 0


# -- pieces ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_tokens", [0, 1, 5, 8, 9, 16, 17, 30])
def test_rolling_windows_match_lm_eval(n_tokens: int) -> None:
    from lm_eval import utils as lm_utils

    from assay.runner.models.token_pairs import rolling_windows

    tokens = list(range(100, 100 + n_tokens))
    ref = [
        lm_utils.make_disjoint_window(w)
        for w in lm_utils.get_rolling_token_windows(token_list=tokens, prefix_token=7, max_seq_len=8, context_len=1)
    ]
    assert rolling_windows(tokens, prefix_token=7, max_seq_len=8) == [tuple(w) for w in ref]


def test_create_from_arg_string_and_passthrough(gpt2_dir: Path) -> None:
    lm = HFLM.create_from_arg_string(
        f"pretrained={gpt2_dir},dtype=float32,attn_implementation=eager",
        {"batch_size": "auto:2", "device": "cpu", "max_batch_size": None},
    )
    assert isinstance(lm, HFLM)
    assert lm.batch_size == "auto" and lm.batch_plan.schedule == 2.0 and lm.batch_plan.max_batch_size == 64
    assert lm.tokenizer.padding_side == "right"
    lm.generate_until([GenerationRequest("Hi", {"until": ["\n"], "max_gen_toks": 2})], disable_tqdm=True)
    assert lm.tokenizer.padding_side == "right"  # left padding is only used inside generation
