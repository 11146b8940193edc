"""Which image a runner Job runs when its Evaluation names none.

Two images serve runners (deploy/images): `assay-runner` (the `hf` backend and the API
backends) and `assay-runner-vllm` (the same plus vLLM's engine, several GB more), so only
Evaluations with `spec.model: vllm` pull the larger one. The chart sets both through the
operator's environment (`runner_settings.IMAGE_ENV`, `VLLM_IMAGE_ENV`), read at start into
`RunnerSettings`; `spec.image` overrides either (within the admin's allowed prefixes).
"""

from __future__ import annotations

from assay.operator.build.runner_settings import RunnerSettings

DEFAULT_IMAGE = "ghcr.io/assay-dev/assay-runner:0.1.0"
DEFAULT_VLLM_IMAGE = "ghcr.io/assay-dev/assay-runner-vllm:0.1.0"
VLLM_MODEL = "vllm"


def runner_image(model: str, runner: RunnerSettings) -> str:
    """The default image for a runner of `model`, as the operator's settings name it."""
    if model == VLLM_MODEL:
        return runner.vllm_image or DEFAULT_VLLM_IMAGE
    return runner.default_image or DEFAULT_IMAGE
