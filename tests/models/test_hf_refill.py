"""generate_until through a batch that refills: finished rows leave, the next prompts take their places.

Expected generations come from lm-eval's HFLM (or transformers' own generate, one prompt at a
time) on the same model and requests, never hard-coded. The stop strings are cut from
lm-eval's own free generations, so rows finish at different steps and the batch refills.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from assay.runner.models.hf import refill
from assay.runner.models.hf.model import HFLM
from model_fixtures import long_models  # noqa: F401  (fixtures)
from tests.models.hf_parity import gen_both, lm_eval_hf

pytestmark = pytest.mark.parity

PROMPTS = [
    "Once upon a time",
    "The weather today is",
    "Question: why is the sky blue?\nAnswer:",
    "A list of fruit: apples, pears,",
    "word " * 40,
    "In the beginning",
    "Dear Sir or Madam,",
    "1, 2, 3, 4,",
    "The quick brown fox",
]


def _record_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every RefillDecoder.run (slots, prompts) and every admission's newcomer count (the real code runs)."""
    runs: list[dict[str, Any]] = []
    real_run, real_admit = refill.RefillDecoder.run, refill.RefillDecoder._admit

    def run(self: Any, prompts: Any, **kwargs: Any) -> None:
        runs.append({"prompts": len(prompts), "slots": kwargs["slots"], "admissions": []})
        real_run(self, prompts, **kwargs)

    def admit(self: Any, cache: Any, mask: Any, cur: int, free: list[int], newcomers: Any, *rest: Any) -> Any:
        runs[-1]["admissions"].append(len(newcomers))
        return real_admit(self, cache, mask, cur, free, newcomers, *rest)

    monkeypatch.setattr(refill.RefillDecoder, "run", run)
    monkeypatch.setattr(refill.RefillDecoder, "_admit", admit)
    return runs


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_rows_that_stop_early_are_refilled_and_generations_equal_lm_evals(
    long_models: dict[str, Path],
    kind: str,
    batch_size: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = dict(pretrained=str(long_models[kind]), device="cpu", batch_size=batch_size)
    ours, theirs = HFLM(**args), lm_eval_hf().HFLM(**args)
    free, _ = gen_both(ours, theirs, [(p, {"until": [], "max_gen_toks": 16}) for p in PROMPTS])
    # a stop string from inside each free generation, at a different place per row; one list
    # for all (one group of generation kwargs, so one batch), each row meets its own first
    stops = [text[2 + i % 5 : 4 + i % 5] or "\n" for i, text in enumerate(free)]
    reqs = [(p, {"until": stops, "max_gen_toks": 16}) for p in PROMPTS]
    runs = _record_runs(monkeypatch)
    mine, ref = gen_both(ours, theirs, reqs)
    assert mine == ref
    assert mine != free  # the stops cut (the test would not show a refill otherwise)
    assert len(runs) == 1 and runs[0]["prompts"] == len(PROMPTS) and runs[0]["slots"] == batch_size
    # the first admission fills the slots; every later one takes a finished row's place
    assert runs[0]["admissions"][0] == batch_size and sum(runs[0]["admissions"]) == len(PROMPTS)
    assert len(runs[0]["admissions"]) > 1


def test_prompts_in_any_order_and_a_cache_that_moves_give_generates_tokens(
    long_models: dict[str, Path],
) -> None:
    """Short prompts first, for enough steps that the rows reach the cache's end and move back to
    its start, then a long one (longer than the rows' span by then: they move right to make room
    for it): each row's tokens are what transformers' generate gives that prompt alone."""
    lm = HFLM(pretrained=str(long_models["llama"]), device="cpu", batch_size=2)
    short = sorted((lm.tokenizer(p)["input_ids"] for p in PROMPTS if len(p) < 50), key=len)
    prompts = short + [lm.tokenizer("word " * 100)["input_ids"]]
    expected = []
    with torch.no_grad():
        for prompt in prompts:
            out = lm.model.generate(
                torch.tensor([prompt]), max_new_tokens=40, do_sample=False, pad_token_id=lm.tokenizer.pad_token_id
            )
            expected.append(out[0, len(prompt) :].tolist())
    got: dict[int, list[int]] = {}
    decoder = refill.RefillDecoder(
        lm.model, device=torch.device("cpu"), autocast=torch.no_grad, prefix_for=lambda rows, upcoming: None
    )
    moves: list[int] = []
    real_move = refill._Batch.move_to

    def move(self: Any, new_cur: int) -> None:
        moves.append(new_cur - self.cur)
        real_move(self, new_cur)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(refill._Batch, "move_to", move)
        decoder.run(
            list(enumerate(prompts)),
            slots=2,
            max_gen_toks=40,
            stopped=lambda tokens: False,
            on_row=lambda index, tokens: got.__setitem__(index, tokens),
        )
    eos = refill.eos_ids(lm.model)
    assert [got[i] for i in range(len(prompts))] == [
        row[: next((n + 1 for n, t in enumerate(row) if t in eos), len(row))] for row in expected
    ]
    assert any(step > 0 for step in moves) and any(step < 0 for step in moves), moves


def test_only_plain_greedy_decoding_refills(long_models: dict[str, Path]) -> None:
    lm = HFLM(pretrained=str(long_models["gpt2"]), device="cpu", batch_size=2)
    assert refill.refill_blocker(lm.model, {"do_sample": False}) is None
    assert refill.refill_blocker(lm.model, {"do_sample": True, "temperature": 0.7}) == "not greedy decoding"
    assert refill.refill_blocker(lm.model, {"do_sample": False, "num_beams": 2}) == "not greedy decoding"
    lm.model.generation_config.repetition_penalty = 1.3
    assert "repetition_penalty" in str(refill.refill_blocker(lm.model, {"do_sample": False}))
