"""`local-chat-completions` / `openai-chat-completions`: a served model behind /v1/chat/completions.

Generation only, as in lm-eval: a chat route returns no prompt logprobs. With
`--apply_chat_template` the prompt builder hands over the conversation, which this
backend keeps as JSON (lm-eval's JsonChatStr) and sends as `messages`; the server applies
its own chat template. One conversation per request (lm-eval forces batch_size 1), at
most four stop strings (OpenAI's limit, which lm-eval applies to every chat server).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from assay.errors import UserError
from assay.runner.models import stops
from assay.runner.models.api.completions import CompletionsLM, _choices
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest


class ChatCompletionsLM(CompletionsLM):
    kind = "local-chat-completions"
    #: the payload key for the token budget (OpenAI renamed it for its own API)
    budget_key = "max_tokens"

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        raise UserError(
            f"{self.kind} runs generation tasks only (a chat route returns no prompt logprobs); for loglikelihood and"
            " multiple-choice tasks use local-completions against a server that echoes prompt logprobs."
        )

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        self.loglikelihood([])
        return []

    @property
    def batch_size_for_generation(self) -> int:
        return 1

    def _generation_payload(self, batch: Sequence[GenerationRequest]) -> dict[str, Any]:
        messages = _messages(batch[0].context, self.kind)
        gen_kwargs = dict(batch[0].gen_kwargs)
        gen_kwargs.pop("do_sample", None)
        max_tokens = (
            gen_kwargs.pop("max_tokens")
            if "max_tokens" in gen_kwargs
            else gen_kwargs.pop("max_gen_toks", self.args.max_gen_toks)
        )
        return {
            "messages": messages,
            "model": self.args.model,
            self.budget_key: max_tokens,
            "temperature": gen_kwargs.pop("temperature", 0),
            "stop": self.stop_sequences(gen_kwargs.pop("until", None))[:4],
            "seed": self.args.seed,
            **gen_kwargs,
        }

    def parse_generations(self, answer: Any) -> list[str]:
        texts: list[str] = []
        for choice in sorted(_choices(answer, self.args.base_url), key=lambda c: int(c.get("index", 0))):
            content = "" if (choice.get("message") or {}).get("content") is None else str(choice["message"]["content"])
            think_end = self.args.think_end_token
            # cut before the end of its reasoning: what remains is not the answer (the sentinels count it)
            self.generations_cut_in_reasoning += think_end is not None and think_end not in content
            texts.append(stops.after_thinking(content, think_end))
        return texts

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return None if chat_template is False or chat_template is None else ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        # the server renders the conversation; it travels as JSON until the request is built
        return json.dumps(chat_history, ensure_ascii=False)


class OpenAIChatCompletionsLM(ChatCompletionsLM):
    kind = "openai-chat-completions"
    budget_key = "max_completion_tokens"

    @property
    def api_key(self) -> str:
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise UserError("openai-chat-completions needs an API key: set the OPENAI_API_KEY environment variable.")
        return key


def _messages(context: str, kind: str) -> list[dict[str, Any]]:
    try:
        messages = json.loads(context)
    except json.JSONDecodeError:
        messages = None
    if not (isinstance(messages, list) and all(isinstance(m, dict) and "role" in m for m in messages)):
        raise UserError(f"{kind} sends conversations: run with --apply_chat_template.")
    return messages
