"""Documents' choices on their contexts' KV cache: the path for a model that does not take a
packed row (`packed_documents`) but whose body takes an attention mask and position ids.

The documents' contexts run as one right-padded batch with a cache (causal attention: the
padding after a row's tokens never reaches them), then the choices' tails on their own
documents' rows of that cache, in passes of similar length (`tail_passes`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from assay.runner.models.hf.document_passes import tail_passes
from assay.runner.models.hf.packed_documents import output_cache
from assay.runner.models.token_pairs import TokenPair

# one document in the body: its context's last position [1, width], and per member its tail's [len, width]
Hidden = tuple[torch.Tensor, list[torch.Tensor]]


def documents_together(
    body: Any, body_cache: str, device: torch.device, groups: Sequence[Sequence[int]], pairs: Sequence[TokenPair]
) -> list[Hidden]:
    """`SharedContextScorer._one_document` for several documents at once: their contexts as one
    right-padded batch (causal attention: padding after a row's tokens never reaches them), then the
    members' tails on their own documents' rows of that cache, with an attention mask that
    hides the padding keys and position ids that continue each context: in passes of similar
    lengths (`tail_passes`; a pass padded to one long choice cost 2.6 times its tokens on
    ARC), and none for one-token choices, whose only score is the context's last position.

    A row's padding after its own tail repeats its last position: counted on, it would pass
    the model's last position where one document's long context meets another's long tail
    (each request fits the model; their widths together need not), and the padding is never
    seen by a scored position anyway."""
    contexts = [pairs[members[0]][0] for members in groups]
    lengths = [len(ctx) for ctx in contexts]
    width = max(lengths)
    inputs = torch.zeros((len(contexts), width), dtype=torch.long)
    for b, ctx in enumerate(contexts):
        inputs[b, : len(ctx)] = torch.tensor(ctx, dtype=torch.long)
    first = body(inputs.to(device, non_blocking=True), use_cache=True)
    lasts = [first.last_hidden_state[b, n - 1 : n] for b, n in enumerate(lengths)]
    rows = [(b, pairs[i][1][:-1]) for b, members in enumerate(groups) for i in members]
    found: dict[int, torch.Tensor] = {}  # per row with a tail: the body's output at its tail
    chunks = tail_passes([len(tail) for _, tail in rows])
    for n, chunk in enumerate(chunks):
        # each pass selects its rows from the contexts' cache; the last may consume it
        cache = output_cache(first) if n == len(chunks) - 1 else copy.deepcopy(output_cache(first))
        rest = _tails_on_contexts(body, body_cache, device, [rows[r] for r in chunk], cache, lengths)
        for k, r in enumerate(chunk):
            found[r] = rest[k, : len(rows[r][1])]
    out: list[Hidden] = [(last, []) for last in lasts]
    for r, (b, _) in enumerate(rows):
        out[b][1].append(found.get(r, lasts[b][:0]))
    return out


def _tails_on_contexts(
    body: Any,
    body_cache: str,
    device: torch.device,
    rows: Sequence[tuple[int, list[int]]],
    cache: Any,
    lengths: Sequence[int],
) -> torch.Tensor:
    """The body's output [rows, longest tail, width] for tails, each (its context's row in
    `cache`, its tokens), right-padded, run on their own contexts' rows of `cache`."""
    width, tail_width = max(lengths), max(len(tail) for _, tail in rows)
    tails = torch.zeros((len(rows), tail_width), dtype=torch.long)
    mask = torch.zeros((len(rows), width + tail_width), dtype=torch.long)
    positions = torch.zeros((len(rows), tail_width), dtype=torch.long)
    for r, (b, tail) in enumerate(rows):
        tails[r, : len(tail)] = torch.tensor(tail, dtype=torch.long)
        mask[r, : lengths[b]] = 1
        mask[r, width:] = 1
        positions[r] = lengths[b] + torch.arange(tail_width).clamp(max=max(len(tail) - 1, 0))
    cache.batch_select_indices(torch.tensor([b for b, _ in rows], device=device))
    out: torch.Tensor = body(
        tails.to(device, non_blocking=True),
        attention_mask=mask.to(device, non_blocking=True),
        position_ids=positions.to(device, non_blocking=True),
        use_cache=False,
        **{body_cache: cache},
    ).last_hidden_state
    return out
