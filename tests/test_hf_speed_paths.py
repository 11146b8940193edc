"""The hf backend's faster paths run where they should, fall back where they must, and
give lm-eval's numbers (expected values from lm-eval's HFLM on the same model, never
hard-coded).

- shared contexts: one pass over a multiple-choice context, its choices on its KV cache;
- rolling: the model body once, the LM head and log-softmax in chunks of positions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from assay.runner.models.hf import rolling
from assay.runner.models.hf.model import HFLM
from assay.runner.models.hf.shared_context import sharing_blocker
from assay.runner.models.instance import RollingRequest
from model_fixtures import gpt2_dir, llama_dir, t5_dir  # noqa: F401  (fixtures)
from test_hf_backend import assert_ll_equal, ll_both, model_dirs, pair  # noqa: F401  (fixture)

pytestmark = pytest.mark.parity

# ARC-like: one few-shot context, four multi-token choices, twice (two documents)
MC_REQUESTS = [
    (ctx, choice)
    for ctx in ("Q: Which is a planet?\nA: Mars\n\nQ: Which one is a metal?\nA:", "Q: What do plants need?\nA:")
    for choice in (" iron bar", " a wooden stick", " water and light", " glass")
]


def _count_forwards(model: torch.nn.Module) -> tuple[list[tuple[int, ...]], Any]:
    shapes: list[tuple[int, ...]] = []
    handle = model.register_forward_pre_hook(
        lambda _m, args, kwargs: shapes.append(tuple((args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True,
    )
    return shapes, handle


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("batch_size", [1, 8])
def test_shared_context_one_pass_per_document(model_dirs: dict[str, Path], kind: str, batch_size: int) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=batch_size)
    assert ours.speed_info() == {"shared_context": "on", "shared_prompt_prefix": "on"}
    shapes, handle = _count_forwards(ours.model)
    try:
        mine, ref = ll_both(ours, theirs, MC_REQUESTS)
    finally:
        handle.remove()
    assert_ll_equal(mine, ref)
    # per document: the context once ([1, context tokens]), then the four choices' tails together
    assert len(shapes) == 4
    assert [s[0] for s in shapes] == [1, 4, 1, 4]


def test_shared_context_off_for_seq2seq_and_without_logits_cache(model_dirs: dict[str, Path]) -> None:
    t5, _ = pair(model_dirs, "t5", batch_size=8)
    assert t5.speed_info()["shared_context"].startswith("off: encoder-decoder")
    assert t5.speed_info()["shared_prompt_prefix"].startswith("off: encoder-decoder")
    no_cache, theirs = pair(model_dirs, "gpt2", batch_size=8, logits_cache=False)
    assert no_cache.speed_info()["shared_context"] == "off: logits_cache=False"
    assert_ll_equal(*ll_both(no_cache, theirs, MC_REQUESTS))


def test_sliding_window_model_keeps_full_passes() -> None:
    config = transformers.MistralConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=8,
        max_position_embeddings=64,
    )
    assert (
        sharing_blocker(transformers.MistralForCausalLM(config), backend="causal")
        == "sliding-window or chunked attention"
    )
    config.sliding_window = None
    assert sharing_blocker(transformers.MistralForCausalLM(config), backend="causal") is None


def test_results_config_reports_shared_context(gpt2_dir: Path, tmp_path: Path) -> None:
    from assay.runner.evaluator import run_config
    from assay.run_options import EvalOptions

    lm = HFLM(pretrained=str(gpt2_dir), device="cpu")
    config = run_config(EvalOptions(model="hf", tasks=["x"]), lm)
    assert config["shared_context"] == "on" and config["shared_prompt_prefix"] == "on"


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_rolling_uses_chunked_head_and_matches(
    model_dirs: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = pair(model_dirs, kind, batch_size=4)
    assert ours._rolling_scorer() is not None
    monkeypatch.setattr(rolling, "CHUNK", 7)  # several head chunks per window
    texts = ["A document long enough for three windows of the tiny model. " * 9, "short", "Two windows here. " * 8]
    mine = ours.loglikelihood_rolling([RollingRequest(t) for t in texts], disable_tqdm=True)
    ref = theirs.loglikelihood_rolling(
        [
            pytest.importorskip("lm_eval.api.instance").Instance("loglikelihood_rolling", {}, (t,), i)
            for i, t in enumerate(texts)
        ],
        disable_tqdm=True,
    )
    for m, r in zip(mine, ref, strict=True):
        assert math.isclose(m, r, abs_tol=1e-4, rel_tol=1e-7), (m, r)


def test_rolling_falls_back_when_head_is_not_the_model() -> None:
    """Gemma 2 soft-caps its logits after the head: the body → head split is refused."""
    config = transformers.Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=0.5,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    assert rolling.split_model(transformers.Gemma2ForCausalLM(config).eval(), torch.device("cpu")) is None
    config.final_logit_softcapping = None
    assert rolling.split_model(transformers.Gemma2ForCausalLM(config).eval(), torch.device("cpu")) is not None


def test_by_prefix_puts_documents_with_one_prefix_together_and_cuts_it_before_their_own_tokens() -> None:
    from assay.runner.models.hf.shared_context import MIN_SHARED_PREFIX, by_prefix

    shots, other = list(range(100, 100 + MIN_SHARED_PREFIX + 4)), list(range(500, 500 + MIN_SHARED_PREFIX + 4))
    pairs = [
        (shots + [1, 2], [9]),
        (other + [3], [9]),
        (shots + [1, 3], [9]),
        (other + [4], [9]),
        (shots[: MIN_SHARED_PREFIX - 1] + [7], [9]),  # shares too little with the others
    ]
    planned = by_prefix([[0], [1], [2], [3], [4]], pairs)
    prefix_of = {group[0]: prefix for group, prefix in planned}
    assert prefix_of[0] == prefix_of[2] == shots + [1]  # all that the two share
    assert prefix_of[1] == prefix_of[3] == other
    assert prefix_of[4] == []
    order = [group[0] for group, _ in planned]
    assert abs(order.index(0) - order.index(2)) == 1 and abs(order.index(1) - order.index(3)) == 1
    # a context that is all prefix keeps its last token to score from
    assert dict((g[0], p) for g, p in by_prefix([[0], [1]], [(shots, [9]), (shots + [5], [9])]))[0] == shots[:-1]
