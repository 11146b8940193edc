"""Which image a runner Job runs when its Evaluation names none.

Two images serve runners (deploy/images): `assay-runner` (the `hf` backend and the API
backends) and `assay-runner-vllm` (the same plus vLLM's engine, several GB more), so only
Evaluations with `spec.model: vllm` pull the larger one. The chart sets both through the
operator's environment; `spec.image` overrides either (within the admin's allowed prefixes).
"""

from __future__ import annotations

import os
from typing import Mapping

DEFAULT_IMAGE = "ghcr.io/assay-dev/assay-runner:0.1.0"
DEFAULT_VLLM_IMAGE = "ghcr.io/assay-dev/assay-runner-vllm:0.1.0"
IMAGE_ENV = "ASSAY_RUNNER_IMAGE"
"""The operator's environment variable naming the default runner image."""
VLLM_IMAGE_ENV = "ASSAY_RUNNER_VLLM_IMAGE"
"""The operator's environment variable naming the runner image for `spec.model: vllm`."""
VLLM_MODEL = "vllm"


def runner_image(model: str, configured: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The default image for a runner of `model`; `configured` is the operator's --runner-image."""
    env = os.environ if env is None else env
    if model == VLLM_MODEL:
        return env.get(VLLM_IMAGE_ENV) or DEFAULT_VLLM_IMAGE
    return configured or env.get(IMAGE_ENV) or DEFAULT_IMAGE
