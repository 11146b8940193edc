"""Choosing few-shot examples, with lm-eval's random-number semantics.

`default` draws `rng.sample(pool, n)` (n+1 when the eval doc may be in the pool, then drops
copies of it); `first_n` takes the pool's head. One generator per task, seeded with the
few-shot seed and consumed in document order: Assay always builds every document's prompt
in that order on every rank, so prompts never depend on rank or world size (lm-eval #1751).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from assay.errors import UserError


class DefaultSampler:
    def __init__(
        self, pool: Sequence[dict[str, Any]], *, seed: int | None = None, fewshot_indices: list[int] | None = None
    ) -> None:
        docs = list(pool)
        self.pool = [docs[i] for i in fewshot_indices] if fewshot_indices else docs
        self.rng = random.Random(seed)

    def reseed(self, seed: int | None) -> None:
        self.rng = random.Random(seed)

    def sample(self, n: int, eval_doc: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        if n <= 0:
            return []
        if not self.pool:
            raise UserError(
                "The task asks for few-shot examples but its few-shot split is empty; set num_fewshot 0 or a fewshot_split."
            )
        if eval_doc is None:
            return self.rng.sample(self.pool, n)
        drawn = [doc for doc in self.rng.sample(self.pool, n + 1) if doc != eval_doc][:n]
        if len(drawn) < n:
            # Several copies of the eval doc were drawn: redraw from a pool without it.
            drawn = self.rng.sample([doc for doc in self.pool if doc != eval_doc], n)
        return drawn


class FirstNSampler(DefaultSampler):
    def sample(self, n: int, eval_doc: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        pool = [doc for doc in self.pool if doc != eval_doc] if eval_doc is not None else self.pool
        if n > len(pool):
            raise UserError(f"num_fewshot {n} is more than the {len(pool)} few-shot examples available.")
        return list(pool[:n])


SAMPLERS: dict[str, type[DefaultSampler]] = {"default": DefaultSampler, "first_n": FirstNSampler}


def make_sampler(
    kind: Any, pool: Sequence[dict[str, Any]], *, seed: int | None, fewshot_indices: list[int] | None
) -> DefaultSampler:
    if isinstance(kind, type) and issubclass(kind, DefaultSampler):
        cls = kind
    elif kind in SAMPLERS:
        cls = SAMPLERS[kind]
    else:
        raise UserError(f"Unknown few-shot sampler {kind!r}; use one of {', '.join(SAMPLERS)}.")
    return cls(pool, seed=seed, fewshot_indices=fewshot_indices)
