"""Rolling windows scored without a positions × vocabulary logits or log-softmax tensor.

lm-eval computes logits for every window position, log-softmaxes the whole
[batch, positions, vocab] tensor and gathers the targets: for 1024-token windows on a
50k vocabulary that is 200 MB per row, twice. Here the model body runs once per batch of
windows (of different documents, in lm-eval's order), and the LM head runs on the scored
positions alone, a chunk at a time (`head_logprobs.py`): each chunk is log-softmaxed and its
targets gathered, then dropped before the next. A row's log-softmax does not depend on the
other rows, so each value is bit for bit lm-eval's (checked); `target − logsumexp` was tried
and moves a 1000-token window's sum by ~1e-4, beyond the 1e-5 per-request parity tolerance.

This needs the model split as body → head with nothing in between (no logit soft-capping
or scaling). `split_model` checks that on a probe input once and returns None where the
head's logits are not the model's; the scorer then keeps the full-logits path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from assay.runner.models.hf.head_logprobs import HeadLogprobs
from assay.runner.models.token_pairs import TokenPair


def split_model(model: Any, device: torch.device) -> tuple[Any, Any] | None:
    """(body, head) whose composition gives the model's logits, or None."""
    body = getattr(model, str(getattr(model, "base_model_prefix", "")), None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if body is None or head is None or body is model:
        return None
    probe = torch.arange(1, 9, dtype=torch.long, device=device).unsqueeze(0)
    try:
        with torch.no_grad():
            full = model(probe).logits
            split = head(body(probe).last_hidden_state)
    except Exception:
        return None
    if split.shape != full.shape or not torch.allclose(split.float(), full.float(), rtol=1e-4, atol=1e-5):
        return None
    return body, head


class RollingScorer:
    """Sum of log P(target) over each window's scored positions, for a causal model."""

    def __init__(
        self,
        body: Any,
        head: Any,
        *,
        device: torch.device,
        max_length: int,
        softmax_dtype: torch.dtype | None,
        autocast: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> None:
        self.body = body
        self.device = device
        self.max_length = max_length
        self.autocast = autocast
        with autocast():
            self.head = HeadLogprobs(head, device=device, softmax_dtype=softmax_dtype)

    def score(self, windows: Sequence[TokenPair]) -> list[float]:
        # the same rows lm-eval builds: (ctx + cont)[-(max_length + 1):][:-1], right-padded with 0
        rows = [(ctx + cont)[-(self.max_length + 1) :][:-1] for ctx, cont in windows]
        width = max(len(r) for r in rows)
        inputs = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            inputs[b, : len(row)] = torch.tensor(row, dtype=torch.long)
        with torch.no_grad(), self.autocast():
            hidden = self.body(inputs.to(self.device, non_blocking=True)).last_hidden_state
            per_window = [
                self._window(hidden[b], len(row), cont)
                for b, (row, (_, cont)) in enumerate(zip(rows, windows, strict=False))
            ]
        # one device → host copy for the whole batch
        return [float(v) for v in torch.stack(per_window).tolist()]

    def _window(self, hidden: torch.Tensor, row_len: int, cont: list[int]) -> torch.Tensor:
        start = row_len - len(cont)
        targets = torch.tensor(cont, dtype=torch.long).to(self.device, non_blocking=True)
        # one sum over the window's positions, as lm-eval's `picked.sum()`
        return self.head(hidden[start:row_len], targets).sum()
