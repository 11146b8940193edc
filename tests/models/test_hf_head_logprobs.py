"""The LM head's target log-probabilities (`head_logprobs.py`): the vocabulary-block path gives
the head's own numbers bit for bit, against lm-eval's way of computing them (the head on a
[batch, positions, hidden] batch, log-softmax over all of it, targets gathered), and heads it
cannot serve keep the plain path with the same numbers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assay.runner.models.hf import head_logprobs
from assay.runner.models.hf.head_logprobs import POSITIONS, HeadLogprobs

pytestmark = pytest.mark.model

VOCAB = 50257  # GPT-2's: 24 blocks of the vocabulary and a ragged last one
HIDDEN = 64
CPU = torch.device("cpu")


def linear_head(*, bias: bool = False, dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(HIDDEN, VOCAB, bias=bias).to(dtype).eval()


def positions(rows: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, HIDDEN, generator=generator) * 3
    return hidden, torch.randint(0, VOCAB, (rows,), generator=generator)


def lm_evals_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The positions in a [2, 64+, hidden] batch, as lm-eval's batches of windows with their
    padding (MKL sums a product of fewer than 12 rows in another order: a batch that small,
    a few tokens in all, is the one case where lm-eval's own last bits differ)."""
    batch = hidden.new_zeros(2, max(hidden.shape[0], 64), hidden.shape[1])
    batch[1, : hidden.shape[0]] = hidden
    logprobs = F.log_softmax(head(batch), dim=-1)[1, : hidden.shape[0]]
    return logprobs.gather(1, targets.unsqueeze(1)).squeeze(1)


@pytest.mark.parametrize("rows", [1, 11, 37, POSITIONS, 2 * POSITIONS + 5])
def test_blocked_path_gives_the_heads_numbers_bit_for_bit(rows: int) -> None:
    head = linear_head()
    scorer = HeadLogprobs(head, device=CPU, softmax_dtype=None)
    assert scorer.blocked
    with torch.no_grad():
        for seed in (1, 2):  # the second call reuses the first's buffers
            hidden, targets = positions(rows, seed)
            assert torch.equal(scorer(hidden, targets), lm_evals_logprobs(head, hidden, targets))


def test_an_empty_slice_scores_nothing() -> None:
    scorer = HeadLogprobs(linear_head(), device=CPU, softmax_dtype=None)
    hidden, targets = positions(0)
    assert scorer(hidden, targets).shape == (0,)


@pytest.mark.parametrize(
    ("head", "device", "softmax_dtype"),
    [
        (linear_head(bias=True), CPU, None),
        (linear_head(dtype=torch.float64), CPU, None),
        (linear_head(), CPU, torch.float64),
        (linear_head(), torch.device("cuda"), None),
    ],
    ids=["bias", "float64 weight", "float64 softmax", "not the cpu"],
)
def test_heads_the_block_path_cannot_serve_keep_the_plain_one(
    head: torch.nn.Linear, device: torch.device, softmax_dtype: torch.dtype | None
) -> None:
    scorer = HeadLogprobs(head, device=device, softmax_dtype=softmax_dtype)
    assert not scorer.blocked
    if device.type == "cpu":
        hidden, targets = positions(300)
        hidden = hidden.to(head.weight.dtype)
        with torch.no_grad():
            expected = F.log_softmax(head(hidden), dim=-1, dtype=softmax_dtype)
            assert torch.equal(scorer(hidden, targets), expected.gather(1, targets.unsqueeze(1)).squeeze(1))


class WiderSumHead(torch.nn.Linear):
    """A head whose logits are summed in float64: other last bits than the blocked products."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden.double(), self.weight.double()).float()


def test_a_head_whose_numbers_differ_on_the_probe_keeps_the_plain_path() -> None:
    torch.manual_seed(0)
    head = WiderSumHead(HIDDEN, VOCAB, bias=False).eval()
    scorer = HeadLogprobs(head, device=CPU, softmax_dtype=None)
    assert not scorer.blocked
    hidden, targets = positions(40)
    with torch.no_grad():
        assert torch.equal(scorer(hidden, targets), lm_evals_logprobs(head, hidden, targets))


def test_the_plain_path_runs_chunk_by_chunk_with_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    head = linear_head(bias=True)
    monkeypatch.setattr(head_logprobs, "CHUNK", 20)
    scorer = HeadLogprobs(head, device=CPU, softmax_dtype=None)
    hidden, targets = positions(65)
    with torch.no_grad():
        expected = lm_evals_logprobs(head, hidden, targets)
        calls: list[int] = []
        head.register_forward_hook(lambda _m, args, _out: calls.append(args[0].shape[0]))
        assert torch.equal(scorer(hidden, targets), expected)
    # the last 5 positions run padded to MIN_ROWS: fewer rows would be summed in another order
    assert calls == [20, 20, 20, head_logprobs.MIN_ROWS]
