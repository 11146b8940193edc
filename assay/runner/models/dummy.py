"""lm-eval's `dummy` model: random answers, for smoke-testing a task without a model.

Seeded from the request text so that a rerun (and every rank) gives the same numbers.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any

from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM


def _rng(*parts: str) -> random.Random:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class DummyLM(LM):
    def __init__(self, **_: Any) -> None:
        pass

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        results = []
        for req in requests:
            rng = _rng("ll", req.context, req.continuation)
            results.append(LoglikelihoodResult(-rng.random() * 10.0, rng.random() > 0.5))
        return results

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        return [-_rng("rolling", req.text).random() * len(req.text) for req in requests]

    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]:
        return ["lol" for _ in requests]
