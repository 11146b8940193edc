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
documents sharing one prefix come together and one prefix cache at a time is held. Where such
documents need one row each (MMLU's one-token letters fold a document's choices into one
request), up to a batch of them run together: their own tokens, right-padded, as one batch on
the prefix's cache repeated per row — the prefix is identical in every row, so right padding
again touches only positions after a row's scored ones.

Where the model splits as body → LM head (as for rolling windows), the passes over
continuations run the body, and the head only on the positions that are scored: a choice's
padding and (in a batch of documents) the other rows' context tokens never reach the
vocabulary projection, which on a small model costs more per position than the body.

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
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from assay.runner.models.hf import rolling
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


HEAD_POSITIONS = 512
"""Bound on the scored positions gathered for one LM-head call: 512 × a 50k vocabulary in
float32 is 100 MB of logits."""

Planned = tuple[list[int], list[int]]  # (a group of requests with one context, its shared prefix or [])


def passes(planned: Sequence[Planned], pairs: Sequence[TokenPair], size: int) -> Iterator[tuple[str, list[Planned]]]:
    """`planned` in order, gathered into passes of up to `size` documents: ("rows", …) for
    one-request documents on one prefix, run as one batch of rows on its cache; ("groups", …)
    for the others, each its own body passes, then one LM-head call for all (at most
    HEAD_POSITIONS scored positions)."""
    kind_now, positions = "", 0
    current: list[Planned] = []
    for group, prefix in planned:
        kind = "rows" if len(group) == 1 and prefix else "groups"
        scored = sum(len(pairs[i][1]) for i in group)
        if current and (
            kind != kind_now
            or len(current) >= size
            or (kind == "rows" and prefix != current[0][1])
            or (kind == "groups" and positions + scored > HEAD_POSITIONS)
        ):
            yield kind_now, current
            current, positions = [], 0
        current.append((group, prefix))
        kind_now, positions = kind, positions + scored
    if current:
        yield kind_now, current


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

    def head_apart(self) -> bool:
        """Whether the model splits as body → LM head (checked once, as for rolling windows), so
        that the head can run on the scored positions alone: a batch of right-padded rows
        keeps logits for every position from the earliest scored one on, most of them padding
        or another row's context."""
        if not hasattr(self, "_split"):
            split = rolling.split_model(self.model, self.device)
            body_cache = cache_arg(inspect.signature(split[0].forward).parameters) if split else None
            self._split = (split[0], split[1], body_cache) if split and body_cache else None
        return self._split is not None

    def _span_logits(self, inputs: torch.Tensor, cache: Any, spans: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
        """Each row's logits at its positions [start, end) of `inputs`, run on `cache`."""
        inputs = inputs.to(self.device, non_blocking=True)
        if self.head_apart() and self._split is not None:
            body, head, body_cache = self._split
            hidden = body(inputs, **{body_cache: cache}, use_cache=False).last_hidden_state
            logits = head(torch.cat([hidden[b, start:end] for b, (start, end) in enumerate(spans)]))
            return list(torch.split(logits, [end - start for start, end in spans]))
        full = self.model(inputs, **{self.cache_arg: cache}, use_cache=False).logits
        return [full[b, start:end] for b, (start, end) in enumerate(spans)]

    def score_groups(self, groups: Sequence[Planned], pairs: Sequence[TokenPair]) -> list[list[Scored]]:
        """Several documents' groups (members, prefix): each its two body passes, then the LM head
        once over all their scored positions. Needs `head_apart()`.

        On a small model the head's cost is mostly reading its weights (vocabulary × width),
        paid per call whatever the rows: two calls per document were a fifth of the run.
        """
        assert self.head_apart() and self._split is not None
        body, head, body_cache = self._split
        hidden: list[torch.Tensor] = []
        sizes: list[int] = []
        with torch.no_grad(), self.autocast():
            for members, prefix in groups:
                ctx = pairs[members[0]][0]
                tails = [pairs[i][1][:-1] for i in members]
                own, cached = self._after_prefix(ctx, prefix)
                context = torch.tensor([own], dtype=torch.long).to(self.device, non_blocking=True)
                cache_in = {body_cache: cached[self.cache_arg]} if cached else {}
                first = body(context, use_cache=True, **cache_in)
                last = first.last_hidden_state[0, -1:]  # scores each continuation's first token
                width = max(len(t) for t in tails)
                rest = None
                if width:
                    inputs = torch.zeros((len(tails), width), dtype=torch.long)
                    for b, tail in enumerate(tails):
                        inputs[b, : len(tail)] = torch.tensor(tail, dtype=torch.long)
                    cache = first.past_key_values
                    cache.batch_repeat_interleave(len(tails))
                    rest = body(inputs.to(self.device, non_blocking=True), **{body_cache: cache}, use_cache=False)
                for b, tail in enumerate(tails):
                    # a member's scored positions: the context's last (its first token), then its tail's
                    hidden.append(last)
                    if tail and rest is not None:
                        hidden.append(rest.last_hidden_state[b, : len(tail)])
                    sizes.append(1 + (len(tail) if rest is not None else 0))
            logits = head(torch.cat(hidden))
        per_member = iter(torch.split(logits, sizes))
        out: list[list[Scored]] = []
        for members, _ in groups:
            scored: list[Scored] = []
            for i in members:
                rows = next(per_member)
                logprobs = F.log_softmax(rows, dim=-1, dtype=self.softmax_dtype)
                scored.append((logprobs, logprobs.argmax(dim=-1)))
            out.append(scored)
        return out

    def score_rows(self, members: Sequence[int], pairs: Sequence[TokenPair], prefix: list[int]) -> list[Scored]:
        """Requests sharing `prefix`, each one row of its own tokens, as one batch on the prefix's cache."""
        rows = [pairs[i][0][len(prefix) :] + pairs[i][1][:-1] for i in members]
        spans = [(len(pairs[i][0]) - len(prefix) - 1, len(row)) for i, row in zip(members, rows)]
        inputs = torch.zeros((len(rows), max(len(row) for row in rows)), dtype=torch.long)
        for b, row in enumerate(rows):
            inputs[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        with torch.no_grad(), self.autocast():
            _, cached = self._after_prefix(pairs[members[0]][0], prefix)
            cache = cached[self.cache_arg]
            cache.batch_repeat_interleave(len(rows))
            per_row = self._span_logits(inputs, cache, spans)
        out: list[Scored] = []
        for logits in per_row:
            logprobs = F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)
            out.append((logprobs, logprobs.argmax(dim=-1)))
        return out

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
                rest = self._span_logits(inputs, cache, [(0, len(tail)) for tail in tails])
        out: list[Scored] = []
        for b, tail in enumerate(tails):
            rows = last if not tail or rest is None else torch.cat([last, rest[b]], dim=0)
            logprobs = F.log_softmax(rows, dim=-1, dtype=self.softmax_dtype)
            out.append((logprobs, logprobs.argmax(dim=-1)))
        return out
