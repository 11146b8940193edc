"""Out of memory in a faster pass falls back to a smaller one and still gives lm-eval's numbers.

This machine has no GPU, so the out-of-memory error is raised by hand (CUDA's own
`OutOfMemoryError`, in place of the pass that would run out); the model, the requests and
lm-eval's reference numbers are real. Each test checks the numbers and the fallback's own
passes through the model body.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from model_fixtures import gpt2_dir, llama_dir, t5_dir  # noqa: F401  (fixtures)
from tests.models.hf_parity import assert_ll_equal, model_dirs, pair  # noqa: F401  (fixture)
from tests.models.hf_requests import MC_REQUESTS, PREFIX_REQUESTS, scored_counting_body_passes

pytestmark = pytest.mark.parity


def _out_of_memory(*_args: Any, **_kwargs: Any) -> Any:
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_pass_of_documents_out_of_memory_runs_them_one_at_a_time(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=8)
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()  # probes the body → head split
    monkeypatch.setattr(ours.scorer.shared, "score_groups", _out_of_memory)
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, MC_REQUESTS)
    assert_ll_equal(mine, ref)
    # each document alone: its context, then its four choices' tails on its cache
    assert [s[0] for s in shapes] == [1, 4, 1, 4]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_rows_on_a_prefix_out_of_memory_run_one_document_at_a_time(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=4)
    assert ours.scorer.shared is not None and ours.scorer.shared.head_apart()
    monkeypatch.setattr(ours.scorer.shared, "score_rows", _out_of_memory)
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, PREFIX_REQUESTS)
    assert_ll_equal(mine, ref)
    # the shared shots once, then every one-row document alone on their cache (none batched)
    assert shapes[0][0] == 1 and all(s[0] == 1 for s in shapes[1:])


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_one_document_on_its_cache_out_of_memory_runs_full_passes(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=1)
    assert ours.scorer.shared is not None
    # a model whose LM head cannot run apart from its body scores a document at a time on its cache
    monkeypatch.setattr(ours.scorer.shared, "head_apart", lambda: False)
    monkeypatch.setattr(ours.scorer.shared, "score_group", _out_of_memory)
    mine, ref, shapes = scored_counting_body_passes(ours, theirs, MC_REQUESTS)
    assert_ll_equal(mine, ref)
    # lm-eval's own passes: every request's whole context and continuation, one row each
    widths = [len(c) + len(x) - 1 for c, x in (theirs._encode_pair(*request) for request in MC_REQUESTS)]
    assert sorted(s[1] for s in shapes) == sorted(widths) and all(s[0] == 1 for s in shapes)
