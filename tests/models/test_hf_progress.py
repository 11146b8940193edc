"""Progress while the model works: counted from the answers a backend streams, not by cutting
the run's requests into calls, so a run that reports progress (a runner pod) sends the model
the same calls as one that does not (`assay run`) and gets the same floats.

A real tiny GPT-2 and a real sqlite response cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay.runner import doc_work
from assay.runner.evaluator import simple_evaluate
from assay.runner.models import caching
from assay.runner.models.caching import CachingLM
from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import LoglikelihoodResult
from assay.runner.tasks.index import TaskManager
from model_fixtures import gpt2_dir  # noqa: F401  (session fixture)
from tests.engine.fake_lm import AssayFakeLM
from tests.models.hf_requests import LL_REQUESTS, sent_counter

BATCH = 2


def hf(gpt2_dir: Path) -> HFLM:
    return HFLM(pretrained=str(gpt2_dir), device="cpu", batch_size=BATCH)


class Heard:
    """An answer sink that keeps every report."""

    def __init__(self) -> None:
        self.reports: list[list[tuple[int, Any]]] = []

    def __call__(self, done: Sequence[tuple[int, Any]]) -> None:
        self.reports.append(list(done))

    def positions(self) -> list[int]:
        return [i for report in self.reports for i, _ in report]


def test_the_cache_reports_each_answer_once_the_cached_ones_first(gpt2_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    first = CachingLM(hf(gpt2_dir), path).loglikelihood(LL_REQUESTS[:5], disable_tqdm=True)

    heard = Heard()
    cache = CachingLM(hf(gpt2_dir), path)
    cache.answer_sink = heard
    answers = cache.loglikelihood(LL_REQUESTS, disable_tqdm=True)

    assert answers[:5] == first
    assert sorted(heard.positions()) == list(range(len(LL_REQUESTS)))  # each once
    assert [i for i, _ in heard.reports[0]] == [0, 1, 2, 3, 4]  # the cached answers, at once
    assert len(heard.reports) > 2  # then the model's batches, one report each
    for report in heard.reports:
        for i, answer in report:
            assert isinstance(answer, LoglikelihoodResult) and answer == answers[i]


def test_a_backend_that_does_not_stream_is_reported_per_chunk_behind_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caching, "_CHUNK", 3)
    heard = Heard()
    cache = CachingLM(AssayFakeLM(), tmp_path / "c.db")
    cache.answer_sink = heard
    answers = cache.loglikelihood(LL_REQUESTS, disable_tqdm=True)
    assert [len(report) for report in heard.reports] == [3, 3, 3, 3, 1]
    assert heard.positions() == list(range(len(LL_REQUESTS)))
    assert [answer for report in heard.reports for _, answer in report] == answers


def test_a_run_that_reports_progress_sends_the_model_what_a_silent_run_does(
    gpt2_dir: Path,
    parity_task_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Were requests still cut into progress chunks, a chunk of 4 would batch them otherwise.
    monkeypatch.setattr(doc_work, "_PROGRESS_CHUNK", 4)
    kwargs: dict[str, Any] = dict(tasks=["p_arc"], limit=6, bootstrap_iters=0, log_samples=True)

    silent_lm = hf(gpt2_dir)
    silent_calls = sent_counter(silent_lm, "loglikelihood")
    silent = simple_evaluate(silent_lm, task_manager=TaskManager(str(parity_task_dir)), **kwargs)

    reports: list[tuple[int, int]] = []
    watched_lm = hf(gpt2_dir)
    watched_calls = sent_counter(watched_lm, "loglikelihood")
    watched = simple_evaluate(
        watched_lm,
        task_manager=TaskManager(str(parity_task_dir)),
        progress=lambda done, total: reports.append((done, total)),
        **kwargs,
    )

    every_choice = sum(len(sample["arguments"]) for sample in silent["samples"]["p_arc"])
    assert watched_calls == silent_calls == [every_choice]  # one call with every request
    assert watched["results"] == silent["results"]  # the same floats, not close ones
    responses = [[s["resps"] for s in run["samples"]["p_arc"]] for run in (silent, watched)]
    assert responses[0] == responses[1]
    total = watched_calls[0]
    done = [d for d, t in reports if t == total]
    assert done[0] == 0 and done[-1] == total and done == sorted(done)
    assert len(set(done) - {0, total}) >= 2, reports  # heard between the model's batches
