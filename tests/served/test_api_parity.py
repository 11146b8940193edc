"""Assay's API backends against lm-eval's, both talking to the same real vLLM server.

The server (tests/served/conftest.py) serves the tiny GPT-2 from tests/model_fixtures on
loopback. The same task YAMLs run through lm-eval's `local-completions` /
`local-chat-completions` and through Assay's: metrics agree within 1e-5 relative,
per-request log-likelihoods within 1e-5, greedy generations exactly.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.helpers import write_parity_tasks
from tests.model_fixtures import N_POSITIONS
from tests.served.vllm_server import VLLMServer

lm_eval = pytest.importorskip("lm_eval")
import lm_eval.tasks  # noqa: E402

pytestmark = [pytest.mark.parity, pytest.mark.slow]


@pytest.fixture(scope="module")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api_tasks")
    write_parity_tasks(root, shared_data, tmp_path_factory.mktemp("api_work"))
    # a chat route cannot truncate: a generation task whose prompts fit the 64 positions
    (root / "short_gen.yaml").write_text(SHORT_GEN.replace("@DATA@", str(shared_data)), encoding="utf-8")
    return root


SHORT_GEN = """task: s_short_gen
dataset_path: json
dataset_kwargs: {data_files: {"test": "@DATA@/lambada/lambada_test.jsonl"}}
test_split: test
output_type: generate_until
doc_to_text: "{{text.split(' ')[:10] | join(' ')}}"
doc_to_target: "{{text.split(' ')[10]}}"
generation_kwargs: {until: ["\\n\\n", "."], do_sample: false}
metric_list:
  - {metric: exact_match, aggregation: mean, higher_is_better: true}
"""


def _args(server: VLLMServer, route: str, **extra: Any) -> str:
    d = server.model_dir
    base = f"model={d},base_url={server.base}/v1/{route},max_length={N_POSITIONS},max_retries=2"
    return ",".join([base, *(f"{k}={v}" for k, v in extra.items())])


def _both(
    task_dir: Path, model: str, model_args: str, ref_args: str, tasks: list[str], **kwargs: Any
) -> tuple[dict, dict, float]:
    start = time.perf_counter()
    ours = simple_evaluate(model, model_args=model_args, tasks=tasks, task_manager=TaskManager(str(task_dir)), **kwargs)
    elapsed = time.perf_counter() - start
    # no false alarm on a real server: its sentinels all pass (the served checks among them)
    assert ours["sentinels"]["trusted"] is True and "served" in ours["sentinels"], ours["sentinels"]
    theirs = lm_eval.simple_evaluate(
        model=model,
        model_args=ref_args,
        tasks=tasks,
        task_manager=lm_eval.tasks.TaskManager(include_path=str(task_dir), include_defaults=False),
        **kwargs,
    )
    return ours, theirs, elapsed


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9)
    return bool(a == b)


def _assert_equal(ours: dict, theirs: dict) -> int:
    """Same metrics and per-request answers; returns how many answers were compared."""
    assert set(ours["results"]) == set(theirs["results"])
    for name, row in theirs["results"].items():
        for key, value in row.items():
            assert _close(ours["results"][name][key], value), (name, key, ours["results"][name][key], value)
    compared = 0
    for task, rows in theirs["samples"].items():
        assert len(ours["samples"][task]) == len(rows)
        for mine, ref in zip(ours["samples"][task], rows, strict=True):
            for got, want in zip(mine["resps"], ref["resps"], strict=True):
                got, want = got[0], want[0]
                if isinstance(want, str):
                    assert got == want, (task, mine["doc_id"])
                elif isinstance(want, (tuple, list)):
                    assert math.isclose(got[0], want[0], rel_tol=1e-5, abs_tol=1e-5) and bool(got[1]) == bool(want[1])
                else:
                    assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-5)
                compared += 1
    return compared


def test_local_completions_all_output_types(task_dir: Path, vllm_server: VLLMServer) -> None:
    args = _args(
        vllm_server, "completions", tokenizer_backend="huggingface", tokenizer=vllm_server.model_dir, num_concurrent=1
    )
    ours, theirs, elapsed = _both(
        task_dir,
        "local-completions",
        args,
        args,
        ["p_group", "p_gsm", "p_rolling"],
        limit=6,
        bootstrap_iters=1000,
        log_samples=True,
        gen_kwargs="max_gen_toks=12",
    )
    compared = _assert_equal(ours, theirs)
    assert compared > 30
    rolling = [s["resps"][0][0] for s in ours["samples"]["p_rolling"]]
    assert rolling and all(math.isfinite(v) and v < 0 for v in rolling)
    print(f"local-completions num_concurrent=1: {compared} answers in {elapsed:.2f} s")


def test_local_completions_concurrent_batched(task_dir: Path, vllm_server: VLLMServer) -> None:
    """num_concurrent=4 and batch_size=3 (several prompts per POST) give the serial answers."""
    serial = _args(vllm_server, "completions", tokenizer_backend="huggingface", num_concurrent=1)
    pooled = _args(vllm_server, "completions", tokenizer_backend="huggingface", num_concurrent=4, batch_size=3)
    ours, theirs, elapsed = _both(
        task_dir,
        "local-completions",
        pooled,
        serial,
        ["p_arc", "p_gsm"],
        limit=8,
        bootstrap_iters=100,
        log_samples=True,
        gen_kwargs="max_gen_toks=8",
    )
    compared = _assert_equal(ours, theirs)
    print(f"local-completions num_concurrent=4 batch_size=3: {compared} answers in {elapsed:.2f} s")


def test_local_chat_completions_generation(task_dir: Path, vllm_server: VLLMServer) -> None:
    args = _args(vllm_server, "chat/completions", num_concurrent=2)
    ours, theirs, _ = _both(
        task_dir,
        "local-chat-completions",
        args,
        args,
        ["s_short_gen"],
        limit=6,
        bootstrap_iters=100,
        log_samples=True,
        apply_chat_template=True,
        gen_kwargs="max_gen_toks=10",
    )
    assert _assert_equal(ours, theirs) == 6
    # the server applied its chat template to our messages: the generations are not empty
    assert any(s["resps"][0][0].strip() for s in ours["samples"]["s_short_gen"])
