"""Multiple-choice documents packed one to a row (context, then its choices' tails as a trie)
give lm-eval's numbers in one pass of the model body, and the scorer keeps the cached-tails
path for a model that does not honour the packed row's mask and positions.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from assay.runner.models.hf import packed_documents
from assay.runner.models.hf.shared_context import cache_arg
from model_fixtures import gpt2_dir, llama_dir, t5_dir  # noqa: F401  (fixtures)
from tests.models.hf_parity import assert_ll_equal, ll_both, model_dirs, pair  # noqa: F401  (fixture)
from tests.models.hf_requests import MC_REQUESTS, _count_forwards


def test_a_documents_tails_are_laid_out_as_a_trie_after_its_context() -> None:
    document = packed_documents.pack_document([1, 2, 3], [[4, 5], [4, 6], [7], []])
    assert document.tokens == [1, 2, 3, 4, 5, 6, 7]  # " 4" once for the two tails that begin with it
    assert document.positions == [0, 1, 2, 3, 4, 4, 3]  # each branch continues the context
    assert document.parents == [-1, 0, 1, 2, 3, 3, 2]
    # each member's scored positions: the context's last, then its own branch
    assert document.member_rows == [[2, 3, 4], [2, 3, 5], [2, 6], [2]]
    assert document.scored == slice(2, 7)
    ids, positions, mask = packed_documents.batch_inputs(
        [document, packed_documents.pack_document([8, 9], [[1]])], mask_format="sdpa", dtype=torch.float32
    )
    assert ids.tolist() == [[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 0, 0, 0, 0]]
    assert positions.tolist() == [[0, 1, 2, 3, 4, 4, 3], [0, 1, 2, 0, 0, 0, 0]]
    sees = mask[0, 0]
    assert sees[5].tolist() == [True, True, True, True, False, True, False]  # not its sibling " 5"
    assert sees[6].tolist() == [True, True, True, False, False, False, True]
    assert sees[:3, :3].tolist() == torch.ones((3, 3), dtype=torch.bool).tril().tolist()
    assert mask[1, 0, 4].tolist() == [False, False, False, False, True, False, False]  # padding sees itself
    _, _, additive = packed_documents.batch_inputs([document], mask_format="eager", dtype=torch.float32)
    assert bool((additive[0, 0][sees] == 0).all()) and bool(
        (additive[0, 0][~sees] == torch.finfo(torch.float32).min).all()
    )


# choices that begin with the same tokens share those positions in the row
TRIE_REQUESTS = [
    (ctx, choice)
    for ctx in ("Q: What is in the box?\nA:", "Q: Where is the key now?\nA:")
    for choice in (" the red cat", " the red dog", " the blue hat", " nothing at all")
]


@pytest.mark.parity
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 8])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_documents_give_lm_evals_numbers_in_one_pass(
    model_dirs: dict[str, Path], kind: str, batch_size: int, attention: str
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size, attn_implementation=attention)
    assert ours.scorer.shared is not None and ours.scorer.shared.packing() == (attention, torch.float32)
    shapes, handle = _count_forwards(ours.model.base_model)
    head_rows: list[int] = []
    on_head = ours.model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: head_rows.append(args[0].shape[0])
    )
    try:
        for requests in (MC_REQUESTS, TRIE_REQUESTS):
            mine, ref = ll_both(ours, theirs, requests)
            assert_ll_equal(mine, ref)
    finally:
        handle.remove()
        on_head.remove()
    # one body pass per batch of documents: both documents of each call at once with batch 8
    assert [s[0] for s in shapes] == ([2, 2] if batch_size == 8 else [1, 1, 1, 1])
    # the head once per pass, on each document's last context position and each distinct tail
    # prefix: " the red" reaches it once for " the red cat" and " the red dog"
    per_document = []
    for requests in (MC_REQUESTS, TRIE_REQUESTS):
        for document in (requests[:4], requests[4:]):
            tails = [tuple(theirs._encode_pair(context, choice)[1][:-1]) for context, choice in document]
            per_document.append(1 + len({tail[: k + 1] for tail in tails for k in range(len(tail))}))
    assert per_document[2] < 1 + sum(len(theirs._encode_pair(*r)[1]) - 1 for r in TRIE_REQUESTS[:4])
    expected = [per_document[0] + per_document[1], per_document[2] + per_document[3]]
    assert head_rows == (expected if batch_size == 8 else per_document)


class _MaskDropped(torch.nn.Module):
    """A body that drops the attention mask and position ids it is given: what a model that
    builds its own mask does with a packed row (a wrapper, since no model at hand does)."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self.body = body

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        kwargs.pop("attention_mask", None)
        kwargs.pop("position_ids", None)
        return self.body(input_ids, **kwargs)


def test_a_model_that_ignores_the_packed_mask_is_refused(gpt2_dir: Path) -> None:
    from assay.runner.models.hf.model import HFLM

    lm = HFLM(pretrained=str(gpt2_dir), device="cpu", batch_size=8)
    body = lm.model.base_model
    asked: dict[str, Any] = dict(
        device=torch.device("cpu"),
        autocast=contextlib.nullcontext,
        cache_arg=cache_arg(inspect.signature(body.forward).parameters),
    )
    assert packed_documents.packing_works(body, lm.model, **asked) == ("sdpa", torch.float32)
    broken = packed_documents.packing_works(_MaskDropped(body), lm.model, **asked)
    assert broken is None
    # flash attention and the like take no 4D mask as given: not even probed
    config = type("Config", (), {"_attn_implementation": "flash_attention_2"})()
    assert packed_documents.mask_format(type("Model", (), {"config": config})()) is None
