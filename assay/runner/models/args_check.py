"""A model's arguments checked as its backend checks them, with nothing loaded.

Each built-in backend parses its model_args into a typed record before it loads anything
(`hf.args`, `vllm.args`, `api.args`); those modules import no torch, transformers or vLLM,
so `assay validate` and the runner's `--check` can hold model_args to the same rules a run
does. A model registered by other code is left to its own constructor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.errors import UserError
from assay.spec import API_MODELS


def check_model_args(model: str, model_args: Mapping[str, Any]) -> None:
    """UserError naming the first model_arg the backend of `model` would refuse."""
    try:
        if model in ("hf", "huggingface"):
            from assay.runner.models.hf.args import HFArgs

            HFArgs.from_model_args(model_args)
        elif model == "vllm":
            from assay.runner.models.vllm.args import VLLMArgs

            VLLMArgs.from_model_args(model_args)
        elif model in API_MODELS:
            from assay.runner.models.api.args import APIArgs

            APIArgs.from_model_args(model, model_args)
    except (TypeError, ValueError) as error:  # a value the record's conversions refuse (int("x"))
        raise UserError(f"model_args of the {model} model are not valid ({error}); fix the value.") from None
