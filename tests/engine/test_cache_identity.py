"""A response cache answers only for the model it was written for, and holds JSON, never pickle.

Real tiny GPT-2 checkpoints (two seeds), real sqlite files, the real `assay run` command.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import sqlite3
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.errors import UserError
from assay.runner.models import get_model
from assay.runner.models.cache_identity import fingerprint, identify
from assay.runner.models.caching import CachingLM
from assay.runner.models.hf.model import HFLM
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM
from tests.helpers import copy_tasks
from tests.model_fixtures import gpt2_dir, tiny_gpt2  # noqa: F401  (session fixture)

LL = [
    LoglikelihoodRequest("The capital of France is", " Paris"),
    LoglikelihoodRequest("Q: 2+2?\nA:", " four"),
    LoglikelihoodRequest("Hello world", " Hello"),
]
ROLLING = [RollingRequest("A short document."), RollingRequest("Several windows of text. " * 12)]
GEN = [GenerationRequest("Once upon a time", {"until": ["\n"], "max_gen_toks": 5})]


@pytest.fixture(scope="module")
def other_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The same tiny GPT-2 architecture with other weights (another seed)."""
    return tiny_gpt2(tmp_path_factory.mktemp("tiny_gpt2_other"), shared_data / "gpt2_tokenizer", seed=4321)


def hf_args(model: Path, **more: Any) -> dict[str, Any]:
    return {"pretrained": str(model), "dtype": "float32", "device": "cpu", "batch_size": 2, **more}


def cached_hf(model: Path, path: Path, **more: Any) -> CachingLM:
    args = hf_args(model, **more)
    lm = HFLM(**args)
    return CachingLM(lm, path, identity=identify(lm, args))


class ModelMustNotRun(LM):
    """Stands in for the model when every answer must come from the cache."""

    def loglikelihood(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[Any]:
        raise AssertionError(f"the model was asked for {len(requests)} answers the cache holds")

    loglikelihood_rolling = generate_until = loglikelihood


def bits(value: Any) -> Any:
    """Floats as their 8 bytes (nan == nan, -0.0 != 0.0), everything else as it is."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [bits(v) for v in value])
    return value


def test_answers_from_the_cache_are_bit_identical_to_fresh_ones(gpt2_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    writer = cached_hf(gpt2_dir, path)
    fresh = {
        m: getattr(writer, m)(r)
        for m, r in [("loglikelihood", LL), ("loglikelihood_rolling", ROLLING), ("generate_until", GEN)]
    }
    writer.close()
    reader = CachingLM(ModelMustNotRun(), path, identity=writer.identity)
    from_cache = {
        m: getattr(reader, m)(r)
        for m, r in [("loglikelihood", LL), ("loglikelihood_rolling", ROLLING), ("generate_until", GEN)]
    }
    assert {m: bits(v) for m, v in from_cache.items()} == {m: bits(v) for m, v in fresh.items()}
    assert all(type(r) is LoglikelihoodResult for r in from_cache["loglikelihood"])
    # stored as JSON text: a reader unpickles nothing
    with sqlite3.connect(path) as db:
        values = [row[0] for row in db.execute("SELECT value FROM responses")]
    assert len(values) == len(LL) + len(ROLLING) + len(GEN) and all(isinstance(v, str) for v in values)
    assert sorted(json.loads(v) for v in values if v.startswith('"')) == sorted(fresh["generate_until"])


class EdgeFloats(LM):
    """Answers with the floats JSON is most likely to get wrong."""

    VALUES = [-math.inf, math.nan, 5e-324, 0.1 + 0.2, -0.0, -1.0000000000000002, 1e308]

    def loglikelihood(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[LoglikelihoodResult]:
        return [LoglikelihoodResult(self.VALUES[i % len(self.VALUES)], i % 2 == 0) for i in range(len(requests))]

    def loglikelihood_rolling(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[float]:
        import numpy as np

        # a backend may hand numpy scalars over; the cache gives back the number they equal
        return [np.float32(-1.1) if i == 0 else self.VALUES[i % len(self.VALUES)] for i in range(len(requests))]

    def generate_until(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[str]:
        return ["" for _ in requests]


def test_edge_floats_round_trip_exactly(tmp_path: Path) -> None:
    requests = [LoglikelihoodRequest(f"ctx {i}", " x") for i in range(7)]
    rolling = [RollingRequest(f"doc {i}") for i in range(7)]
    writer = CachingLM(EdgeFloats(), tmp_path / "c.db")
    fresh, fresh_rolling = writer.loglikelihood(requests), writer.loglikelihood_rolling(rolling)
    writer.close()
    reader = CachingLM(ModelMustNotRun(), tmp_path / "c.db", identity=writer.identity)
    assert bits(reader.loglikelihood(requests)) == bits(fresh)
    got = reader.loglikelihood_rolling(rolling)
    assert bits(got[1:]) == bits(fresh_rolling[1:])
    assert got[0] == float(fresh_rolling[0]) and struct.pack("<f", got[0]) == struct.pack("<f", fresh_rolling[0])


def refusal(call: Any) -> str:
    with pytest.raises(UserError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message and message.endswith(".") and message.count(". ") == 0, message
    return message


def test_a_cache_written_for_another_model_is_refused(gpt2_dir: Path, other_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    cached_hf(gpt2_dir, path).loglikelihood(LL)
    message = refusal(lambda: cached_hf(other_dir, path))
    assert message.startswith(f"The response cache {path} was written for the model HFLM ")
    assert f"pretrained={gpt2_dir}" in message and f"not HFLM dtype=float32 pretrained={other_dir}" in message
    assert message.endswith(f"pass another --use_cache path for this model or delete {path}.")
    # what changes answers is part of the model; where and how fast it runs is not
    refusal(lambda: cached_hf(gpt2_dir, path, dtype="bfloat16"))
    refusal(lambda: cached_hf(gpt2_dir, path, max_length=32))
    again = cached_hf(gpt2_dir, path, batch_size=1, max_batch_size=8)
    again.lm = ModelMustNotRun()
    assert again.loglikelihood(LL)


def test_a_checkpoint_replaced_in_place_is_another_model(gpt2_dir: Path, other_dir: Path, tmp_path: Path) -> None:
    model, path = tmp_path / "model", tmp_path / "c.db"
    shutil.copytree(gpt2_dir, model)
    cached_hf(model, path).loglikelihood(LL)
    # copied again (new modification times, same bytes): the same model, its answers still served
    shutil.copytree(gpt2_dir, model, dirs_exist_ok=True)
    for file in model.iterdir():
        os.utime(file, (1, 1))
    same = cached_hf(model, path)
    same.lm = ModelMustNotRun()
    assert same.loglikelihood(LL)
    # retrained under the same path: refused, the message shows the two checkpoints
    shutil.copytree(other_dir, model, dirs_exist_ok=True)
    message = refusal(lambda: cached_hf(model, path))
    assert f"(pretrained checkpoint {fingerprint(model)[:8]})" in message


def test_large_weight_files_are_sampled_and_still_told_apart(tmp_path: Path) -> None:
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(bytes(range(256)) * (5 << 14))  # 5 MiB: over the whole-file limit
    data = bytearray(first.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = b"\xff" * 4096  # a retrained tensor in the middle
    second.write_bytes(bytes(data))
    assert fingerprint(first) != fingerprint(second)
    assert fingerprint(first) == fingerprint(first)


def test_secrets_and_placement_are_never_written_to_the_file(gpt2_dir: Path, tmp_path: Path) -> None:
    identity = identify(HFLM(**hf_args(gpt2_dir)), hf_args(gpt2_dir, token="hf_secret", max_memory_per_gpu="10GB"))
    assert set(identity.args) == {"pretrained", "dtype"}
    CachingLM(ModelMustNotRun(), tmp_path / "c.db", identity=identity)
    with sqlite3.connect(tmp_path / "c.db") as db:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    assert "hf_secret" not in json.dumps(meta) and meta["schema"] == "2"
    assert json.loads(meta["model"])["backend"] == "assay.runner.models.hf.HFLM"


# The names response caches were first written under; a class that moves must keep its name,
# or every existing cache of that backend would be refused as another model's.
FIRST_NAMES = {
    "hf": "assay.runner.models.hf.HFLM",
    "dummy": "assay.runner.models.dummy.DummyLM",
    "vllm": "assay.runner.models.vllm_engine.VLLMLM",
    "local-completions": "assay.runner.models.api_completions.CompletionsLM",
    "openai-completions": "assay.runner.models.api_completions.OpenAICompletionsLM",
    "local-chat-completions": "assay.runner.models.api_chat.ChatCompletionsLM",
    "openai-chat-completions": "assay.runner.models.api_chat.OpenAIChatCompletionsLM",
}


@pytest.mark.parametrize("name", sorted(FIRST_NAMES))
def test_built_in_backends_keep_the_name_their_caches_were_written_under(name: str) -> None:
    backend = get_model(name)
    assert identify(backend.__new__(backend), {}).backend == FIRST_NAMES[name]


class Explodes:
    """Unpickling this creates a file: proof that a reader ran code from the cache."""

    marker = ""

    def __reduce__(self) -> Any:
        return (Path.touch, (Path(self.marker),))


def test_an_old_pickled_cache_is_refused_unread(tmp_path: Path) -> None:
    path, marker = tmp_path / "old_rank0.db", tmp_path / "ran-code"
    Explodes.marker = str(marker)
    with sqlite3.connect(path) as db:  # what Assay wrote before: a pickled value per key
        db.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, value BLOB)")
        db.execute("INSERT INTO responses VALUES (?, ?)", ("k", pickle.dumps(Explodes())))
    message = refusal(lambda: CachingLM(ModelMustNotRun(), path))
    assert message == (
        f"The response cache {path} was written by an older Assay (pickled answers and no model identity) "
        f"and is not read, for safety; delete {path} and run again."
    )
    assert not marker.exists()
    with sqlite3.connect(path) as db:  # a format older than this Assay's
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema', '1')")
    assert "written by an older Assay (cache format 1, this one reads 2)" in refusal(
        lambda: CachingLM(ModelMustNotRun(), path)
    )
    (tmp_path / "text.db").write_text("not a database, just text " * 100)
    assert "is not an Assay response cache" in refusal(lambda: CachingLM(ModelMustNotRun(), tmp_path / "text.db"))


class Counting(EdgeFloats):
    """Answers from the request's text alone, and counts what it was asked."""

    def __init__(self) -> None:
        self.asked = 0

    def loglikelihood(self, requests: Sequence[Any], *, disable_tqdm: bool = False) -> list[LoglikelihoodResult]:
        self.asked += len(requests)
        return [LoglikelihoodResult(-len(r.context) / 3, True) for r in requests]


def test_a_value_that_is_not_json_is_computed_again_never_unpickled(tmp_path: Path) -> None:
    path, marker = tmp_path / "c.db", tmp_path / "ran-code"
    requests = [LoglikelihoodRequest(f"ctx {i}", " x") for i in range(3)]
    CachingLM(Counting(), path).loglikelihood(requests)
    Explodes.marker = str(marker)
    with sqlite3.connect(path) as db:  # someone with write access to the volume plants a pickle
        (key,) = db.execute("SELECT key FROM responses LIMIT 1").fetchone()
        db.execute("UPDATE responses SET value = ? WHERE key = ?", (pickle.dumps(Explodes()), key))
    lm = Counting()
    assert bits(CachingLM(lm, path).loglikelihood(requests)) == bits(Counting().loglikelihood(requests))
    assert lm.asked == 1 and not marker.exists()


def test_assay_run_refuses_model_b_on_model_a_cache(
    gpt2_dir: Path,
    other_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [{"q": f"{i}+{i}", "choices": [str(2 * i), str(2 * i + 1)], "label": i % 2} for i in range(4)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = copy_tasks("cli", tmp_path / "tasks", work=tmp_path)
    cache = tmp_path / "cache" / "answers"

    def run(model: Path) -> tuple[int, str]:
        code = cli.main(
            [
                "run",
                "--model",
                "hf",
                "--model_args",
                f"pretrained={model},dtype=float32,device=cpu",
                "--tasks",
                "tiny_mc",
                "--include_path",
                str(tasks),
                "--use_cache",
                str(cache),
            ]
        )
        return code, capsys.readouterr().err

    code, err = run(gpt2_dir)
    assert code == 0, err
    code, err = run(other_dir)
    assert code == 1 and "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("assay: error:")]
    assert line.startswith(f"assay: error: The response cache {cache}_rank0.db was written for the model HFLM ")
    assert str(gpt2_dir) in line and line.endswith(f"or delete {cache}_rank0.db.")
    assert run(gpt2_dir)[0] == 0  # model A's cache is intact and still its own
