"""GPT-2's tanh-approximate GELU ("gelu_new") with its own arithmetic in two temporaries.

transformers' `NewGELUActivation` computes 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) as eight
tensor operations, each writing a fresh [tokens, 4·hidden] tensor. For a batch of eight
1,024-token windows of a 256-wide GPT-2 each is 33 MB, above glibc's 32 MB mmap threshold,
so each is a new mapping whose pages fault in as they are written: on the CPU the activation
took a third of the model body's time (measured). Here the same operations run in the same
order on the same float32 values, in place on two tensors, so each value is the module's own
bit for bit: only operands of a product or sum change sides (x·0.5 for 0.5·x), and IEEE
addition and multiplication are commutative. A probe at load checks that, and a module whose
output differs stays as it was.

Only where Assay loaded the model itself (a model object handed in is the caller's), on the
CPU in float32 without mixed precision; with autograd on, the module computes as transformers'
does (in-place operations would break a backward pass).
"""

from __future__ import annotations

import math
from typing import Any

import torch

_TANH_SCALE = math.sqrt(2.0 / math.pi)  # the constant transformers' module uses


class LeanNewGELU(torch.nn.Module):
    """`NewGELUActivation`'s values, two temporaries instead of eight."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            return 0.5 * x * (1.0 + torch.tanh(_TANH_SCALE * (x + 0.044715 * torch.pow(x, 3.0))))
        inner = torch.pow(x, 3.0)
        inner.mul_(0.044715).add_(x).mul_(_TANH_SCALE).tanh_().add_(1.0)
        return (x * 0.5).mul_(inner)


def lighten(model: Any) -> int:
    """Put `LeanNewGELU` in place of each `NewGELUActivation` of `model` that it matches on a
    probe; returns how many it replaced."""
    from transformers.activations import NewGELUActivation

    if not isinstance(model, torch.nn.Module):
        return 0
    if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in model.parameters()):
        return 0
    lean = LeanNewGELU()
    if not _same_values(NewGELUActivation(), lean):
        return 0
    replaced = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is NewGELUActivation:
                setattr(parent, name, lean)
                replaced += 1
    return replaced


def _same_values(original: torch.nn.Module, lean: torch.nn.Module) -> bool:
    """Whether the two give the same float32 values, bit for bit, over a wide spread of inputs
    (where tanh saturates, near zero, and between)."""
    generator = torch.Generator().manual_seed(0)
    probe = torch.randn(64, 1024, generator=generator) * torch.logspace(-4, 1.5, 1024)
    with torch.no_grad():
        expected = original(probe)
        return bool(torch.equal(lean(probe.clone()), expected))
