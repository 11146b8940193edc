"""log P(target) at chosen positions through the LM head, bit for bit the model's own numbers.

The LM head is most of a rolling window's cost on a small model: for every scored position
a [hidden] × [hidden, vocab] product and a log-softmax over the vocabulary. On the CPU,
`head(hidden)` for a few hundred positions runs the product as positions × vocabulary,
which re-packs the whole [vocab, hidden] weight on every call and writes a fresh 50 MB
logits tensor (page faults included), at about half the machine's matmul rate. The same
products run as weight-block × positions (`W[i:j] @ hidden.T`, a 2,048-row block of the
vocabulary at a time, its result small enough to stay in cache while it is transposed into
a logits buffer that is reused across calls) go at close to the matmul peak.

Each logit is still one dot product over the hidden size, and MKL accumulates it in the same
order in either layout on the machines measured, so the numbers equal `head(hidden)`'s; that
is checked on a probe when the head is first used, and a head where it does not hold (another
BLAS, a GPU's kernels, a bias, autocast, a half-precision weight) keeps the plain path: the
head on `CHUNK` positions at a time, each chunk log-softmaxed and its targets gathered.
The log-softmax is the same last-dimension kernel either way, row by row, as lm-eval's.

MKL sums a product of fewer than 12 rows in another order (both layouts, measured on 1 and 2
threads), so a chunk of fewer than `MIN_ROWS` positions is padded with zero rows first: the
logits then equal those of lm-eval's batch, whose rows are a whole batch of windows.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

CHUNK = 256  # positions per plain head call: 256 × 50k fp32 logits is 51 MB
POSITIONS = 128  # positions per blocked call: two [128, vocab] fp32 buffers, 26 MB each at 50k
VOCAB_BLOCK = 2048  # weight rows per product: its [2048, 128] result (1 MB) stays in L2
MIN_ROWS = 16  # fewest rows a head product runs on (see above)


class HeadLogprobs:
    """Sum-ready log-probabilities of targets, from hidden states of the positions before them."""

    def __init__(self, head: Any, *, device: torch.device, softmax_dtype: torch.dtype | None) -> None:
        self.head = head
        self.softmax_dtype = softmax_dtype
        self._weight = _blockable_weight(head, device, softmax_dtype)
        self._buffers: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if self._weight is not None and not _blocked_equals_head(self):
            self._weight = None

    @property
    def blocked(self) -> bool:
        """Whether the vocabulary-block path is in use (checked once against the plain head)."""
        return self._weight is not None

    def __call__(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log P(targets[k] | hidden[k]) for each k: hidden [n, h], targets [n] → [n]."""
        picked = []
        step = POSITIONS if self._weight is not None else CHUNK
        for lo in range(0, hidden.shape[0], step):
            hi = min(hidden.shape[0], lo + step)
            rows = hidden[lo:hi]
            if hi - lo < MIN_ROWS:
                rows = torch.cat([rows, rows.new_zeros(MIN_ROWS - (hi - lo), rows.shape[1])])
            logprobs = self._logprobs(rows)[: hi - lo]
            picked.append(logprobs.gather(1, targets[lo:hi].unsqueeze(1)).squeeze(1))
        return torch.cat(picked) if picked else hidden.new_zeros(0)

    def _logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        if self._weight is None:
            return F.log_softmax(self.head(hidden), dim=-1, dtype=self.softmax_dtype)
        logits, logprobs = self._logits(hidden)
        torch.log_softmax(logits, -1, out=logprobs)
        return logprobs

    def _logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The head's logits for ≤ POSITIONS rows, a vocabulary block at a time, in a reused buffer."""
        weight = self._weight
        assert weight is not None
        n = hidden.shape[0]
        if self._buffers is None:
            vocab = weight.shape[0]
            self._buffers = (
                torch.empty(POSITIONS, vocab, dtype=weight.dtype),
                torch.empty(POSITIONS, vocab, dtype=weight.dtype),
                torch.empty(VOCAB_BLOCK * POSITIONS, dtype=weight.dtype),
            )
        logits_buffer, logprobs_buffer, block_buffer = self._buffers
        logits, columns = logits_buffer[:n], hidden.t()
        for i in range(0, weight.shape[0], VOCAB_BLOCK):
            j = min(weight.shape[0], i + VOCAB_BLOCK)
            block = block_buffer[: (j - i) * n].view(j - i, n)
            torch.mm(weight[i:j], columns, out=block)
            logits[:, i:j].copy_(block.t())
        return logits, logprobs_buffer[:n]


def _blockable_weight(head: Any, device: torch.device, softmax_dtype: torch.dtype | None) -> torch.Tensor | None:
    """The head's weight where the block path can apply at all: a bias-free fp32 Linear on the CPU."""
    if device.type != "cpu" or not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return None
    if head.weight.dtype != torch.float32 or softmax_dtype not in (None, torch.float32):
        return None
    if torch.is_autocast_enabled("cpu"):
        return None
    return head.weight.detach()


def _blocked_equals_head(scorer: HeadLogprobs) -> bool:
    """Whether the blocked logits equal the head's own, bit for bit, on a probe.

    The probe is a full POSITIONS chunk and a MIN_ROWS one, against the head applied to them
    as one [1, rows, hidden] batch (lm-eval's call) and as separate chunks (the plain path).
    Each logit is a dot product over the hidden size in some accumulation order; random
    inputs make a different order show in some of the probe's millions of logits.
    """
    weight = scorer._weight
    assert weight is not None
    generator = torch.Generator().manual_seed(0)
    rows = POSITIONS + MIN_ROWS
    hidden = torch.randn(rows, weight.shape[1], generator=generator, dtype=weight.dtype)
    with torch.no_grad():
        whole = scorer.head(hidden.unsqueeze(0)).squeeze(0)
        for lo, hi in ((0, POSITIONS), (POSITIONS, rows)):
            logits, _ = scorer._logits(hidden[lo:hi])
            if not (torch.equal(logits, whole[lo:hi]) and torch.equal(logits, scorer.head(hidden[lo:hi]))):
                return False
    return True
