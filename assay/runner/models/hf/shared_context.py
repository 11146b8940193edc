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

from assay.runner.models.hf import rolling
from assay.runner.models.hf.document_passes import Planned, on_prefix, tail_passes
from assay.runner.models.token_pairs import TokenPair

# (log-probs [contlen, vocab], argmax [contlen]) for one request
Scored = tuple[torch.Tensor, torch.Tensor]
# (sum of the continuation's log-probs, whether greedy decoding gives it) for one request
Answer = tuple[float, bool]
# one document in the body: its context's last position [1, width], and per member its tail's [len, width]
Hidden = tuple[torch.Tensor, list[torch.Tensor]]

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


def output_cache(output: Any) -> Any:
    """A forward's KV cache: the output's `cache` (transformers 5, where reading `past_key_values`
    logs a deprecation into the progress bar), `past_key_values` before."""
    return output["cache"] if "cache" in output else output["past_key_values"]


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
        Documents without a long shared prefix run their contexts together
        (`_documents_together`) where the body takes an attention mask and position ids; the
        others one at a time, on their prefix's cache.
        """
        assert self.head_apart() and self._split is not None
        head = self._split[1]
        hidden: list[Hidden | None] = [None for _ in groups]
        together = [
            k for k, (members, prefix) in enumerate(groups) if self._masks and not on_prefix(members, prefix, pairs)
        ]
        with torch.no_grad(), self.autocast():
            if len(together) > 1:
                found = self._documents_together([groups[k][0] for k in together], pairs)
                for k, document in zip(together, found, strict=False):
                    hidden[k] = document
            rows: list[torch.Tensor] = []
            rows_of: list[list[list[int]]] = []  # per group, per member: the row of each continuation token
            count = 0
            for k, (members, prefix) in enumerate(groups):
                last, tails = hidden[k] or self._one_document(members, prefix, pairs)
                shared, count = count, count + 1
                rows.append(last)
                rows_of.append([])
                for tail in tails:
                    rows_of[-1].append([shared, *range(count, count + tail.shape[0])])
                    rows.append(tail)
                    count += tail.shape[0]
            logprobs = F.log_softmax(head(torch.cat(rows)), dim=-1, dtype=self.softmax_dtype)
        return PassScores(logprobs, rows_of)

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

    def _documents_together(self, groups: Sequence[Sequence[int]], pairs: Sequence[TokenPair]) -> list[Hidden]:
        """`_one_document` for several documents at once: their contexts as one right-padded
        batch (causal attention: padding after a row's tokens never reaches them), then the
        members' tails on their own documents' rows of that cache, with an attention mask that
        hides the padding keys and position ids that continue each context: in passes of similar
        lengths (`tail_passes`; a pass padded to one long choice cost 2.6 times its tokens on
        ARC), and none for one-token choices, whose only score is the context's last position.

        A row's padding after its own tail repeats its last position: counted on, it would pass
        the model's last position where one document's long context meets another's long tail
        (each request fits the model; their widths together need not), and the padding is never
        seen by a scored position anyway."""
        assert self._split is not None
        body, _, body_cache = self._split
        contexts = [pairs[members[0]][0] for members in groups]
        lengths = [len(ctx) for ctx in contexts]
        width = max(lengths)
        inputs = torch.zeros((len(contexts), width), dtype=torch.long)
        for b, ctx in enumerate(contexts):
            inputs[b, : len(ctx)] = torch.tensor(ctx, dtype=torch.long)
        first = body(inputs.to(self.device, non_blocking=True), use_cache=True)
        lasts = [first.last_hidden_state[b, n - 1 : n] for b, n in enumerate(lengths)]
        rows = [(b, pairs[i][1][:-1]) for b, members in enumerate(groups) for i in members]
        found: dict[int, torch.Tensor] = {}  # per row with a tail: the body's output at its tail
        chunks = tail_passes([len(tail) for _, tail in rows])
        for n, chunk in enumerate(chunks):
            # each pass selects its rows from the contexts' cache; the last may consume it
            cache = output_cache(first) if n == len(chunks) - 1 else copy.deepcopy(output_cache(first))
            rest = self._tails_on_contexts([rows[r] for r in chunk], cache, lengths)
            for k, r in enumerate(chunk):
                found[r] = rest[k, : len(rows[r][1])]
        out: list[Hidden] = [(last, []) for last in lasts]
        for r, (b, _) in enumerate(rows):
            out[b][1].append(found.get(r, lasts[b][:0]))
        return out

    def _tails_on_contexts(
        self, rows: Sequence[tuple[int, list[int]]], cache: Any, lengths: Sequence[int]
    ) -> torch.Tensor:
        """The body's output [rows, longest tail, width] for tails, each (its context's row in
        `cache`, its tokens), right-padded, run on their own contexts' rows of `cache`."""
        assert self._split is not None
        body, _, body_cache = self._split
        width, tail_width = max(lengths), max(len(tail) for _, tail in rows)
        tails = torch.zeros((len(rows), tail_width), dtype=torch.long)
        mask = torch.zeros((len(rows), width + tail_width), dtype=torch.long)
        positions = torch.zeros((len(rows), tail_width), dtype=torch.long)
        for r, (b, tail) in enumerate(rows):
            tails[r, : len(tail)] = torch.tensor(tail, dtype=torch.long)
            mask[r, : lengths[b]] = 1
            mask[r, width:] = 1
            positions[r] = lengths[b] + torch.arange(tail_width).clamp(max=max(len(tail) - 1, 0))
        cache.batch_select_indices(torch.tensor([b for b, _ in rows], device=self.device))
        out: torch.Tensor = body(
            tails.to(self.device, non_blocking=True),
            attention_mask=mask.to(self.device, non_blocking=True),
            position_ids=positions.to(self.device, non_blocking=True),
            use_cache=False,
            **{body_cache: cache},
        ).last_hidden_state
        return out

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
