"""Requests the HF backend's tests send (log-likelihoods, multiple choice, shared prefixes), and
counters of what reached the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import LoglikelihoodRequest
from tests.models.hf_parity import ll_both

LL_REQUESTS = [
    LoglikelihoodRequest(c, x)
    for c, x in [
        ("The capital of France is", " Paris"),
        ("", "Hello world"),
        ("Question: what is 2+2?\nAnswer:", " A"),  # one shared context: a cache group
        ("Question: what is 2+2?\nAnswer:", " B"),
        ("Question: what is 2+2?\nAnswer:", " four"),
        ("Trailing space moves ", "to the continuation"),
        ("many words " * 30, "after a context longer than max_length"),
        ("Short", " and sweet."),
        ("Hello world", " Hello world"),
        ("Hello world", " Hello"),  # a prefix of the one before: a logits-cache group member
        ("Nothing follows", ""),  # empty continuation: answered without the model
        ("One more", " request"),
        ("And another", " one here"),
    ]
]


def sent_counter(lm: HFLM, method: str) -> list[int]:
    """Sizes of the calls the cache makes to `lm.method`: what the model was sent."""
    sizes: list[int] = []
    original = getattr(lm, method)

    def counted(requests: Sequence[Any], **kwargs: Any) -> Any:
        sizes.append(len(requests))
        return original(requests, **kwargs)

    setattr(lm, method, counted)
    return sizes


# ARC-like: one few-shot context, four multi-token choices, twice (two documents)
MC_REQUESTS = [
    (ctx, choice)
    for ctx in ("Q: Which is a planet?\nA: Mars\n\nQ: Which one is a metal?\nA:", "Q: What do plants need?\nA:")
    for choice in (" iron bar", " a wooden stick", " water and light", " glass")
]


def _count_forwards(model: torch.nn.Module) -> tuple[list[tuple[int, ...]], Any]:
    shapes: list[tuple[int, ...]] = []
    handle = model.register_forward_pre_hook(
        lambda _m, args, kwargs: shapes.append(tuple((args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True,
    )
    return shapes, handle


def scored_counting_body_passes(ours: Any, theirs: Any, requests: Any) -> tuple[Any, Any, list[tuple[int, ...]]]:
    """Both backends' loglikelihoods of `requests`, and the input shape of each pass of our model body."""
    shapes, handle = _count_forwards(ours.model.base_model)
    try:
        mine, ref = ll_both(ours, theirs, requests)
    finally:
        handle.remove()
    return mine, ref, shapes


# MMLU-like: five documents on one few-shot prefix, each asking for one of four one-token letters
# (lm-eval folds a document's letters into one row), and one with a three-token answer.
# The test models have 64 positions: the shots are 30 tokens, each document about 40.
SHOTS = "".join(f"Q: which letter is {n} after A?\nA: {'ABCD'[n % 4]}\n\n" for n in range(2))


PREFIX_REQUESTS = [
    (f"{SHOTS}Q: {question}\nA:", letter)
    for question in ("what is two and two?", "which is a planet?", "who wrote it?", "why?", "how far is it?")
    for letter in (" A", " B", " C", " D")
] + [(f"{SHOTS}Q: name a colour.\nA:", " dark blue sky")]
