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
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from assay.runner.models.hf import cached_tails, packed_documents, rolling
from assay.runner.models.hf.cached_tails import Hidden
from assay.runner.models.hf.document_passes import Planned, on_prefix
from assay.runner.models.hf.packed_documents import output_cache
from assay.runner.models.token_pairs import TokenPair

# (log-probs [contlen, vocab], argmax [contlen]) for one request
Scored = tuple[torch.Tensor, torch.Tensor]
# (sum of the continuation's log-probs, whether greedy decoding gives it) for one request
Answer = tuple[float, bool]
# one document's scored positions in the body [rows, width], and per member its rows, in order
Found = tuple[torch.Tensor, list[list[int]]]

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
            params = inspect.signature(split[0].forward).parameters if split else {}
            self._masks = "attention_mask" in params and "position_ids" in params
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

    def score_groups(self, groups: Sequence[Planned], pairs: Sequence[TokenPair]) -> PassScores:
        """Several documents' groups (members, prefix): their body passes, then the LM head once
        over all their scored positions. Needs `head_apart()`.

        On a small model the head's cost is mostly reading its weights (vocabulary × width),
        paid per call whatever the rows: two calls per document were a fifth of the run. A
        document's last context position scores every choice's first token, so it reaches the
        head once, not once per choice (a quarter of the head's rows on four-choice tasks).
        Where the model takes a packed row (`packed_documents`) each document is one row, its
        context and its choices, in one pass per prefix: documents on a long shared prefix on
        a copy of its cache, the others whole. Else documents without a long shared prefix run
        their contexts together and the tails on their cache (`cached_tails`) where the
        body takes an attention mask and position ids; the others one at a time, on their
        prefix's cache.
        """
        assert self.head_apart() and self._split is not None
        head = self._split[1]
        found: list[Found | None] = [None for _ in groups]
        together = [
            k for k, (members, prefix) in enumerate(groups) if self._masks and not on_prefix(members, prefix, pairs)
        ]
        with torch.no_grad(), self.autocast():
            if self.packing() is not None:
                # one pass per prefix: documents on a long shared one run on its cache
                by_prefix: dict[tuple[int, ...], list[int]] = {}
                for k, (members, prefix) in enumerate(groups):
                    by_prefix.setdefault(tuple(prefix) if on_prefix(members, prefix, pairs) else (), []).append(k)
                for shared, ks in by_prefix.items():
                    packed = self._documents_packed([groups[k][0] for k in ks], pairs, list(shared))
                    for k, one in zip(ks, packed, strict=True):
                        found[k] = one
            elif len(together) > 1:
                assert self._split is not None
                body, _, body_cache = self._split
                documents = [groups[k][0] for k in together]
                hidden = cached_tails.documents_together(body, body_cache, self.device, documents, pairs)
                for k, document in zip(together, hidden, strict=False):
                    found[k] = _as_found(document)
            states: list[torch.Tensor] = []
            rows_of: list[list[list[int]]] = []  # per group, per member: the row of each continuation token
            count = 0
            for k, (members, prefix) in enumerate(groups):
                rows, member_rows = found[k] or _as_found(self._one_document(members, prefix, pairs))
                states.append(rows)
                rows_of.append([[count + r for r in member] for member in member_rows])
                count += rows.shape[0]
            logprobs = F.log_softmax(head(torch.cat(states)), dim=-1, dtype=self.softmax_dtype)
        return PassScores(logprobs, rows_of)

    def packing(self) -> tuple[str, torch.dtype] | None:
        """The mask format and dtype for packed documents, or None where the model does not
        honour them (checked once on a probe input)."""
        if not hasattr(self, "_packing"):
            self._packing = (
                packed_documents.packing_works(
                    self._split[0], self.model, device=self.device, autocast=self.autocast, cache_arg=self._split[2]
                )
                if self.head_apart() and self._masks and self._split is not None
                else None
            )
        return self._packing

    def _documents_packed(
        self, groups: Sequence[Sequence[int]], pairs: Sequence[TokenPair], prefix: list[int]
    ) -> list[Found]:
        """Each document one row, its context (after `prefix`, run on a copy of its cache) and
        its members' tails as a trie, in one pass."""
        assert self._split is not None and self._packing is not None
        body, _, body_cache = self._split
        mask_format, dtype = self._packing
        cache = None
        if prefix:
            _, cached = self._after_prefix(pairs[groups[0][0]][0], prefix)
            cached[self.cache_arg].batch_repeat_interleave(len(groups))
            cache = (body_cache, cached[self.cache_arg], len(prefix))
        documents = [
            packed_documents.pack_document(
                pairs[members[0]][0][len(prefix) :], [pairs[i][1][:-1] for i in members], start=len(prefix)
            )
            for members in groups
        ]
        outputs = packed_documents.run_packed(
            body, documents, device=self.device, mask_format=mask_format, dtype=dtype, cache=cache
        )
        found: list[Found] = []
        for document, rows in zip(documents, outputs, strict=True):
            first = document.context_length - 1
            found.append((rows, [[r - first for r in member] for member in document.member_rows]))
        return found

    def _one_document(self, members: Sequence[int], prefix: list[int], pairs: Sequence[TokenPair]) -> Hidden:
        """The body's output at the context's last position and at each member's tail. The
        context runs once, the tails together on its cache."""
        assert self._split is not None
        body, _, body_cache = self._split
        tails = [pairs[i][1][:-1] for i in members]
        own, cached = self._after_prefix(pairs[members[0]][0], prefix)
        context = torch.tensor([own], dtype=torch.long).to(self.device, non_blocking=True)
        first = body(context, use_cache=True, **({body_cache: cached[self.cache_arg]} if cached else {}))
        last = first.last_hidden_state[0, -1:]
        width = max(len(t) for t in tails)
        if not width:
            return last, [last[:0] for _ in tails]
        inputs = torch.zeros((len(tails), width), dtype=torch.long)
        for b, tail in enumerate(tails):
            inputs[b, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        cache = output_cache(first)
        cache.batch_repeat_interleave(len(tails))
        rest = body(inputs.to(self.device, non_blocking=True), **{body_cache: cache}, use_cache=False).last_hidden_state
        return last, [rest[b, : len(tail)] for b, tail in enumerate(tails)]

    def score_rows(self, members: Sequence[int], pairs: Sequence[TokenPair], prefix: list[int]) -> list[Scored]:
        """Requests sharing `prefix`, each one row of its own tokens, as one batch on the prefix's cache."""
        rows = [pairs[i][0][len(prefix) :] + pairs[i][1][:-1] for i in members]
        spans = [(len(pairs[i][0]) - len(prefix) - 1, len(row)) for i, row in zip(members, rows, strict=False)]
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


def _as_found(hidden: Hidden) -> Found:
    """A document's context's last position and its members' tails as rows and each member's."""
    last, tails = hidden
    member_rows: list[list[int]] = []
    count = 1
    for tail in tails:
        member_rows.append([0, *range(count, count + tail.shape[0])])
        count += tail.shape[0]
    return torch.cat([last, *tails]), member_rows


@dataclasses.dataclass(frozen=True)
class PassScores:
    """A pass of documents after the LM head: log-probs [rows, vocab] of its scored positions,
    and per group, per member, the row of each of its continuation's tokens (a document's
    choices share its context's last row)."""

    logprobs: torch.Tensor
    rows_of: list[list[list[int]]]

    def answers(self, requests: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[Answer]:
        """Per (rows, continuation): its tokens' log-probs at those rows summed, and whether each
        is the argmax there. Each request's values are summed alone and in order, as lm-eval
        sums them."""
        device = self.logprobs.device
        rows = torch.tensor([r for at, _ in requests for r in at], dtype=torch.long, device=device)
        targets = torch.tensor([t for _, cont in requests for t in cont], dtype=torch.long, device=device)
        lengths = [len(cont) for _, cont in requests]
        picked = torch.split(self.logprobs[rows, targets], lengths)
        greedy = torch.split(self.logprobs.argmax(dim=-1)[rows] == targets, lengths)
        return [(float(values.sum()), bool(hits.all())) for values, hits in zip(picked, greedy, strict=False)]
