"""The request kinds an LM answers, and the Instance that carries one through a task.

lm-eval passes a bare tuple whose meaning depends on the request type; here each kind is
a frozen dataclass, and lm-eval's tuple shape (`args`) exists only for the samples JSONL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

OutputType = Literal["loglikelihood", "loglikelihood_rolling", "multiple_choice", "generate_until"]
RequestType = Literal["loglikelihood", "loglikelihood_rolling", "generate_until"]


@dataclasses.dataclass(frozen=True)
class LoglikelihoodRequest:
    """Score `continuation` given `context`."""

    context: str
    """Text the model conditions on (may be empty: the prefix token stands in)."""
    continuation: str
    """Text whose log-probability is summed."""

    @property
    def args(self) -> tuple[str, str]:
        return (self.context, self.continuation)


@dataclasses.dataclass(frozen=True)
class RollingRequest:
    """Score a whole text with no context (perplexity tasks)."""

    text: str

    @property
    def args(self) -> tuple[str]:
        return (self.text,)


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """Generate from `context` until a stop sequence or the token budget."""

    context: str
    gen_kwargs: Mapping[str, Any]
    """lm-eval's generation kwargs: until, max_gen_toks, do_sample, temperature, ..."""

    @property
    def args(self) -> tuple[str, Mapping[str, Any]]:
        return (self.context, self.gen_kwargs)


Request = LoglikelihoodRequest | RollingRequest | GenerationRequest


class LoglikelihoodResult(NamedTuple):
    """Sum of the continuation's log-probabilities, and whether greedy decoding gives it."""

    logprob: float
    is_greedy: bool


@dataclasses.dataclass
class Instance:
    """One request of one document of one task, with the responses it collects."""

    request_type: RequestType
    request: Request
    doc: Mapping[str, Any]
    doc_id: int
    idx: int
    """Position of this request among its document's requests (the choice index)."""
    task_name: str
    repeats: int = 1
    resps: list[Any] = dataclasses.field(default_factory=list)
    filtered_resps: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def args(self) -> tuple[Any, ...]:
        return self.request.args
