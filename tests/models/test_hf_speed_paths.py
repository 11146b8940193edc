"""The hf backend's faster paths run where they should, fall back where they must, and
give lm-eval's numbers (expected values from lm-eval's HFLM on the same model, never
hard-coded).

- shared contexts: one pass over a multiple-choice context, its choices on its KV cache, or
  packed after it in the same row (`test_hf_packed_documents.py`; `cached_tails` turns that
  off where a test is about the cached path);
- rolling: the model body once, the LM head and log-softmax in chunks of positions (a block
  of the vocabulary at a time on the CPU, `test_hf_head_logprobs.py`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from assay.runner.models.hf import head_logprobs, rolling
from assay.runner.models.hf.model import HFLM
from assay.runner.models.hf.shared_context import sharing_blocker
from assay.runner.models.instance import RollingRequest
from model_fixtures import gpt2_dir, llama_dir, t5_dir  # noqa: F401  (fixtures)
from tests.models.hf_parity import assert_ll_equal, ll_both, model_dirs, pair  # noqa: F401  (fixture)
from tests.models.hf_requests import MC_REQUESTS, PREFIX_REQUESTS, _count_forwards, scored_counting_body_passes

pytestmark = pytest.mark.parity


def cached_tails(ours: HFLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents' choices on their contexts' KV cache, as for a model that takes no packed row."""
    assert ours.scorer.shared is not None
    monkeypatch.setattr(ours.scorer.shared, "_packing", None, raising=False)


def tails_packed(ours: HFLM, packed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Choices packed after their contexts (the model's probe run now, before any pass is
    counted), or on the contexts' KV cache."""
    assert ours.scorer.shared is not None
    if packed:
        assert ours.scorer.shared.packing() is not None
    else:
        cached_tails(ours, monkeypatch)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("packed", [True, False])
def test_shared_context_one_pass_per_document(
    model_dirs: dict[str, Path], kind: str, batch_size: int, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    tails_packed(ours, packed, monkeypatch)
    assert ours.speed_info() == {"shared_context": "on", "shared_prompt_prefix": "on"}
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    # the model body, which the scorer runs directly; the LM head, on scored positions alone
    shapes, handle = _count_forwards(ours.model.base_model)
    head_rows: list[int] = []
    on_head = ours.model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: head_rows.append(args[0].shape[0])
    )
    try:
        mine, ref = ll_both(ours, theirs, MC_REQUESTS)
    finally:
        handle.remove()
        on_head.remove()
    assert_ll_equal(mine, ref)
    # packed: one pass, a row per document (its context, then its choices' tails); else per
    # document the context once ([1, context tokens]), then the four choices' tails together
    # on its cache; with batch_size 8 both documents at once: the two contexts as one padded
    # batch, then the tails on their own document's row of its cache (" glass", one token, has
    # none: the context's last position is its only score)
    tails = [len(theirs._encode_pair(context, choice)[1]) - 1 for context, choice in MC_REQUESTS]
    if packed:
        assert [s[0] for s in shapes] == ([2] if batch_size == 8 else [1, 1])
    else:
        assert [s[0] for s in shapes] == ([2, sum(map(bool, tails))] if batch_size == 8 else [1, 4, 1, 4])
    # the head once per pass of documents (both in one with batch_size 8), on each document's
    # last context position once (it scores every choice's first token) and on each choice's
    # tail: no padding, no row twice
    per_document = [1 + sum(tails[:4]), 1 + sum(tails[4:])]
    assert head_rows == ([sum(per_document)] if batch_size == 8 else per_document)


# Two documents run together whose widths add past the test models' 64 positions: a long context
# with one-token choices beside a short context with long choices (each request fits the model).
LONG_CONTEXT = "Q: " + " ".join(["which of these small words is the one that comes last"] * 5) + "?\nA:"
UNEVEN_REQUESTS = [(LONG_CONTEXT, choice) for choice in (" yes sir", " no sir")] + [
    ("Q: Say it.\nA:", choice)
    for choice in (" " + " ".join(["one two three four five"] * 2), " " + " ".join(["red"] * 10))
]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("packed", [True, False])
def test_documents_together_stay_within_the_models_positions(
    model_dirs: dict[str, Path], kind: str, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=8)
    tails_packed(ours, packed, monkeypatch)
    pairs = [theirs._encode_pair(context, choice) for context, choice in UNEVEN_REQUESTS]
    longest_context, longest_tail = len(pairs[0][0]), max(len(cont) - 1 for _, cont in pairs[2:])
    assert all(len(ctx) + len(cont) <= 64 for ctx, cont in pairs) and longest_context + longest_tail > 64
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, UNEVEN_REQUESTS)
    assert_ll_equal(mine, ref)
    # packed, one pass of both documents, each at its own positions; else both contexts in one
    # pass, then all four tails
    assert [s[0] for s in shapes] == ([2] if packed else [2, 4])


# One-token choices fold into one request per document (lm-eval scores them from one row), beside
# a longer choice of the same document: in a pass of documents, each folded choice reads its own
# token at the shared context's last row.
FOLDED_REQUESTS = [
    (ctx, choice)
    for ctx in ("Q: Pick a letter.\nA:", "Q: Which letter comes first in the word apple?\nA:")
    for choice in (" A", " B", " the letter C and then D")
]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("packed", [True, False])
def test_folded_one_token_choices_beside_longer_ones_in_a_pass_of_documents(
    model_dirs: dict[str, Path], kind: str, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=8)
    tails_packed(ours, packed, monkeypatch)
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, FOLDED_REQUESTS)
    assert_ll_equal(mine, ref)
    # packed, both documents in one pass; else both contexts in one pass, then each document's
    # longer choice's tail; the folded request has none
    assert [s[0] for s in shapes] == ([2] if packed else [2, 2])
    assert len({round(m.logprob, 6) for m in mine}) == len(mine)  # every choice its own number


# One long choice among short ones: its tail in a pass of its own, not the short ones padded to it.
SPREAD_REQUESTS = [
    ("Q: Say it.\nA:", choice) for choice in (" " + " ".join(["one two three"] * 9), " yes sir", " no sir", " maybe so")
] + [("Q: Again, say it.\nA:", choice) for choice in (" yes sir", " no sir", " well no", " not now")]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_long_choice_tail_runs_apart_from_the_short_ones(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=8)
    cached_tails(ours, monkeypatch)
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, SPREAD_REQUESTS)
    # the long choice sums 27 tokens to about -290 on these random weights: the keys' order on a
    # cache moves that sum in its 7th significant digit (the same before tails were split)
    for m, r in zip(mine, ref, strict=False):
        assert math.isclose(m.logprob, r[0], rel_tol=1e-6, abs_tol=1e-5) and m.is_greedy == r[1], (m, r)
    tails = [len(theirs._encode_pair(context, choice)[1]) - 1 for context, choice in SPREAD_REQUESTS]
    assert tails[0] > 20 and max(tails[1:]) <= 3
    # the contexts, the long tail alone, then the seven short ones
    assert [s[0] for s in shapes] == [2, 1, 7] and shapes[1][1] == tails[0] and shapes[2][1] == max(tails[1:])


def test_tail_passes_cut_where_padding_costs_more_than_a_pass() -> None:
    from assay.runner.models.hf.document_passes import TAIL_PASS_COST, tail_passes

    assert tail_passes([]) == [] and tail_passes([0, 0]) == []
    assert tail_passes([2, 0, 3, 1]) == [[2, 0, 3]]  # longest first, empty tails left out, one pass
    # one tail far longer than seven short ones: padding them to it costs more than a second pass
    long = TAIL_PASS_COST
    assert tail_passes([1, long, 2, 1, 2, 1, 2, 1]) == [[1], [2, 4, 6, 0, 3, 5, 7]]
    # a little longer is not worth a pass
    assert tail_passes([3, 4, 3, 3]) == [[1, 0, 2, 3]]


def test_shared_context_off_for_seq2seq_and_without_logits_cache(model_dirs: dict[str, Path]) -> None:
    t5, _ = pair(model_dirs, "t5", batch_size=8)
    assert t5.speed_info()["shared_context"].startswith("off: encoder-decoder")
    assert t5.speed_info()["shared_prompt_prefix"].startswith("off: encoder-decoder")
    no_cache, theirs = pair(model_dirs, "gpt2", batch_size=8, logits_cache=False)
    assert no_cache.speed_info()["shared_context"] == "off: logits_cache=False"
    assert_ll_equal(*ll_both(no_cache, theirs, MC_REQUESTS))


def test_sliding_window_model_keeps_full_passes() -> None:
    config = transformers.MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
        max_position_embeddings=64,
    )
    assert (
        sharing_blocker(transformers.MistralForCausalLM(config), backend="causal")
        == "sliding-window or chunked attention"
    )
    config.sliding_window = None
    assert sharing_blocker(transformers.MistralForCausalLM(config), backend="causal") is None


def test_results_config_reports_shared_context(gpt2_dir: Path, tmp_path: Path) -> None:
    from assay.run_options import EvalOptions
    from assay.runner.evaluator import run_config

    lm = HFLM(pretrained=str(gpt2_dir), device="cpu")
    config = run_config(EvalOptions(model="hf", tasks=["x"]), lm)
    assert config["shared_context"] == "on" and config["shared_prompt_prefix"] == "on"


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_rolling_uses_chunked_head_and_matches(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=4)
    scorer = ours._rolling_scorer()
    assert scorer is not None and scorer.head.blocked
    monkeypatch.setattr(head_logprobs, "POSITIONS", 20)  # several head chunks per window
    texts = ["A document long enough for three windows of the tiny model. " * 9, "short", "Two windows here. " * 8]
    mine = ours.loglikelihood_rolling([RollingRequest(t) for t in texts], disable_tqdm=True)
    ref = theirs.loglikelihood_rolling(
        [
            pytest.importorskip("lm_eval.api.instance").Instance("loglikelihood_rolling", {}, (t,), i)
            for i, t in enumerate(texts)
        ],
        disable_tqdm=True,
    )
    for m, r in zip(mine, ref, strict=True):
        assert m == r, (m, r)  # bit for bit


def test_rolling_falls_back_when_head_is_not_the_model() -> None:
    """Gemma 2 soft-caps its logits after the head: the body → head split is refused."""
    config = transformers.Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=0.5,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    assert rolling.split_model(transformers.Gemma2ForCausalLM(config).eval(), torch.device("cpu")) is None
    config.final_logit_softcapping = None
    assert rolling.split_model(transformers.Gemma2ForCausalLM(config).eval(), torch.device("cpu")) is not None


def test_by_prefix_puts_documents_with_one_prefix_together_and_cuts_it_before_their_own_tokens() -> None:
    from assay.runner.models.hf.document_passes import MIN_SHARED_PREFIX, by_prefix

    shots, other = list(range(100, 100 + MIN_SHARED_PREFIX + 4)), list(range(500, 500 + MIN_SHARED_PREFIX + 4))
    pairs = [
        (shots + [1, 2], [9]),
        (other + [3], [9]),
        (shots + [1, 3], [9]),
        (other + [4], [9]),
        (shots[: MIN_SHARED_PREFIX - 1] + [7], [9]),  # shares too little with the others
    ]
    planned = by_prefix([[0], [1], [2], [3], [4]], pairs)
    prefix_of = {group[0]: prefix for group, prefix in planned}
    assert prefix_of[0] == prefix_of[2] == shots + [1]  # all that the two share
    assert prefix_of[1] == prefix_of[3] == other
    assert prefix_of[4] == []
    order = [group[0] for group, _ in planned]
    assert abs(order.index(0) - order.index(2)) == 1 and abs(order.index(1) - order.index(3)) == 1
    # a context that is all prefix keeps its last token to score from
    assert dict((g[0], p) for g, p in by_prefix([[0], [1]], [(shots, [9]), (shots + [5], [9])]))[0] == shots[:-1]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 4])
def test_documents_on_one_prefix_run_together_on_its_cache(
    model_dirs: dict[str, Path], kind: str, batch_size: int
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    assert ours.scorer.shared.packing() is not None  # and the packed row
    # the model body: batched rows run it directly (the LM head on their scored positions alone)
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, PREFIX_REQUESTS)
    assert_ll_equal(mine, ref)
    # the shared shots once ([1, prefix tokens]), then the six documents' own tokens: one row
    # each, `batch_size` rows per pass; with batch_size 1 one document per pass, the
    # three-token answer's last two tokens packed after its own context tokens
    assert shapes[0][0] == 1 and shapes[0][1] >= 20
    assert [s[0] for s in shapes[1:]] == ([4, 2] if batch_size == 4 else [1] * 6)


def test_each_distinct_text_is_tokenized_once_with_lm_evals_pairs(model_dirs: dict[str, Path]) -> None:
    ours, theirs = pair(model_dirs, "gpt2", batch_size=8)
    seen: list[str] = []
    tokenizer = ours.encoder.tokenizer
    original = type(tokenizer).__call__

    class Counting(type(tokenizer)):  # type: ignore[misc]
        def __call__(self, texts: Any, **kwargs: Any) -> Any:
            seen.extend(texts)
            return original(self, texts, **kwargs)

    tokenizer.__class__ = Counting
    try:
        pairs = ours.encoder.encode_pairs(MC_REQUESTS)
    finally:
        tokenizer.__class__ = Counting.__mro__[1]
    assert pairs == [tuple(theirs._encode_pair(context, choice)) for context, choice in MC_REQUESTS]
    # 8 whole texts and 2 contexts (each document's context once, not once per choice)
    assert len(seen) == len(set(seen)) == 8 + 2


def test_documents_are_ordered_and_gathered_into_passes() -> None:
    from assay.runner.models.hf import document_passes as sc

    shots = list(range(100, 140))
    pairs = [
        (shots + [1], [7]),  # 0: one request on a long prefix: a row on it
        (shots[:20] + list(range(200, 240)), [7, 8]),  # 1: a prefix under half its context
        (list(range(300, 310)), [7, 8]),  # 2: no prefix, short
        (list(range(400, 470)), [7, 8]),  # 3: no prefix, the longest
        (shots + [2, 3], [7, 8]),  # 4: a long prefix, two choices
        (shots + [2, 3], [9, 8]),
        (shots[:20] + list(range(200, 240)), [9, 8]),  # 6: document 1's other choice
        (list(range(600, 640)) + [1], [7]),  # 7: one request on another prefix
    ]
    other = list(range(600, 640))
    planned = [([0], shots), ([1, 6], shots[:20]), ([2], []), ([3], []), ([4, 5], shots), ([7], other)]
    assert [sc.on_prefix(g, p, pairs) for g, p in planned] == [True, False, False, False, True, True]
    ordered = sc.batch_order(planned, pairs)
    # the groups on a prefix first, one prefix after the other, then the rest; each longest context first
    assert [g for g, _ in ordered] == [[4, 5], [0], [7], [3], [1, 6], [2]]
    assert [(kind, [g for g, _ in items]) for kind, items in sc.passes(ordered, pairs, 2)] == [
        ("groups", [[4, 5]]),
        ("rows", [[0]]),
        ("rows", [[7]]),
        ("groups", [[3], [1, 6]]),
        ("groups", [[2]]),
    ]
    # the LM head's bound on scored positions closes a pass early
    many = [([i], []) for i in range(3)]
    long_answers = [([1, 2], list(range(sc.HEAD_POSITIONS // 2 + 1)))] * 3
    assert [len(items) for _, items in sc.passes(many, long_answers, 8)] == [1, 1, 1]
