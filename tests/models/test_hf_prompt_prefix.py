"""generate_until from a shared prompt prefix: run once, gives lm-eval's generations exactly.

Expected generations come from lm-eval's HFLM on the same model and requests (never
hard-coded). The models have 1,024 positions so that few-shot-sized prompts fit untruncated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from assay.runner.models.hf import prompt_prefix
from assay.runner.models.hf.model import HFLM
from assay.runner.models.hf.prompt_prefix import common_prefix, kwargs_allow_prefix, starts_all
from assay.runner.models.instance import GenerationRequest
from model_fixtures import long_models, t5_dir  # noqa: F401  (fixtures)
from tests.helpers import count_prompt_prefixes
from tests.models.hf_parity import gen_both, lm_eval_hf

pytestmark = pytest.mark.parity

SHOTS = "".join(f"Question: what is {a} plus {a}?\nAnswer: {a} plus {a} is {2 * a}.\n\n" for a in range(1, 9))
QUESTIONS = ["what is ten plus ten?", "why is the sky blue?", "name a prime", "what comes after Monday?", "2+2?"]


def _pair(path: Path, batch_size: int) -> tuple[HFLM, Any]:
    args = dict(pretrained=str(path), device="cpu", batch_size=batch_size)
    return HFLM(**args), lm_eval_hf().HFLM(**args)


def test_common_prefix_leaves_each_row_a_token_of_its_own() -> None:
    assert common_prefix([[1, 2, 3, 4], [1, 2, 3, 5, 6]]) == [1, 2, 3]
    assert common_prefix([[1, 2, 3], [1, 2, 3, 4]]) == [1, 2]  # the shorter row keeps its last token
    assert common_prefix([[7, 1], [8, 1]]) == []
    assert common_prefix([]) == []
    assert starts_all([1, 2], [[1, 2, 3], [1, 2, 9]]) and not starts_all([1, 2], [[1, 2]])
    assert not starts_all([1, 2], [[1, 2, 3], [2, 1, 3]])


def test_only_kwargs_that_keep_one_row_per_prompt_allow_a_prefix(t5_dir: Path) -> None:
    assert kwargs_allow_prefix({"do_sample": False}) and kwargs_allow_prefix({"do_sample": True, "temperature": 0.7})
    assert not kwargs_allow_prefix({"num_beams": 4}) and not kwargs_allow_prefix({"cache_implementation": "static"})
    t5 = HFLM(pretrained=str(t5_dir), device="cpu")
    assert str(t5.generator.prefix_blocker).startswith("encoder-decoder")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 2, 8])
def test_shared_prefix_runs_once_and_generations_equal_lm_evals(
    long_models: dict[str, Path], kind: str, batch_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_prompt_prefixes(monkeypatch)
    ours, theirs = _pair(long_models[kind], batch_size)
    reqs = [(SHOTS + f"Question: {q}\nAnswer:", {"until": ["Question:"], "max_gen_toks": 12}) for q in QUESTIONS]
    shapes: list[tuple[int, ...]] = []
    hook = ours.model.register_forward_pre_hook(
        lambda _m, args, kwargs: shapes.append(tuple((args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True,
    )
    try:
        mine, ref = gen_both(ours, theirs, reqs)
    finally:
        hook.remove()
    assert mine == ref
    shots = len(ours.tokenizer(SHOTS)["input_ids"])
    assert len(built) == 1 and built[0] >= shots - 1, (built, shots)  # the shots (and "Question:"), once
    assert sum(1 for shape in shapes if shape[-1] >= shots) == 1  # no other pass reads the shots again


def test_without_a_static_cache_the_repeated_dynamic_one_gives_the_same(
    long_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prompt_prefix, "static_cache_kwargs", lambda model, max_length: {})
    built = count_prompt_prefixes(monkeypatch)
    ours, theirs = _pair(long_models["llama"], 4)
    reqs = [(SHOTS + f"Question: {q}\nAnswer:", {"until": [], "max_gen_toks": 8}) for q in QUESTIONS]
    mine, ref = gen_both(ours, theirs, reqs)
    assert mine == ref and len(built) == 1


def test_left_truncated_prompts_and_sampling_kwargs_take_the_plain_path(
    long_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_prompt_prefixes(monkeypatch)
    ours, theirs = _pair(long_models["gpt2"], 4)
    long_shots = SHOTS * 12  # past 1,024 tokens: each row keeps its last tokens, not the shots
    reqs = [(long_shots + f"Question: {q}\nAnswer:", {"until": [], "max_gen_toks": 6}) for q in QUESTIONS[:3]]
    mine, ref = gen_both(ours, theirs, reqs)
    assert mine == ref and built == []
    beams = [
        (SHOTS + f"Question: {q}\nAnswer:", {"until": [], "max_gen_toks": 4, "num_beams": 2}) for q in QUESTIONS[:2]
    ]
    torch.manual_seed(0)
    mine, ref = gen_both(ours, theirs, beams)
    assert mine == ref and built == []


def test_a_static_cache_never_switches_on_transformers_auto_compile(
    long_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA, transformers compiles the forward when it sees a static cache, unless told not to.

    Sampling, so that the batches go through generate (greedy decoding runs the refilling batch,
    which calls the model's forward itself)."""
    import transformers

    ours = HFLM(pretrained=str(long_models["gpt2"]), device="cpu", batch_size=2)
    calls: list[dict[str, Any]] = []
    real_generate = ours.model.generate

    def spying_generate(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real_generate(*args, **kwargs)

    monkeypatch.setattr(ours.model, "generate", spying_generate)
    sampled = {"until": [], "max_gen_toks": 3, "do_sample": True, "temperature": 0.7}
    shared = [GenerationRequest(SHOTS + f"Question: {q}\nAnswer:", sampled) for q in QUESTIONS[:2]]
    plain = [GenerationRequest(f"Question: {q}\nAnswer:", sampled) for q in QUESTIONS[2:4]]
    ours.generate_until(shared + plain, disable_tqdm=True)
    static = [c for c in calls if any(isinstance(v, transformers.StaticCache) for v in c.values())]
    assert len(static) == len(calls) == 2  # the shared-prefix batch and the plain one
    assert all(c.get("disable_compile") is True for c in static)
