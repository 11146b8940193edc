"""The sqlite response cache (--use_cache) and the request cache (--cache_requests)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.models.caching import CachingLM, RequestCache, delete_request_cache, request_key
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM


class CountingLM(AssayFakeLM):
    def __init__(self) -> None:
        self.calls: dict[str, int] = {"loglikelihood": 0, "generate_until": 0, "loglikelihood_rolling": 0}

    def loglikelihood(self, requests, *, disable_tqdm=False):
        self.calls["loglikelihood"] += len(requests)
        return super().loglikelihood(requests)

    def generate_until(self, requests, *, disable_tqdm=False):
        self.calls["generate_until"] += len(requests)
        return super().generate_until(requests)


def test_response_cache_answers_a_rerun_without_the_model(parity_task_dir: Path, tmp_path: Path) -> None:
    first_lm = CountingLM()
    kwargs = dict(tasks=["p_arc", "p_gsm"], limit=4, bootstrap_iters=0)
    first = simple_evaluate(
        CachingLM(first_lm, tmp_path / "cache_rank0.db"), task_manager=TaskManager(str(parity_task_dir)), **kwargs
    )
    assert first_lm.calls["loglikelihood"] > 0 and first_lm.calls["generate_until"] == 4
    rows = sqlite3.connect(tmp_path / "cache_rank0.db").execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    assert rows == first_lm.calls["loglikelihood"] + first_lm.calls["generate_until"]

    second_lm = CountingLM()
    second = simple_evaluate(
        CachingLM(second_lm, tmp_path / "cache_rank0.db"), task_manager=TaskManager(str(parity_task_dir)), **kwargs
    )
    assert second_lm.calls == {"loglikelihood": 0, "generate_until": 0, "loglikelihood_rolling": 0}
    assert second["results"] == first["results"]


def test_sampled_generations_are_never_cached(tmp_path: Path) -> None:
    lm = CountingLM()
    cached = CachingLM(lm, tmp_path / "c.db")
    sampled = GenerationRequest("Question: 1+1?", {"until": ["\n"], "do_sample": True})
    cached.generate_until([sampled])
    cached.generate_until([sampled])
    assert lm.calls["generate_until"] == 2
    cached.loglikelihood([LoglikelihoodRequest("a", " b")])
    cached.loglikelihood([LoglikelihoodRequest("a", " b")])
    assert lm.calls["loglikelihood"] == 1


def test_cache_key_is_lm_evals() -> None:
    import hashlib
    import json

    assert (
        request_key("loglikelihood", ("a", " b"))
        == hashlib.sha256(json.dumps(["loglikelihood", "a", " b"]).encode()).hexdigest()
    )


def test_request_cache_reuses_built_prompts_and_can_be_deleted(
    parity_task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LM_HARNESS_CACHE_PATH", str(tmp_path / "requests"))
    kwargs = dict(tasks=["p_arc"], limit=3, num_fewshot=2, bootstrap_iters=0, cache_requests=True)
    first = simple_evaluate(AssayFakeLM(), task_manager=TaskManager(str(parity_task_dir)), **kwargs)
    files = list((tmp_path / "requests").glob("requests-p_arc-2shot*.pickle"))
    assert len(files) == 1
    # A different few-shot seed would change the prompts; the cache keeps the stored ones.
    cached = simple_evaluate(
        AssayFakeLM(), task_manager=TaskManager(str(parity_task_dir)), fewshot_random_seed=7, **kwargs
    )
    assert [s["arguments"] for s in cached["samples"]["p_arc"]] == [s["arguments"] for s in first["samples"]["p_arc"]]
    rebuilt = simple_evaluate(
        AssayFakeLM(),
        task_manager=TaskManager(str(parity_task_dir)),
        fewshot_random_seed=7,
        rewrite_requests_cache=True,
        **kwargs,
    )
    assert [s["arguments"] for s in rebuilt["samples"]["p_arc"]] != [s["arguments"] for s in first["samples"]["p_arc"]]
    assert delete_request_cache() == 1
    assert not list((tmp_path / "requests").glob("*.pickle"))
    assert RequestCache("requests-none").load() is None
