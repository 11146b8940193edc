"""GPT-2's GELU in two temporaries (`lean_gelu.py`): transformers' values bit for bit, put in
place only where Assay loaded a float32 model onto the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from transformers.activations import NewGELUActivation

from assay.runner.models.hf import lean_gelu
from assay.runner.models.hf.lean_gelu import LeanNewGELU
from assay.runner.models.hf.model import HFLM
from model_fixtures import gpt2_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.model


def spread(*shape: int) -> torch.Tensor:
    """Values from 1e-5 to ~50 in size, either sign, and the special ones."""
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(*shape, generator=generator) * torch.logspace(-5, 1.7, shape[-1])
    values.view(-1)[:6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30])
    return values


def assert_bitwise(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


def test_lean_gelu_gives_transformers_values_bit_for_bit() -> None:
    x = spread(4, 256, 1024)
    with torch.no_grad():
        expected = NewGELUActivation()(x)
        before = x.clone()
        assert_bitwise(LeanNewGELU()(x), expected)
    assert_bitwise(x, before)  # the input is left as it was


def test_with_autograd_it_computes_as_transformers_and_differentiates() -> None:
    x = spread(3, 64)[:, 6:].clone().requires_grad_(True)
    y = x.detach().clone().requires_grad_(True)
    LeanNewGELU()(x).sum().backward()
    NewGELUActivation()(y).sum().backward()
    assert x.grad is not None and y.grad is not None
    assert_bitwise(x.grad, y.grad)


def tiny_gpt2(dtype: torch.dtype = torch.float32) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=32, n_layer=3, n_head=2)
    return transformers.GPT2LMHeadModel(config).to(dtype).eval()


def test_each_gpt2_block_gets_the_lean_gelu_and_the_logits_stay_the_same() -> None:
    model = tiny_gpt2()
    ids = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(ids).logits
        assert lean_gelu.lighten(model) == 3
        assert all(isinstance(block.mlp.act, LeanNewGELU) for block in model.transformer.h)
        assert_bitwise(model(ids).logits, before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_precisions_keep_transformers_module(dtype: torch.dtype) -> None:
    model = tiny_gpt2(dtype)
    assert lean_gelu.lighten(model) == 0
    assert all(type(block.mlp.act) is NewGELUActivation for block in model.transformer.h)


def test_hflm_lightens_a_model_it_loads_but_not_under_mixed_precision_or_one_handed_in(gpt2_dir: Path) -> None:
    loaded = HFLM(pretrained=str(gpt2_dir), device="cpu")
    assert any(isinstance(m, LeanNewGELU) for m in loaded.model.modules())
    mixed = HFLM(pretrained=str(gpt2_dir), device="cpu", mixed_precision_dtype="bfloat16")
    assert not any(isinstance(m, LeanNewGELU) for m in mixed.model.modules())  # autocast changes the dtypes
    given = transformers.AutoModelForCausalLM.from_pretrained(str(gpt2_dir))
    HFLM(pretrained=given, tokenizer=str(gpt2_dir), device="cpu")
    assert not any(isinstance(m, LeanNewGELU) for m in given.modules())


def test_a_lean_module_that_differs_on_the_probe_is_not_put_in(monkeypatch: pytest.MonkeyPatch) -> None:
    def approximate(_self: LeanNewGELU, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate="tanh")  # the same curve, other last bits

    monkeypatch.setattr(LeanNewGELU, "forward", approximate)
    model = tiny_gpt2()
    assert lean_gelu.lighten(model) == 0
    assert all(type(block.mlp.act) is NewGELUActivation for block in model.transformer.h)
