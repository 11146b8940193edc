"""A deterministic language model defined by hashing its inputs, for pipeline parity tests.

The same pure function backs an Assay LM and an lm-eval LM, so any difference in the two
pipelines' results comes from prompts, filters, metrics or aggregation — not the model.
This stands in for a neural model only where the point is the pipeline; the HF parity
tests use real transformers models.
"""

from __future__ import annotations

import hashlib
from typing import Any

from assay.runner.models.instance import LoglikelihoodResult
from assay.runner.models.lm import LM


def _unit(*parts: Any) -> float:
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def fake_loglikelihood(context: str, continuation: str) -> tuple[float, bool]:
    return -10.0 * _unit("ll", context, continuation) - 0.1 * len(continuation), _unit(
        "greedy", context, continuation
    ) > 0.6


def fake_rolling(text: str) -> float:
    return -(1.0 + _unit("rolling", text)) * len(text.split())


def fake_generation(context: str, gen_kwargs: dict) -> str:
    n = int(_unit("gen", context) * 12)
    return f" The answer is {n}.\n#### {n}\n\nQuestion: ignored"


def fake_chat(messages: list, add_generation_prompt: bool) -> str:
    """A tiny chat format: <|role|>content blocks, and an open assistant turn when asked."""
    text = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
    return text + ("<|assistant|>" if add_generation_prompt else "")


class AssayFakeLM(LM):
    tokenizer_name = "fake-tokenizer"

    def apply_chat_template(self, chat_history, add_generation_prompt=True):
        return fake_chat(chat_history, add_generation_prompt)

    def chat_template(self, chat_template=False):
        return "fake-chat-template"

    def loglikelihood(self, requests, *, disable_tqdm=False):
        return [LoglikelihoodResult(*fake_loglikelihood(r.context, r.continuation)) for r in requests]

    def loglikelihood_rolling(self, requests, *, disable_tqdm=False):
        return [fake_rolling(r.text) for r in requests]

    def generate_until(self, requests, *, disable_tqdm=False):
        out = []
        for r in requests:
            text = fake_generation(r.context, dict(r.gen_kwargs))
            for stop in r.gen_kwargs.get("until", []):
                text = text.split(stop)[0]
            out.append(text)
        return out


def lmeval_fake_lm() -> Any:
    """The same model as an lm-eval LM (imported lazily: lm-eval is a dev dependency)."""
    from lm_eval.api.model import LM as LMEvalLM

    class LMEvalFakeLM(LMEvalLM):
        tokenizer_name = "fake-tokenizer"

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            return fake_chat(chat_history, add_generation_prompt)

        def chat_template(self, chat_template=False):
            return "fake-chat-template"

        def loglikelihood(self, requests, disable_tqdm=False):
            return [fake_loglikelihood(*r.args) for r in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return [fake_rolling(r.args[0]) for r in requests]

        def generate_until(self, requests, disable_tqdm=False):
            out = []
            for r in requests:
                context, kwargs = r.args
                text = fake_generation(context, dict(kwargs))
                for stop in kwargs.get("until", []):
                    text = text.split(stop)[0]
                out.append(text)
            return out

    return LMEvalFakeLM()
