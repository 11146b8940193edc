"""generate_until's shared prompt prefix, computed once, and caches written in place.

Few-shot prompts often begin with the same shots (fixed or `first_n` samplers, a shared
description): gsm8k_cot's eight fixed examples are most of each prompt. lm-eval runs the
whole prompt of every row through the model; here the prefix that a batch's prompts share
(with the next batch's, so that it can be kept) runs once, and each batch starts from its
keys and values. (gsm8k's default sampler draws different shots per document: nothing to share.)

A batch row is laid out as [prefix][padding][own tokens] instead of lm-eval's
[padding][prefix][own tokens]. Position ids come from the attention mask's running sum (HF
generate's rule, the same one lm-eval's left padding relies on), so every real token keeps
the position lm-eval gives it, padding stays masked, and the row is as wide as lm-eval's:
generated tokens start at the same index and `max_length` is the same. Attention sums run
over the cached keys in a different order, which moves logits by float rounding only.

Each batch's cache is a static cache sized to the batch's final length and written in place
(HF's dynamic cache concatenates every layer's keys on every step: half of a decode step's
time on a small model). Where a static cache cannot be built, the prefix's dynamic cache is
copied and repeated per row instead. transformers' automatic torch.compile, which a static
cache would switch on for CUDA, stays off.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Sequence
from typing import Any

import torch
import transformers

from assay.runner.models.hf import document_passes, shared_context

log = logging.getLogger(__name__)

MIN_SHARED_TOKENS = document_passes.MIN_SHARED_PREFIX  # one threshold for scoring and generation
# generate kwargs under which one prompt is one row and the logits processors see only tokens
_ROW_PRESERVING_KWARGS = frozenset({"do_sample", "temperature", "top_k", "top_p", "min_p"})


def prefix_blocker(model: Any, *, backend: str) -> str | None:
    """Why this model's prompts cannot start from a shared prefix's cache, or None."""
    blocker = shared_context.sharing_blocker(model, backend=backend)
    if blocker is not None:
        return blocker
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return "the model takes no position ids (padding inside a row would move positions)"
    if getattr(getattr(model, "generation_config", None), "cache_implementation", None) is not None:
        return "the model's generation config picks its own cache"
    return None


def common_prefix(rows: Sequence[Sequence[int]]) -> list[int]:
    """The longest token prefix of every row that leaves each row at least one token of its own."""
    if not rows:
        return []
    first = rows[0]
    length = min([len(row) - 1 for row in rows] + [document_passes.common_length(first, row) for row in rows[1:]])
    return list(first[: max(length, 0)])


def starts_all(prefix: Sequence[int], rows: Sequence[Sequence[int]]) -> bool:
    """Every row begins with `prefix` and has at least one token after it."""
    size = len(prefix)
    return all(len(row) > size and list(row[:size]) == list(prefix) for row in rows)


def kwargs_allow_prefix(hf_kwargs: dict[str, Any]) -> bool:
    """True when generate's kwargs keep one row per prompt and need no cache of their own."""
    return set(hf_kwargs) <= _ROW_PRESERVING_KWARGS


class PrefixCache:
    """One prompt prefix's keys and values, and the per-batch caches started from it."""

    def __init__(self, model: Any, prefix: list[int], *, device: torch.device) -> None:
        self.model = model
        self.prefix = prefix
        self.device = device
        self.cache_arg = cache_kwarg(model)
        ids = torch.tensor([prefix], dtype=torch.long, device=device)
        # only the cache is wanted: no positions × vocabulary logits for the prefix
        keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        self.cache = model(ids, use_cache=True, **keep)[self.cache_arg]

    def fits(self, rows: Sequence[Sequence[int]]) -> bool:
        """Every row begins with the prefix and has tokens after it (left truncation breaks this)."""
        return starts_all(self.prefix, rows)

    def layout(self, rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, attention mask) with the prefix first, then padding, then each row's own tokens."""
        size = len(self.prefix)
        width = size + max(len(row) - size for row in rows)
        ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        prefix = torch.tensor(self.prefix, dtype=torch.long)
        for b, row in enumerate(rows):
            own = torch.tensor(list(row[size:]), dtype=torch.long)
            ids[b, :size], mask[b, :size] = prefix, 1
            ids[b, width - len(own) :], mask[b, width - len(own) :] = own, 1
        return ids.to(self.device), mask.to(self.device)

    def batch_cache(self, batch: int, max_length: int) -> dict[str, Any]:
        """generate's cache kwargs for a batch of `batch` rows that grows to `max_length` tokens."""
        positions = torch.arange(len(self.prefix), device=self.device)
        static = static_cache_kwargs(self.model, max_length)
        if static:
            cache = static[self.cache_arg]
            try:
                for index, layer in enumerate(self.cache.layers):
                    keys, values = layer.keys, layer.values
                    cache.update(
                        keys.expand(batch, *keys.shape[1:]),
                        values.expand(batch, *values.shape[1:]),
                        index,
                        {"cache_position": positions},
                    )
                return static
            except (AttributeError, TypeError, ValueError) as err:  # an older cache API
                log.debug("static cache not filled (%s); repeating the dynamic one", err)
        repeated = copy.deepcopy(self.cache)
        repeated.batch_repeat_interleave(batch)
        return {self.cache_arg: repeated}


def cache_kwarg(model: Any) -> str:
    """The name under which the model's forward (and so generate) takes a cache."""
    return shared_context.cache_arg(inspect.signature(model.forward).parameters) or "past_key_values"


def static_cache_kwargs(model: Any, max_length: int) -> dict[str, Any]:
    """generate's kwargs for an empty static cache of `max_length` tokens; {} where this transformers has none.

    `disable_compile`: with a static cache on CUDA, transformers would otherwise torch.compile
    the forward on its own — fused kernels round differently from lm-eval's eager run, and
    every batch width would compile again.
    """
    try:
        cache = transformers.StaticCache(config=model.config, max_cache_len=max_length)
    except (AttributeError, TypeError, ValueError) as err:  # transformers 4.x wants batch size, dtype, device
        log.debug("no static cache (%s)", err)
        return {}
    return {cache_kwarg(model): cache, "disable_compile": True}
