"""Two caches: model responses in sqlite (`--use_cache`) and built requests (`--cache_requests`).

The response cache is what makes a killed run resumable: answers are committed as they
are computed, and a rerun sends the model only what is missing. A backend that streams its
answers (`LM.streams_answers`: the HF backend) gets all missing requests in one call, as
lm-eval's CachingLM sends them, and each batch's answers are committed as it finishes, so a
kill loses at most one batch; any other backend is called 1024 requests at a time, with a
commit after each. Keys are lm-eval's (sha256 of the JSON of [method, *args]); sampled
generations are never cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sqlite3
from pathlib import Path
from typing import Any, Sequence

from assay.runner.models.instance import GenerationRequest, LoglikelihoodResult
from assay.runner.models.lm import LM

log = logging.getLogger(__name__)

_CHUNK = 1024  # requests per call and commit for a backend that does not stream answers


def request_key(method: str, args: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps([method, *args], default=str).encode("utf-8")).hexdigest()


class CachingLM(LM):
    """Wraps an LM; answers from the sqlite file when it can, and stores new answers."""

    def __init__(self, lm: LM, path: str | os.PathLike[str]) -> None:
        self.lm = lm
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path))
        self.db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value BLOB)")
        self.db.commit()
        self.rank, self.world_size = lm.rank, lm.world_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    def close(self) -> None:
        self.db.close()
        self.lm.close()

    def _cached_call(self, method: str, requests: Sequence[Any], **kwargs: Any) -> list[Any]:
        keys = [request_key(method, tuple(req.args)) for req in requests]
        results: list[Any] = [None] * len(requests)
        missing: list[int] = []
        for i, key in enumerate(keys):
            row = self.db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            if row is None:
                missing.append(i)
            else:
                results[i] = pickle.loads(row[0])
        if requests:
            # after a pod is replaced, the runner's log shows how much work the cache saved
            log.info(
                "%s: %d of %d requests answered from the response cache; %d sent to the model",
                method, len(requests) - len(missing), len(requests), len(missing),
            )
        if not missing:
            return results
        if getattr(self.lm, "streams_answers", False):
            self._call_streaming(method, requests, keys, missing, results, kwargs)
        else:
            for start in range(0, len(missing), _CHUNK):
                chunk = missing[start : start + _CHUNK]
                answers = getattr(self.lm, method)([requests[i] for i in chunk], **kwargs)
                self._store(list(zip(chunk, answers)), requests, keys, results)
        return results

    def _call_streaming(
        self, method: str, requests: Sequence[Any], keys: list[str], missing: list[int], results: list[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """One model call for every missing request; each batch's answers committed as they come."""
        stored: set[int] = set()

        def sink(done: Sequence[tuple[int, Any]]) -> None:
            finished = [(missing[position], answer) for position, answer in done]
            self._store(finished, requests, keys, results)
            stored.update(index for index, _ in finished)

        previous = self.lm.answer_sink
        self.lm.answer_sink = sink
        try:
            answers = getattr(self.lm, method)([requests[i] for i in missing], **kwargs)
        finally:
            self.lm.answer_sink = previous
        # the returned answers are authoritative; any the backend did not report get stored now
        self._store([(i, a) for i, a in zip(missing, answers) if i not in stored], requests, keys, results)
        for i, answer in zip(missing, answers):
            results[i] = answer

    def _store(self, answered: list[tuple[int, Any]], requests: Sequence[Any], keys: list[str], results: list[Any]) -> None:
        """Record answers by request index and commit them: what is committed survives a kill."""
        rows = []
        for i, answer in answered:
            results[i] = answer
            if not _is_sampled(requests[i]):
                rows.append((keys[i], pickle.dumps(answer)))
        if rows:
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?)", rows)
            self.db.commit()

    def loglikelihood(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[LoglikelihoodResult]:
        return [LoglikelihoodResult(*r) for r in self._cached_call("loglikelihood", requests, disable_tqdm=disable_tqdm)]

    def loglikelihood_rolling(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[float]:
        return self._cached_call("loglikelihood_rolling", requests, disable_tqdm=disable_tqdm)

    def generate_until(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[str]:
        return self._cached_call("generate_until", requests, disable_tqdm=disable_tqdm)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return self.lm.apply_chat_template(chat_history, add_generation_prompt)

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return self.lm.chat_template(chat_template)

    @property
    def tokenizer_name(self) -> str:
        return self.lm.tokenizer_name

    def model_info(self) -> dict[str, Any]:
        return self.lm.model_info()

    def tokenizer_info(self) -> dict[str, Any]:
        return self.lm.tokenizer_info()


def _is_sampled(request: Any) -> bool:
    return isinstance(request, GenerationRequest) and bool(request.gen_kwargs.get("do_sample", False))


def request_cache_dir() -> Path:
    return Path(os.environ.get("LM_HARNESS_CACHE_PATH", Path.home() / ".cache" / "assay" / "requests"))


def delete_request_cache() -> int:
    """--cache_requests delete: remove every cached request file; returns how many."""
    directory = request_cache_dir()
    removed = 0
    if directory.is_dir():
        for path in directory.glob("requests-*.pickle"):
            path.unlink()
            removed += 1
    return removed


class RequestCache:
    """Built requests of one task, pickled under LM_HARNESS_CACHE_PATH with lm-eval's key."""

    def __init__(self, key: str) -> None:
        self.path = request_cache_dir() / f"{key}.pickle"

    @classmethod
    def for_task(
        cls, task: Any, *, num_fewshot: int, chat: bool, multiturn: bool, system_instruction: str | None, tokenizer_name: str
    ) -> "RequestCache":
        # Assay's prompts do not depend on rank or world size, so neither is in the key.
        key = f"requests-{task.name}-{num_fewshot}shot"
        key += "-chat_template" if chat else ""
        key += "-fewshot_as_multiturn" if multiturn else ""
        if system_instruction is not None:
            key += f"-system_prompt_hash{hashlib.sha256(system_instruction.encode()).hexdigest()}"
        key += f"-tokenizer{tokenizer_name.replace('/', '__')}"
        return cls(key)

    def load(self) -> Any:
        if not self.path.is_file():
            return None
        with self.path.open("rb") as handle:
            return pickle.load(handle)

    def save(self, built: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as handle:
            pickle.dump(built, handle)
        tmp.replace(self.path)
