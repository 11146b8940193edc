"""Resume after pod loss: through the response cache a killed HF run loses at most one batch.

A real tiny GPT-2 and a real sqlite file. The crash is raised inside the model call, at the
start of a forward batch, as a killed pod would stop it; what the file then holds must be
exactly the answers of the batches that finished, and a rerun sends only the rest.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.runner.models.caching import CachingLM, request_key
from assay.runner.models.hf import generation, refill, rolling, scoring, shared_context
from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import GenerationRequest, RollingRequest
from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)
from tests.models.hf_requests import LL_REQUESTS, sent_counter

BATCH = 2

ROLLING_REQUESTS = [
    RollingRequest(t)
    for t in [
        "A short document.",
        "This is a longer document that needs several windows. " * 12,  # two windows, in two batches
        "x",
        "Another document of a few words, but more than one window long. " * 2,
        "The end.",
    ]
]
GEN_REQUESTS = [
    GenerationRequest(c, {"until": ["\n"], "max_gen_toks": 5})
    for c in [
        "Once upon a time",
        "The answer is",
        "Q: 1+1?\nA:",
        "Hello",
        "A long prompt " * 5,
        "Last",
    ]
]
CASES = {"loglikelihood": LL_REQUESTS, "loglikelihood_rolling": ROLLING_REQUESTS, "generate_until": GEN_REQUESTS}

# the functions that run one forward batch (or, for generation, one generated batch, or the
# prompt pass of the rows that join a refilling batch)
BATCH_FUNCTIONS = [
    (scoring.Scorer, "_forward_chunk"),
    (shared_context.SharedContextScorer, "score_group"),
    (rolling.RollingScorer, "score"),
    (generation.Generator, "_generate"),
    (refill.RefillDecoder, "_admit"),
]


class PodLost(Exception):
    """Stands in for the pod going away mid-run."""


class BatchCounter:
    """Counts forward batches; raises PodLost at the start of batch `crash_at` (if given)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, crash_at: int | None = None) -> None:
        self.done = 0
        self.crash_at = crash_at
        for owner, name in BATCH_FUNCTIONS:
            monkeypatch.setattr(owner, name, self._wrap(getattr(owner, name)))

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if self.crash_at is not None and self.done + 1 == self.crash_at:
                raise PodLost(f"killed at batch {self.crash_at}")
            result = original(*args, **kwargs)
            self.done += 1
            return result

        return counted


def hf(gpt2_dir: Path) -> HFLM:
    return HFLM(pretrained=str(gpt2_dir), device="cpu", batch_size=BATCH)


def stored(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT key, value FROM responses").fetchall())


def keys(method: str, requests: Sequence[Any]) -> list[str]:
    return [request_key(method, tuple(r.args)) for r in requests]


@pytest.mark.parametrize("method", list(CASES))
def test_cached_run_equals_uncached_run_exactly(gpt2_dir: Path, tmp_path: Path, method: str) -> None:
    requests = CASES[method]
    uncached = getattr(hf(gpt2_dir), method)(requests, disable_tqdm=True)
    lm = hf(gpt2_dir)
    sizes = sent_counter(lm, method)
    cached = getattr(CachingLM(lm, tmp_path / "c.db"), method)(requests, disable_tqdm=True)
    assert cached == uncached  # same floats, not close ones
    assert sizes == [len(requests)]  # one call with every request, as lm-eval's CachingLM
    assert set(stored(tmp_path / "c.db")) == set(keys(method, requests))
    assert lm.answer_sink is None


# rolling, k=1: the second document's first window is scored in batch 1 and its last in
# batch 2, so the kill must leave it out (a partial total is not an answer)
@pytest.mark.parametrize("method,k", [("loglikelihood", 3), ("loglikelihood_rolling", 1), ("generate_until", 1)])
def test_killed_run_keeps_its_finished_batches_and_resumes(
    gpt2_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
    k: int,
) -> None:
    requests = CASES[method]
    all_keys = keys(method, requests)

    # reference: an uncached run, noting how many batches had finished when each answer was final
    with monkeypatch.context() as patch:
        counter = BatchCounter(patch)
        reference = hf(gpt2_dir)
        final_after: dict[int, int] = {}
        reference.answer_sink = lambda done: final_after.update({i: counter.done for i, _ in done})
        expected = getattr(reference, method)(requests, disable_tqdm=True)
        assert counter.done > k, "the case needs a batch to crash in"
    assert sorted(final_after) == list(range(len(requests)))
    finished = {all_keys[i] for i, after in final_after.items() if after <= k}
    assert 0 < len(finished) < len(requests)

    # the killed run: the pod goes at the start of batch k + 1
    path = tmp_path / "cache_rank0.db"
    with monkeypatch.context() as patch:
        BatchCounter(patch, crash_at=k + 1)
        lm = hf(gpt2_dir)
        with pytest.raises(PodLost):
            getattr(CachingLM(lm, path), method)(requests, disable_tqdm=True)
        assert lm.answer_sink is None
    assert set(stored(path)) == finished

    # the rerun on the replaced pod sends the model only what is missing
    lm = hf(gpt2_dir)
    sizes = sent_counter(lm, method)
    with caplog.at_level(logging.INFO, logger="assay.runner.models.caching"):
        resumed = getattr(CachingLM(lm, path), method)(requests, disable_tqdm=True)
    assert sizes == [len(requests) - len(finished)]
    assert (
        f"{method}: {len(finished)} of {len(requests)} requests answered from the response cache; "
        f"{len(requests) - len(finished)} sent to the model" in caplog.text
    )
    assert set(stored(path)) == set(all_keys)
    # answers from the cache are the killed run's, bit for bit; the rest are exactly what an
    # uncached run on the missing requests gives. Those sit in other batches than in one
    # full run, and a batch's padded width moves a float in its last bits (lm-eval alike)
    missing = [i for i, key in enumerate(all_keys) if key not in finished]
    fresh = getattr(hf(gpt2_dir), method)([requests[i] for i in missing], disable_tqdm=True)
    assert [resumed[i] for i in missing] == fresh
    assert [r for i, r in enumerate(resumed) if i not in missing] == [
        r for i, r in enumerate(expected) if i not in missing
    ]
    assert_close(resumed, expected)


def assert_close(got: Sequence[Any], want: Sequence[Any]) -> None:
    """Equal texts and greedy flags; log-likelihoods within the parity tolerance (1e-5)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=False):
        if isinstance(w, str):
            assert g == w
        else:
            g_value, w_value = (g[0], w[0]) if isinstance(w, tuple) else (g, w)
            assert g_value == pytest.approx(w_value, abs=1e-5, rel=0)
            if isinstance(w, tuple):
                assert g[1] == w[1]
