"""What every runner pod gets from the operator's settings rather than from its spec, as one record.

The chart sets these in the operator's environment; `assay.operator.settings` reads that
environment once, at start, and passes this record down to the builders (`children`,
`builders.job`, `containers`). build/ itself reads no environment (tests/operator/
test_operator_settings.py checks), so a Job built twice from the same spec and settings
is the same Job. None of these is part of the spec: they change no spec hash, and a new
default never replaces a running Job.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from assay.errors import UserError
from assay.operator.admission.policy import AdminPolicy

Manifest = dict[str, Any]

IMAGE_ENV = "ASSAY_RUNNER_IMAGE"
"""The default runner image (the chart's runner.image; --runner-image wins)."""
VLLM_IMAGE_ENV = "ASSAY_RUNNER_VLLM_IMAGE"
"""The runner image for `spec.model: vllm`."""
GPU_RESOURCE_ENV = "ASSAY_GPU_RESOURCE"
"""The extended resource a GPU is requested as (the chart's runner.gpuResourceName)."""
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_MEMORY_ENV = "ASSAY_RUNNER_DEFAULT_MEMORY"
"""The memory limit of runner containers that nothing else gave one; unset: 16Gi; `none`: no default limit."""
BUILT_IN_DEFAULT_MEMORY = "16Gi"
PULL_SECRETS_ENV = "ASSAY_RUNNER_IMAGE_PULL_SECRETS"
"""Comma-separated Secrets the runner's ServiceAccount pulls images with (each namespace needs its own copy)."""
RUNNER_EGRESS_ENV = "ASSAY_RUNNER_EGRESS"
"""A JSON list of NetworkPolicy egress rules for runner pods (the chart's `assay.runnerEgress`);
unset: the run's policy leaves egress alone."""

QUANTITY = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


@dataclasses.dataclass(frozen=True)
class RunnerSettings:
    """The admin's defaults for runner pods; `RunnerSettings()` is an operator with none set."""

    default_image: str | None = None
    """The image of a spec that names none (--runner-image, else $ASSAY_RUNNER_IMAGE); None: `runner_images`'."""
    vllm_image: str | None = None
    """The image of a `spec.model: vllm` spec that names none; None: `runner_images`' vLLM image."""
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    default_memory: str | None = BUILT_IN_DEFAULT_MEMORY
    """The memory limit of a container nothing else limits; None: no default limit."""
    pull_secrets: tuple[str, ...] = ()
    egress: tuple[Manifest, ...] | None = None
    """The runners' NetworkPolicy egress rules; None: the run's policy leaves egress alone."""
    policy: AdminPolicy = AdminPolicy()
    """The admin's policy (ASSAY_POLICY): its placement fills in the pod, its task-code rule reaches the runner."""


def from_env(env: Mapping[str, str], *, policy: AdminPolicy, default_image: str | None = None) -> RunnerSettings:
    """The record `env` (the operator's environment, read once by `assay.operator.settings`) asks
    for; `default_image` is --runner-image. A bad value is named in one sentence."""
    return RunnerSettings(
        default_image=default_image or env.get(IMAGE_ENV) or None,
        vllm_image=env.get(VLLM_IMAGE_ENV) or None,
        gpu_resource=env.get(GPU_RESOURCE_ENV) or DEFAULT_GPU_RESOURCE,
        default_memory=parse_default_memory(env.get(DEFAULT_MEMORY_ENV, "")),
        pull_secrets=tuple(name.strip() for name in env.get(PULL_SECRETS_ENV, "").split(",") if name.strip()),
        egress=parse_egress(env.get(RUNNER_EGRESS_ENV, "")),
        policy=policy,
    )


def parse_default_memory(raw: str) -> str | None:
    """ASSAY_RUNNER_DEFAULT_MEMORY (unset: 16Gi; `none`: no default limit); a bad one is named."""
    raw = raw.strip()
    if not raw:
        return BUILT_IN_DEFAULT_MEMORY
    if raw.lower() == "none":
        return None
    if not QUANTITY.fullmatch(raw) or quantity_bytes(raw) == 0:
        raise UserError(
            f"{DEFAULT_MEMORY_ENV}={raw!r} is no memory quantity; give one such as 16Gi, or none for no default limit."
        )
    return raw


def quantity_bytes(quantity: str) -> float:
    match = QUANTITY.fullmatch(quantity)
    assert match is not None
    return float(match["number"]) * _UNITS[match["unit"] or ""]


def parse_egress(raw: str) -> tuple[Manifest, ...] | None:
    """ASSAY_RUNNER_EGRESS: the admin's egress rules for runner pods, or None; a value that is no list of rules is named."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        rules = json.loads(raw)
    except json.JSONDecodeError:
        rules = None
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        raise UserError(f"{RUNNER_EGRESS_ENV} is no JSON list of NetworkPolicy egress rules; unset it or give one.")
    return tuple(rules)
