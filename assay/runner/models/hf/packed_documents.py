"""Multiple-choice documents packed one to a row: the context, then its choices as a tree.

lm-eval runs `context + choice` once per choice. A document's choices share its context, so
a row here holds the context once and after it every choice's tail (its continuation less
the last token, which is scored but never an input), the tails laid out as a trie: choices
that begin with the same tokens (" the ...", " a ...") share those positions. An attention
mask lets each tail token see the context and its own branch of the trie only, and position
ids continue the context along every branch, so every scored position sees the tokens, at
the positions, that lm-eval's row for that choice shows it. The row's outputs from the
context's last position on are exactly the positions to score: the trie holds no token that
is not some choice's input.

One pass of the model body then serves a batch of documents, context and choices together,
where running the tails on the contexts' KV cache took a second pass over a copy of the
cache per choice (on ARC that pass cost three times its tokens' share of the body). The
mask is the model's own format (a boolean one for `sdpa`, an additive one for `eager`);
`packing_works` checks on a probe input that the model honours a mask and position ids
given this way, and the scorer keeps the cached-tails path where it does not.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

# attention implementations whose 4D mask `transformers` passes through as given
_MASK_FORMATS = ("sdpa", "eager")


@dataclasses.dataclass(frozen=True)
class PackedDocument:
    """One document's row: `tokens` and their `positions`, each token's `parent` (the token
    before it on its branch; -1 for the first), and per member the indices of its scored
    positions in order (the context's last, then its tail's trie nodes)."""

    tokens: list[int]
    positions: list[int]
    parents: list[int]
    context_length: int
    member_rows: list[list[int]]

    @property
    def scored(self) -> slice:
        """The row's positions that reach the LM head: the context's last and every trie node."""
        return slice(self.context_length - 1, len(self.tokens))


def pack_document(context: Sequence[int], tails: Sequence[Sequence[int]], *, start: int = 0) -> PackedDocument:
    """A document's context followed by the trie of its members' `tails`; the context's first
    position is `start` (after a shared prefix held in a cache, its length)."""
    n = len(context)
    tokens, positions, parents = list(context), list(range(start, start + n)), list(range(-1, n - 1))
    node_of: dict[tuple[int, int], int] = {}  # (parent index, token) -> that child's index
    member_rows: list[list[int]] = []
    for tail in tails:
        at = n - 1
        rows = [at]
        for token in tail:
            child = node_of.get((at, token))
            if child is None:
                child = node_of[(at, token)] = len(tokens)
                tokens.append(token)
                positions.append(positions[at] + 1)
                parents.append(at)
            at = child
            rows.append(at)
        member_rows.append(rows)
    return PackedDocument(tokens, positions, parents, n, member_rows)


def _sees(document: PackedDocument, width: int) -> torch.Tensor:
    """[width, width] booleans: which positions each position of the row attends to (its
    branch: the causal context, then its own ancestors in the trie); padding sees itself."""
    n = document.context_length
    sees = torch.zeros((width, width), dtype=torch.bool)
    sees[:n, :n] = torch.ones((n, n), dtype=torch.bool).tril()
    for node in range(n, len(document.tokens)):
        sees[node] = sees[document.parents[node]]
        sees[node, node] = True
    padding = torch.arange(len(document.tokens), width)
    sees[padding, padding] = True
    return sees


def batch_inputs(
    documents: Sequence[PackedDocument], *, mask_format: str, dtype: torch.dtype, cached: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, position ids, 4D attention mask) of `documents` right-padded to one width;
    every row also sees the `cached` positions before it (a shared prefix's keys)."""
    width = max(len(d.tokens) for d in documents)
    ids = torch.zeros((len(documents), width), dtype=torch.long)
    positions = torch.zeros((len(documents), width), dtype=torch.long)
    sees = torch.ones((len(documents), 1, width, cached + width), dtype=torch.bool)
    for b, document in enumerate(documents):
        ids[b, : len(document.tokens)] = torch.tensor(document.tokens, dtype=torch.long)
        positions[b, : len(document.tokens)] = torch.tensor(document.positions, dtype=torch.long)
        sees[b, 0, :, cached:] = _sees(document, width)
    if mask_format == "sdpa":
        return ids, positions, sees
    # eager adds the mask to the attention scores: 0 where seen, the dtype's lowest elsewhere
    additive = torch.zeros(sees.shape, dtype=dtype).masked_fill_(~sees, torch.finfo(dtype).min)
    return ids, positions, additive


def mask_format(model: Any) -> str | None:
    """The format of 4D mask the model's attention takes as given, or None."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return implementation if implementation in _MASK_FORMATS else None


def run_packed(
    body: Any,
    documents: Sequence[PackedDocument],
    *,
    device: torch.device,
    mask_format: str,
    dtype: torch.dtype,
    cache: tuple[str, Any, int] | None = None,
) -> list[torch.Tensor]:
    """The body's outputs at each document's scored positions ([scored, width] per document);
    with `cache` (the body's cache argument, a shared prefix's cache with a row per document,
    its length), on that prefix; the pass consumes the cache."""
    cached = cache[2] if cache else 0
    ids, positions, mask = batch_inputs(documents, mask_format=mask_format, dtype=dtype, cached=cached)
    hidden = body(
        ids.to(device, non_blocking=True),
        attention_mask=mask.to(device, non_blocking=True),
        position_ids=positions.to(device, non_blocking=True),
        use_cache=False,
        **({cache[0]: cache[1]} if cache else {}),
    ).last_hidden_state
    return [hidden[b, document.scored] for b, document in enumerate(documents)]


def packing_works(
    body: Any,
    model: Any,
    *,
    device: torch.device,
    autocast: Callable[[], Any],
    cache_arg: str,
) -> tuple[str, torch.dtype] | None:
    """(mask format, mask dtype) where the body, given packed probe documents (whole, and on a
    shared prefix's cache), gives each choice the outputs its own plain causal pass gives;
    None where it does not (a model that ignores or rebuilds a 4D mask, or takes positions
    from elsewhere) or cannot be asked."""
    found = mask_format(model)
    if found is None:
        return None
    dtype = next(body.parameters()).dtype
    prefix, context, tails = [3, 4], [5, 6, 7, 8], [[9, 10], [9, 11], [12]]
    ids = functools.partial(torch.tensor, dtype=torch.long, device=device)
    run = functools.partial(run_packed, body, device=device, mask_format=found, dtype=dtype)
    try:
        with torch.no_grad(), autocast():
            whole = pack_document(prefix + context, tails)
            got = {"whole": run([whole, whole])[1]}
            cache = output_cache(body(ids([prefix]), use_cache=True))
            cache.batch_repeat_interleave(2)
            after = pack_document(context, tails, start=len(prefix))
            got["on a prefix"] = run([after, after], cache=(cache_arg, cache, len(prefix)))[1]
            first_row = whole.context_length - 1
            for tail, rows in zip(tails, whole.member_rows, strict=True):
                plain = ids([prefix + context + tail])
                want = body(plain, use_cache=False).last_hidden_state[0, first_row:].float()
                if not all(_close(out[[r - first_row for r in rows]].float(), want, dtype) for out in got.values()):
                    return None
    except Exception:
        return None
    return found, dtype


def output_cache(output: Any) -> Any:
    """A forward's KV cache: the output's `cache` (transformers 5, where reading `past_key_values`
    logs a deprecation into the progress bar), `past_key_values` before."""
    return output["cache"] if "cache" in output else output["past_key_values"]


def _close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    """Equal up to the rounding of `dtype`, relative to the outputs' size."""
    tolerance = 1e-3 if dtype == torch.float32 else 5e-2
    scale = float(want.abs().max().clamp(min=1e-6))
    return got.shape == want.shape and float((got - want).abs().max()) <= tolerance * scale
