"""The interface every model backend implements.

Three request kinds (see `instance.py`); each method takes a batch of one kind and returns
one result per request, in order. Everything else (filters, metrics, distribution) is the
evaluator's job, so a backend stays a thin adapter around its model.

A backend may also stream answers as it computes them (`streams_answers`, `answer_sink`):
the response cache commits each batch at once, so a killed run loses one batch of work.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.batch_size import BatchSize
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest

#: receives (position in the request list, final answer) pairs, one batch at a time
AnswerSink = Callable[[Sequence[tuple[int, Any]]], None]


def with_run_settings(model_args: Mapping[str, Any], **settings: Any) -> dict[str, Any]:
    """model_args with the run's settings (`--batch_size`, `--device`, ...) on top; None ones left out.

    For `from_run` overrides: each backend passes the settings it takes, as lm-eval hands
    them to its model's constructor with the model_args.
    """
    return {**model_args, **{key: value for key, value in settings.items() if value is not None}}


class LM(abc.ABC):
    """A language model as the evaluator sees it."""

    #: rank and world size of this process; backends that shard work set them.
    rank: int = 0
    world_size: int = 1

    #: True where the backend calls `answer_sink` for every request of a method call.
    streams_answers: bool = False
    #: called with (position in the request list, final answer) pairs as soon as a batch's
    #: answers are final, every position once, before the method returns; None: not called.
    answer_sink: AnswerSink | None = None

    @abc.abstractmethod
    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]: ...

    @abc.abstractmethod
    def loglikelihood_rolling(
        self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False
    ) -> list[float]: ...

    @abc.abstractmethod
    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]: ...

    @classmethod
    def create_from_arg_string(
        cls, arg_string: str | Mapping[str, Any], additional_config: Mapping[str, Any] | None = None
    ) -> LM:
        """Build from `--model_args` (string or parsed mapping) plus CLI-level settings.

        `additional_config` carries batch_size, max_batch_size and device; entries that are
        None are dropped, as lm-eval does.
        """
        from assay.runner.models.model_args import parse_model_args

        args = dict(parse_model_args(arg_string)) if isinstance(arg_string, str) else dict(arg_string)
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        return cls(**args, **extra)

    @classmethod
    def from_run(
        cls,
        model_args: Mapping[str, Any],
        *,
        batch_size: BatchSize | None,
        max_batch_size: int | None,
        device: str | None,
    ) -> LM:
        """Build for one run: parsed model_args plus the run's batch size and device.

        A backend that takes typed settings overrides this (see `HFLM`); the default hands
        lm-eval's `create_from_arg_string` the batch size as the user wrote it, so backends
        written for lm-eval's interface work unchanged.
        """
        given = batch_size.given if batch_size is not None else None
        return cls.create_from_arg_string(
            dict(model_args), {"batch_size": given, "max_batch_size": max_batch_size, "device": device}
        )

    # -- identity and metadata used by caches and the results JSON ----------------------

    @property
    def tokenizer_name(self) -> str:
        """Part of the request-cache key: prompts depend on the tokenizer's chat template."""
        return ""

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The Jinja chat template selected by `--apply_chat_template [name]`, if any."""
        return None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not support chat templates.")

    def model_info(self) -> dict[str, Any]:
        """Keys merged into the results' `config`: model_num_parameters, model_dtype, ..."""
        return {}

    def tokenizer_info(self) -> dict[str, Any]:
        """Top-level results keys: tokenizer_pad_token, tokenizer_eos_token, ..., max_length."""
        return {}

    def close(self) -> None:  # noqa: B027 - a no-op by default: only backends holding processes override it
        """Releases what the backend holds outside Python objects (engine processes, their
        threads). The evaluator calls it once for a model it built from a name; a caller's own
        instance stays open. Leaving it to interpreter exit is not safe for every engine:
        vLLM's client threads abort the process (SIGABRT) when its engine core dies first."""
