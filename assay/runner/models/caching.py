"""Two caches: model responses in sqlite (`--use_cache`) and built requests (`--cache_requests`).

The response cache is what makes a killed run resumable: answers are committed as they
are computed, and a rerun sends the model only what is missing. A backend that streams its
answers (`LM.streams_answers`: the HF backend) gets all missing requests in one call, as
lm-eval's CachingLM sends them, and each batch's answers are committed as it finishes, so a
kill loses at most one batch; any other backend is called 1024 requests at a time, with a
commit after each. The cache itself streams: its caller's `answer_sink` hears the cached
answers at once and each new batch as it is committed (the runner's progress counts them). Keys are lm-eval's (sha256 of the JSON of [method, *args]); sampled
generations are never cached.

A cache file answers for one model only. Its keys are the requests alone, so lm-eval's
cache hands model B the answers it stored for model A under the same path; Assay's keeps
the model's identity (`cache_identity`: backend, the model_args that change answers, a
fingerprint of the checkpoint) in a `meta` table and refuses, in one sentence naming the
file, the model it was written for and the fix, to open for another. Refusing rather than
keeping several models apart in one file: a file written by two models is the mistake this
guards against (one `--use_cache` path reused, a checkpoint replaced in place), and a
loud stop shows it, where a shared file would quietly fill with a second model's answers
and still offer a resumed run a mix of two checkpoints. Runs that are meant to differ
already get separate files: the operator gives each Evaluation's run its own path (its
uid and spec hash), and a command-line user passes another path.

Values are JSON, never pickle: a cache lives on volumes that other pods write, and
unpickling such a file runs whatever code it names. Answers are JSON-native (a
[log-likelihood, is-greedy] pair, a float, a string) and Python writes floats by `repr`,
which reads back to the same bits. A file of the older format (pickled values, no `meta`
table) is refused, never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pickle
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from assay.errors import UserError
from assay.runner.models.cache_identity import ModelIdentity, identify
from assay.runner.models.instance import GenerationRequest, LoglikelihoodResult
from assay.runner.models.lm import LM, AnswerSink

log = logging.getLogger(__name__)

_CHUNK = 1024  # requests per call and commit for a backend that does not stream answers
# 1: Assay before cache identity (pickled values, no meta table); 2: JSON values and the model in `meta`
SCHEMA = 2


def response_cache_path(use_cache: str, rank: int) -> str:
    """lm-eval's file for `--use_cache PATH` on one rank: one sqlite file per rank."""
    return f"{use_cache}_rank{rank}.db"


def stored_answers(path: str | os.PathLike[str]) -> int:
    """How many answers the cache file at `path` holds (0 for a file without answers yet)."""
    with contextlib.closing(sqlite3.connect(str(path))) as db:
        try:
            return int(db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
        except sqlite3.DatabaseError:
            return 0


def request_key(method: str, args: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps([method, *args], default=str).encode("utf-8")).hexdigest()


def _as_is(answer: Any) -> Any:
    return answer


def _as_loglikelihood(answer: Any) -> LoglikelihoodResult:
    """A stored [log-likelihood, is-greedy] pair (or a fresh result) as the result record."""
    return LoglikelihoodResult(*answer)


class CachingLM(LM):
    """Wraps an LM; answers from the sqlite file when it can, and stores new answers."""

    streams_answers = True  # cached answers at once, then each committed batch or chunk

    def __init__(self, lm: LM, path: str | os.PathLike[str], *, identity: ModelIdentity | None = None) -> None:
        """`identity`: the model the answers belong to; None for a caller's own instance, known by its class."""
        self.lm = lm
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.identity = identity if identity is not None else identify(lm, None)
        self.db = open_cache(self.path, self.identity)
        self.rank, self.world_size = lm.rank, lm.world_size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lm, name)

    def close(self) -> None:
        self.db.close()
        self.lm.close()

    def _cached_call(
        self, method: str, requests: Sequence[Any], shape: Callable[[Any], Any] = _as_is, **kwargs: Any
    ) -> list[Any]:
        """Each request's answer, in order: `shape` of the stored or computed value."""
        keys = [request_key(method, tuple(req.args)) for req in requests]
        results: list[Any] = [None] * len(requests)
        outer = self.answer_sink

        def report(done: Sequence[tuple[int, Any]]) -> None:
            if outer is not None and done:
                outer([(i, shape(answer)) for i, answer in done])

        missing: list[int] = []
        for i, key in enumerate(keys):
            row = self.db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
            answer = _decode(row[0]) if row is not None else _MISSING
            if answer is _MISSING:
                missing.append(i)
            else:
                results[i] = answer
        if requests:
            # after a pod is replaced, the runner's log shows how much work the cache saved
            log.info(
                "%s: %d of %d requests answered from the response cache; %d sent to the model",
                method,
                len(requests) - len(missing),
                len(requests),
                len(missing),
            )
        if len(missing) < len(requests):
            absent = set(missing)
            report([(i, results[i]) for i in range(len(requests)) if i not in absent])
        if getattr(self.lm, "streams_answers", False):
            self._call_streaming(method, requests, keys, missing, results, kwargs, report)
        else:
            for start in range(0, len(missing), _CHUNK):
                chunk = missing[start : start + _CHUNK]
                answers = getattr(self.lm, method)([requests[i] for i in chunk], **kwargs)
                self._store(list(zip(chunk, answers, strict=False)), requests, keys, results)
                report(list(zip(chunk, answers, strict=False)))
        return [shape(answer) for answer in results]

    def _call_streaming(
        self,
        method: str,
        requests: Sequence[Any],
        keys: list[str],
        missing: list[int],
        results: list[Any],
        kwargs: dict[str, Any],
        report: AnswerSink,
    ) -> None:
        """One model call for every missing request; each batch's answers committed as they
        come, then reported."""
        if not missing:
            return
        stored: set[int] = set()

        def sink(done: Sequence[tuple[int, Any]]) -> None:
            finished = [(missing[position], answer) for position, answer in done]
            self._store(finished, requests, keys, results)
            stored.update(index for index, _ in finished)
            report(finished)

        previous = self.lm.answer_sink
        self.lm.answer_sink = sink
        try:
            answers = getattr(self.lm, method)([requests[i] for i in missing], **kwargs)
        finally:
            self.lm.answer_sink = previous
        # the returned answers are authoritative; any the backend did not report get stored now
        unreported = [(i, a) for i, a in zip(missing, answers, strict=False) if i not in stored]
        self._store(unreported, requests, keys, results)
        report(unreported)
        for i, answer in zip(missing, answers, strict=False):
            results[i] = answer

    def _store(
        self, answered: list[tuple[int, Any]], requests: Sequence[Any], keys: list[str], results: list[Any]
    ) -> None:
        """Record answers by request index and commit them: what is committed survives a kill."""
        rows = []
        for i, answer in answered:
            results[i] = answer
            if not _is_sampled(requests[i]):
                rows.append((keys[i], _encode(answer)))
        if rows:
            self.db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?)", rows)
            self.db.commit()

    def loglikelihood(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[LoglikelihoodResult]:
        return self._cached_call("loglikelihood", requests, _as_loglikelihood, disable_tqdm=disable_tqdm)

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


_MISSING = object()


def _encode(answer: Any) -> str:
    # allow_nan: a log-likelihood may be -inf; Python's JSON reads its own -Infinity back
    return json.dumps(answer, default=_plain)


def _plain(value: Any) -> Any:
    """A numpy scalar (a backend's float32) as the Python number it equals exactly."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"a cached answer must be JSON (a number, a string, a pair), not {type(value).__name__}")


def _decode(value: Any) -> Any:
    """The stored answer; _MISSING for a value that does not parse, which is then computed again."""
    try:
        return json.loads(value)
    except (ValueError, TypeError):  # not JSON text (a BLOB, a number): computed again and replaced
        return _MISSING


def open_cache(path: Path, identity: ModelIdentity) -> sqlite3.Connection:
    """The cache file at `path` for `identity`: created, or opened if it was written for the same model."""
    db = sqlite3.connect(str(path))
    try:
        _claim(db, path, identity)
    except BaseException:
        db.close()
        raise
    return db


def _claim(db: sqlite3.Connection, path: Path, identity: ModelIdentity) -> None:
    """Creates the tables and the meta rows of a new file; refuses a file of another format or model."""
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        raise UserError(
            f"{path} is not an Assay response cache (not an sqlite database); pass another "
            f"--use_cache path or delete {path}."
        ) from None
    if tables and "meta" not in tables:
        raise UserError(
            f"The response cache {path} was written by an older Assay (pickled answers and no model "
            f"identity) and is not read, for safety; delete {path} and run again."
        )
    if not tables:
        # IMMEDIATE: of two runs creating one file at once, one writes the meta rows, the other reads them
        db.execute("BEGIN IMMEDIATE")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.executemany(
            "INSERT OR IGNORE INTO meta VALUES (?, ?)", [("schema", str(SCHEMA)), ("model", identity.to_json())]
        )
        db.commit()
    meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    schema = int(meta["schema"]) if str(meta.get("schema", "")).isdigit() else 0
    if schema < SCHEMA:
        raise UserError(
            f"The response cache {path} was written by an older Assay (cache format {schema}, this one "
            f"reads {SCHEMA}) and is not read, for safety; delete {path} and run again."
        )
    if schema > SCHEMA:
        raise UserError(
            f"The response cache {path} was written by a newer Assay (cache format {schema}, this one "
            f"reads {SCHEMA}); run that Assay, or pass another --use_cache path."
        )
    written_for = _written_for(meta.get("model"))
    if written_for is None or written_for.to_json() != identity.to_json():
        theirs = written_for.describe() if written_for is not None else "an unreadable model record"
        raise UserError(
            f"The response cache {path} was written for the model {theirs}, not {identity.describe()}; "
            f"pass another --use_cache path for this model or delete {path}."
        )


def _written_for(text: str | None) -> ModelIdentity | None:
    try:
        return ModelIdentity.from_json(text or "")
    except (ValueError, KeyError, TypeError):
        return None


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
        cls,
        task: Any,
        *,
        num_fewshot: int,
        chat: bool,
        multiturn: bool,
        system_instruction: str | None,
        tokenizer_name: str,
    ) -> RequestCache:
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
