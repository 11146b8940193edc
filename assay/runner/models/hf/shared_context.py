"""Each shared context computed once: one pass over it, then its continuations on its cache.

A multiple-choice document asks for log P(choice | context) for every choice with the same
context. lm-eval runs `context + choice` once per choice; here the context runs once with
`use_cache=True`, its last position scores each choice's first token, and the choices'
remaining tokens run as one batch on the context's keys and values, repeated per choice.
Right padding of that batch only touches positions after each choice's own tokens (causal
attention), so every scored position sees exactly the tokens lm-eval's row shows it.

Documents whose contexts begin with the same tokens (few-shot shots from `first_n` or a fixed
list, as MMLU's) go further: that prefix runs once, and each document's context runs on a
copy of its keys and values. Groups are taken in the order of their contexts' tokens, so the
documents sharing one prefix come together and one prefix cache at a time is held.

The sums inside attention are ordered differently (cached keys vs one pass), which moves a
log-likelihood by about 1e-7; the parity suite holds metrics to lm-eval's within 1e-6.

Where a model's cache cannot be shared — encoder-decoders, sliding-window attention,
recurrent or hybrid layers, a model whose forward takes no cache — `sharing_blocker` names why
and the scorer keeps full passes; the results' config reports which (`shared_context`).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from assay.runner.models.token_pairs import TokenPair

# below this many shared tokens a prefix pass saves less than it costs
MIN_SHARED_PREFIX = 16
# (log-probs [contlen, vocab], argmax [contlen]) for one request
Scored = tuple[torch.Tensor, torch.Tensor]

# model types whose layers keep a recurrent state (or mix one in): a repeated KV cache is not their state
_RECURRENT = frozenset(
    {
        "mamba",
        "mamba2",
        "falcon_mamba",
        "rwkv",
        "jamba",
        "zamba",
        "zamba2",
        "bamba",
        "recurrent_gemma",
        "granitemoehybrid",
        "nemotron_h",
        "lfm2",
        "qwen3_next",
        "falcon_h1",
        "xlstm",
        "minimax",
    }
)


def sharing_blocker(model: Any, *, backend: str) -> str | None:
    """Why this model's cache cannot be shared across continuations, or None when it can."""
    if backend != "causal":
        return "encoder-decoder model (scored in one pass per request)"
    config = getattr(model, "config", None)
    model_type = str(getattr(config, "model_type", ""))
    if model_type in _RECURRENT:
        return f"recurrent or hybrid layers ({model_type})"
    if getattr(config, "sliding_window", None) or getattr(config, "attention_chunk_size", None):
        return "sliding-window or chunked attention"
    layer_types = getattr(config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types):
        return "layers other than full attention"
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return "the model's forward signature is unknown"
    if cache_arg(params) is None:
        return "the model takes no cache argument"
    return None


def cache_arg(params: Any) -> str | None:
    """The forward argument carrying a KV cache: `cache` (transformers 5), `past_key_values` before."""
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def _by_context(reps: Sequence[int], pairs: Sequence[TokenPair], max_length: int) -> dict[tuple[int, ...], list[int]]:
    """`reps` by context, in `reps` order. Only rows that are not left-truncated qualify: a
    truncated row's context is not the same tokens across choices."""
    by_context: dict[tuple[int, ...], list[int]] = {}
    for index in reps:
        ctx, cont = pairs[index]
        if ctx and len(ctx) + len(cont) - 1 <= max_length:
            by_context.setdefault(tuple(ctx), []).append(index)
    return by_context


def plan_shared(
    reps: Sequence[int], pairs: Sequence[TokenPair], max_length: int
) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """((group, prefix) to score on a cache, the rest for batched full passes) among `reps`.

    A group is requests with one context (a document's choices) or a lone request (a
    document whose choices are one token each, which lm-eval's grouping already folds into
    one row) whose context shares a few-shot prefix with others; lone requests without one
    stay batched. The rest keep `reps` order.
    """
    candidates = list(_by_context(reps, pairs, max_length).values())
    planned = [(group, prefix) for group, prefix in by_prefix(candidates, pairs) if len(group) > 1 or prefix]
    taken = {index for group, _ in planned for index in group}
    return planned, [index for index in reps if index not in taken]


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


def by_prefix(groups: Sequence[list[int]], pairs: Sequence[TokenPair]) -> list[tuple[list[int], list[int]]]:
    """(group, the context prefix it shares with neighbouring groups, or []) in context token order.

    Sorted by context tokens, documents with one few-shot prefix are adjacent; a run of
    neighbours sharing at least MIN_SHARED_PREFIX tokens shares the run's common part, cut
    so that every context keeps a token of its own.
    """
    contexts = [pairs[group[0]][0] for group in groups]
    order = sorted(range(len(groups)), key=lambda i: contexts[i])
    runs: list[tuple[list[int], int]] = []  # (members in order, common length)
    for index in order:
        if runs:
            members, common = runs[-1]
            shared = min(common, common_length(contexts[members[-1]], contexts[index]))
            if shared >= MIN_SHARED_PREFIX:
                runs[-1] = (members + [index], shared)
                continue
        runs.append(([index], len(contexts[index])))
    planned: list[tuple[list[int], list[int]]] = []
    for members, common in runs:
        size = min([common] + [len(contexts[i]) - 1 for i in members]) if len(members) > 1 else 0
        prefix = contexts[members[0]][:size] if size >= MIN_SHARED_PREFIX else []
        planned.extend((groups[i], prefix) for i in members)
    return planned


class SharedContextScorer:
    """Scores one group of requests sharing a context: two model calls for the whole group."""

    def __init__(
        self,
        model: Any,
        *,
        device: torch.device,
        softmax_dtype: torch.dtype | None,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
        keep_logits: bool,
    ) -> None:
        self.model = model
        self.keep = {"logits_to_keep": 1} if keep_logits else {}
        self.cache_arg = cache_arg(inspect.signature(model.forward).parameters) or "past_key_values"
        self.device = device
        self.softmax_dtype = softmax_dtype
        self.autocast = autocast
        self._prefix: tuple[list[int], Any] | None = None

    def _after_prefix(self, ctx: list[int], prefix: list[int]) -> tuple[list[int], dict[str, Any]]:
        """(the context's own tokens, the forward's cache kwarg): a copy of the prefix's cache."""
        if not prefix:
            return ctx, {}
        if self._prefix is None or self._prefix[0] != prefix:
            ids = torch.tensor([prefix], dtype=torch.long).to(self.device, non_blocking=True)
            self._prefix = (prefix, self.model(ids, use_cache=True, **self.keep)[self.cache_arg])
        return ctx[len(prefix) :], {self.cache_arg: copy.deepcopy(self._prefix[1])}

    def release(self) -> None:
        """Drops the last prefix's keys and values (kept only while its documents come)."""
        self._prefix = None

    def score_group(
        self, members: Sequence[int], pairs: Sequence[TokenPair], prefix: list[int] | None = None
    ) -> list[Scored]:
        ctx = pairs[members[0]][0]
        tails = [pairs[i][1][:-1] for i in members]
        with torch.no_grad(), self.autocast():
            own, cached = self._after_prefix(ctx, prefix or [])
            context = torch.tensor([own], dtype=torch.long).to(self.device, non_blocking=True)
            first = self.model(context, use_cache=True, **cached, **self.keep)
            last = first.logits[0, -1:]  # scores each continuation's first token
            width = max(len(t) for t in tails)
            rest = None
            if width:
                inputs = torch.zeros((len(tails), width), dtype=torch.long)
                for b, tail in enumerate(tails):
                    inputs[b, : len(tail)] = torch.tensor(tail, dtype=torch.long)
                cache = first[self.cache_arg]
                cache.batch_repeat_interleave(len(tails))
                rest = self.model(
                    inputs.to(self.device, non_blocking=True), **{self.cache_arg: cache}, use_cache=False
                ).logits
        out: list[Scored] = []
        for b, tail in enumerate(tails):
            rows = last if not tail or rest is None else torch.cat([last, rest[b, : len(tail)]], dim=0)
            logprobs = F.log_softmax(rows, dim=-1, dtype=self.softmax_dtype)
            out.append((logprobs, logprobs.argmax(dim=-1)))
        return out
