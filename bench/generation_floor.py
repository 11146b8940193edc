"""The bench's "of floor" figure for a generation row (see `prefix_floor` for the others).

The floor runs every distinct prompt token (the nodes of a trie of the prompts, each cut to
its last max_length - max_gen_toks tokens as the generator cuts it: a shared few-shot prefix
counts once) and every generated token through the model body once, at the per-token price
of one batch x length pass (batch size x the median prompt length), and the LM head once per
generated token at its price. Generated tokens are counted from the texts returned: the
tokens of the text, plus the one that completed a stop string where the row stopped short of
max_gen_toks. A decode step's own costs (one token per row per forward, the per-step
overhead, attention over the whole prompt per token) are not in that price.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from assay.runner.models.hf.generation import DEFAULT_MAX_GEN_TOKS, normalize_gen_kwargs


def measure(
    lm: Any,
    recorder: Any,
    batch: int,
    per_token_seconds: Callable[[Any, int, int], tuple[float, float]],
    trie_counts: Callable[[Any, int], tuple[int, int]],
) -> dict[str, Any]:
    """The row's floor and what it is made of, as `prefix_floor.measure` gives it for the other rows."""
    requests, texts = recorder.requests["generate_until"], recorder.outputs
    lm_s, body_s_run = recorder.seconds, recorder.body_seconds  # before this function's own forwards
    prompts = lm.encoder.encode_many([r.context for r in requests])
    cut_prompts, generated = [], 0
    for request, prompt, text in zip(requests, prompts, texts, strict=False):
        _, max_gen_toks, _ = normalize_gen_kwargs(request.gen_kwargs, DEFAULT_MAX_GEN_TOKS)
        cut_prompts.append(prompt[-(lm.max_length - max_gen_toks) :])
        tokens = len(lm.encoder.encode(text, add_special_tokens=False))
        generated += min(max_gen_toks, tokens + (1 if tokens < max_gen_toks else 0))
    nodes, _ = trie_counts([(p, []) for p in cut_prompts], lm.max_length)
    length = int(statistics.median(len(p) for p in cut_prompts))
    body_s, head_s = per_token_seconds(lm, batch, max(length, 1))
    return {
        "floor_s": (nodes + generated) * body_s + generated * head_s,
        "lm_s": lm_s,
        "body_s": body_s_run,
        "trie_tokens": nodes + generated,
        "scored_positions": generated,
        "request_tokens": sum(len(p) for p in cut_prompts) + generated,
        "median_length": length,
        "body_s_per_token": body_s,
        "head_s_per_token": head_s,
        "generated_tokens": generated,
        "prompt_trie_tokens": nodes,
    }
