"""`assay run --model hf` against `lm_eval --model hf`, end to end, on tiny local models.

The same task YAMLs and benchmark files as the pipeline parity tests, scored by real
transformers models (GPT-2 with the real GPT-2 tokenizer; a Llama-style model whose
tokenizer adds BOS and has a chat template). Metrics and stderrs must agree to 1e-6
relative, per-request log-likelihoods to 1e-5 (1e-6 relative past -10), generations exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.helpers import count_prompt_prefixes, write_parity_tasks
from tests.model_fixtures import gpt2_dir, llama_dir, long_models  # noqa: F401  (fixtures)

lm_eval = pytest.importorskip("lm_eval")
import lm_eval.tasks  # noqa: E402


@pytest.fixture(scope="module")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf_tasks")
    write_parity_tasks(root, shared_data, tmp_path_factory.mktemp("hf_work"))
    return root


def _run(task_dir: Path, model_dir: Path, tasks: list[str], batch_size: int, **kwargs: Any) -> tuple[dict, dict]:
    args = f"pretrained={model_dir},dtype=float32,device=cpu"
    ours = simple_evaluate(
        "hf", model_args=args, tasks=tasks, batch_size=batch_size, task_manager=TaskManager(str(task_dir)), **kwargs
    )
    theirs = lm_eval.simple_evaluate(
        model="hf",
        model_args=args,
        tasks=tasks,
        batch_size=batch_size,
        task_manager=lm_eval.tasks.TaskManager(include_path=str(task_dir), include_defaults=False),
        **kwargs,
    )
    return ours, theirs


def _number_close(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)
    return a == b


def _loglikelihood_close(got: float, want: float) -> bool:
    """1e-5 absolute, or 1e-6 relative for large sums: float32 has 24 bits, so one unit in the
    last place of a log-likelihood past -128 is already 1.5e-5 (padding and batch shapes
    change the order kernels add in, and which CPU runs them changes it again)."""
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-5)


def _assert_equal(ours: dict, theirs: dict) -> None:
    assert set(ours["results"]) == set(theirs["results"])
    for name, row in theirs["results"].items():
        for key, value in row.items():
            assert _number_close(ours["results"][name][key], value, 1e-6), (
                name,
                key,
                ours["results"][name][key],
                value,
            )
    for task, rows in theirs["samples"].items():
        for mine, ref in zip(ours["samples"][task], rows, strict=True):
            assert json.loads(json.dumps(mine["arguments"], default=str)) == json.loads(
                json.dumps(ref["arguments"], default=str)
            )
            if isinstance(ref["resps"][0][0], str):  # generations, before the filters
                assert mine["resps"] == ref["resps"], (task, mine["doc_id"])
            for got, want in zip(mine["filtered_resps"], ref["filtered_resps"], strict=True):
                if isinstance(want, str):
                    assert got == want
                elif isinstance(want, (tuple, list)) and want and isinstance(want[0], float):
                    assert _loglikelihood_close(got[0], want[0]) and bool(got[1]) == bool(want[1])
                elif isinstance(want, float):
                    assert _loglikelihood_close(got, want)
            for metric in ref["metrics"]:
                assert _number_close(
                    mine[metric] if not isinstance(mine[metric], (list, tuple)) else mine[metric][0],
                    ref[metric] if not isinstance(ref[metric], (list, tuple)) else ref[metric][0],
                    1e-6,
                )


@pytest.mark.parity
@pytest.mark.parametrize("batch_size", [1, 8])
def test_gpt2_all_output_types_and_group(task_dir: Path, gpt2_dir: Path, batch_size: int) -> None:
    ours, theirs = _run(
        task_dir,
        gpt2_dir,
        ["p_group", "p_gsm", "p_rolling"],
        batch_size,
        limit=6,
        bootstrap_iters=1000,
        gen_kwargs="max_gen_toks=12",
    )
    _assert_equal(ours, theirs)
    assert "p_group" in ours["groups"]


@pytest.mark.parity
def test_gpt2_five_shot(task_dir: Path, gpt2_dir: Path) -> None:
    ours, theirs = _run(task_dir, gpt2_dir, ["p_arc", "p_lambada"], 4, num_fewshot=5, limit=5, bootstrap_iters=500)
    _assert_equal(ours, theirs)


@pytest.mark.parity
def test_llama_bos_and_chat_template(task_dir: Path, llama_dir: Path) -> None:
    ours, theirs = _run(
        task_dir,
        llama_dir,
        ["p_arc", "p_gsm"],
        8,
        num_fewshot=2,
        limit=4,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        gen_kwargs="max_gen_toks=8",
    )
    _assert_equal(ours, theirs)
    for key in ("tokenizer_pad_token", "tokenizer_eos_token", "tokenizer_bos_token", "eot_token_id", "max_length"):
        assert ours[key] == theirs[key], key


@pytest.mark.parity
@pytest.mark.parametrize("model", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 3])
def test_generations_from_a_shared_fewshot_prefix_equal_lm_evals(
    task_dir: Path,
    long_models: dict[str, Path],
    model: str,
    batch_size: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every prompt of p_gsm_first starts with the same shots: Assay runs them once per run of batches."""
    from assay.runner.models.hf import prompt_prefix

    built = count_prompt_prefixes(monkeypatch)
    chat = dict(apply_chat_template=True, fewshot_as_multiturn=True) if model == "llama" else {}
    ours, theirs = _run(
        task_dir,
        long_models[model],
        ["p_gsm_first"],
        batch_size,
        limit=7,
        bootstrap_iters=100,
        gen_kwargs="max_gen_toks=10",
        **chat,
    )
    _assert_equal(ours, theirs)
    # one prefix (the shots, at least) serves all 7 prompts; a second only if a batch's rows share more
    assert built and min(built) >= prompt_prefix.MIN_SHARED_TOKENS and len(built) <= 2, built


@pytest.mark.parity
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_multiple_choice_from_a_shared_fewshot_prefix_equals_lm_evals(
    task_dir: Path,
    long_models: dict[str, Path],
    model: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """p_arc_first's contexts share their shots (p_arc's do not): the shots run once for all its documents."""
    from assay.runner.models.hf import document_passes, shared_context

    prefixes: list[int] = []
    real = shared_context.SharedContextScorer._after_prefix

    def counting(self: Any, ctx: list[int], prefix: list[int]) -> Any:
        before = self._prefix
        out = real(self, ctx, prefix)
        if self._prefix is not before:
            prefixes.append(len(prefix))
        return out

    monkeypatch.setattr(shared_context.SharedContextScorer, "_after_prefix", counting)
    ours, theirs = _run(
        task_dir, long_models[model], ["p_arc", "p_arc_first"], 4, num_fewshot=3, limit=7, bootstrap_iters=100
    )
    _assert_equal(ours, theirs)
    assert len(prefixes) == 1 and prefixes[0] >= document_passes.MIN_SHARED_PREFIX, prefixes
