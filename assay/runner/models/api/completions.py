"""`local-completions` / `openai-completions`: a served model behind /v1/completions.

lm-eval's LocalCompletionsAPI, request for request (LMEVAL_FACTS-style rules kept on
purpose, since they decide the numbers):
- loglikelihood sends context+continuation (token ids unless tokenized_requests=False),
  left-truncated to max_length-1 tokens, with `echo: true, logprobs: 1, max_tokens: 1`,
  and sums the echoed prompt logprobs after the context (the last entry is the one
  generated token, dropped). is_greedy: every scored token is its position's top-1.
- rolling splits the text into disjoint windows of max_length-2 predicted tokens.
- generate_until sends the context (truncated to max_length-1-max_gen_toks tokens) with
  `temperature` 0 unless given, the task's `until` plus the EOS string as `stop`.
Requests go `batch_size` prompts per POST, `num_concurrent` POSTs at a time.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tqdm import tqdm

from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.runner.models import progress_label, stops
from assay.runner.models.api.args import APIArgs
from assay.runner.models.api.client import APIClient
from assay.runner.models.api.tokenizer import APITokenizer
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM, with_run_settings
from assay.runner.models.token_pairs import TokenPair, left_truncated, rolling_windows

NO_PROMPT_LOGPROBS = (
    "The server at {url} returned no prompt logprobs: loglikelihood and multiple-choice tasks need a server that"
    " echoes prompt logprobs on /v1/completions (echo=true, logprobs=1, as vLLM does); generation tasks still run."
)


class CompletionsLM(LM):
    """lm-eval's `local-completions` (and `openai-completions` with its defaults)."""

    kind = "local-completions"

    def __init__(self, **model_args: Any) -> None:
        self._setup(APIArgs.from_model_args(self.kind, model_args))

    @classmethod
    def from_run(
        cls,
        model_args: Mapping[str, Any],
        *,
        batch_size: BatchSize | None,
        max_batch_size: int | None,
        device: str | None,
    ) -> CompletionsLM:
        lm = cls.__new__(cls)
        lm._setup(APIArgs.from_model_args(cls.kind, with_run_settings(model_args, batch_size=batch_size)))
        return lm

    def _setup(self, args: APIArgs) -> None:
        self.args = args
        self.tokenizer = APITokenizer(args) if args.tokenizer_backend is not None else None
        self.client = APIClient(
            args.base_url,
            api_key=self.api_key,
            num_concurrent=args.num_concurrent,
            max_retries=args.max_retries,
            timeout=args.timeout,
            verify_certificate=args.verify_certificate,
            ca_cert_path=args.ca_cert_path,
        )
        # lm-eval keeps one token for generation: every length rule below uses max_length-1
        self.max_length = args.max_length - 1
        self.generations = 0
        self.generations_cut_by_length = 0
        """Generations the server stopped at max_tokens (finish_reason "length"), not at a stop sequence."""
        self.generations_cut_in_reasoning = 0
        """Chat answers without the think_end_token: cut before their reasoning ended."""

    @property
    def api_key(self) -> str:
        return os.environ.get("OPENAI_API_KEY", "")

    def _need_tokenizer(self, what: str) -> APITokenizer:
        if self.tokenizer is None:
            raise UserError(
                f"{what} needs a local tokenizer to count tokens; pass model_args tokenizer_backend=huggingface,tokenizer=<dir>."
            )
        return self.tokenizer

    # -- loglikelihood ------------------------------------------------------------------

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        tok = self._need_tokenizer("loglikelihood")
        pairs = [self._encode_pair(tok, r.context, r.continuation) for r in requests]
        return self.score_tokens(pairs, desc=progress_label.bar_label("loglikelihood"), disable_tqdm=disable_tqdm)

    @staticmethod
    def _encode_pair(tok: APITokenizer, context: str, continuation: str) -> TokenPair:
        if context == "":
            cont = tok.encode(continuation, add_special_tokens=False)
            if cont and cont[0] == tok.prefix_token_id:
                return cont[:1], cont[1:]
            return [tok.prefix_token_id], cont
        stripped = context.rstrip()
        continuation = context[len(stripped) :] + continuation
        whole = tok.encode(stripped + continuation)
        ctx = tok.encode(stripped)
        return ctx, whole[len(ctx) :]

    def score_tokens(self, pairs: Sequence[TokenPair], *, desc: str, disable_tqdm: bool) -> list[LoglikelihoodResult]:
        """Each (context, continuation) pair's summed logprob and greediness, in order."""
        truncated = [left_truncated(pair, self.max_length) for pair in pairs]
        inputs, ctxlens = [tokens for tokens, _ in truncated], [ctxlen for _, ctxlen in truncated]
        # longest first, as lm-eval orders them: batches hold similar lengths
        order = sorted(range(len(pairs)), key=lambda i: (-len(inputs[i]), tuple(inputs[i])))
        batches = [order[s : s + self.args.batch_size] for s in range(0, len(order), self.args.batch_size)]
        payloads = [self._score_payload([inputs[i] for i in batch]) for batch in batches]
        results: list[LoglikelihoodResult | None] = [None] * len(pairs)
        with _bar(len(pairs), desc, disable_tqdm or self.rank != 0) as update:
            answers = self.client.post_all(payloads, on_done=lambda b: update(len(batches[b])))
        for batch, answer in zip(batches, answers, strict=False):
            for i, parsed in zip(
                batch,
                self._parse_logprobs(answer, [ctxlens[i] for i in batch], [len(inputs[i]) for i in batch]),
                strict=False,
            ):
                results[i] = parsed
        return [r for r in results if r is not None]

    def _score_payload(self, prompts: list[list[int]]) -> dict[str, Any]:
        return {
            "model": self.args.model,
            "prompt": self._prompt(prompts),
            "temperature": 0,
            "max_tokens": 1,
            "logprobs": 1,
            "seed": self.args.seed,
            "echo": True,
        }

    def _prompt(self, prompts: list[list[int]]) -> Any:
        if self.args.tokenized_requests:
            return prompts
        texts = self._need_tokenizer("tokenized_requests=False").decode_batch(prompts)
        return texts[0] if self.args.batch_size <= 1 else texts

    def _parse_logprobs(self, answer: Any, ctxlens: list[int], lengths: list[int]) -> list[LoglikelihoodResult]:
        choices = sorted(_choices(answer, self.args.base_url), key=lambda c: int(c.get("index", 0)))
        out = []
        for choice, ctxlen, length in zip(choices, ctxlens, lengths, strict=False):
            logprobs = choice.get("logprobs") or {}
            tokens, tops = logprobs.get("token_logprobs"), logprobs.get("top_logprobs")
            if not tokens or not tops or len(tokens) < length:
                raise UserError(NO_PROMPT_LOGPROBS.format(url=self.args.base_url))
            scored, top = tokens[ctxlen:-1], tops[ctxlen:-1]
            greedy = all(t == max(options.values()) for t, options in zip(scored, top, strict=False))
            out.append(LoglikelihoodResult(float(sum(scored)), greedy))
        return out

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        tok = self._need_tokenizer("loglikelihood_rolling")
        owners: list[int] = []
        windows: list[TokenPair] = []
        for index, request in enumerate(requests):
            for window in rolling_windows(
                tok.encode(request.text), prefix_token=tok.prefix_token_id, max_seq_len=self.max_length - 1
            ):
                owners.append(index)
                windows.append(window)
        totals = [0.0] * len(requests)
        for owner, result in zip(
            owners,
            self.score_tokens(
                windows, desc=progress_label.bar_label("loglikelihood_rolling"), disable_tqdm=disable_tqdm
            ),
            strict=False,
        ):
            totals[owner] += result.logprob
        return totals

    # -- generation -----------------------------------------------------------------------

    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]:
        groups: dict[str, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(repr(sorted(request.gen_kwargs.items(), key=lambda kv: kv[0])), []).append(i)
        plan: list[tuple[list[int], dict[str, Any]]] = []
        for indices in groups.values():
            indices.sort(key=lambda i: -len(requests[i].context))
            size = self.batch_size_for_generation
            for start in range(0, len(indices), size):
                batch = indices[start : start + size]
                plan.append((batch, self._generation_payload([requests[i] for i in batch])))
        out: list[str] = [""] * len(requests)
        with _bar(len(requests), progress_label.bar_label("generate_until"), disable_tqdm or self.rank != 0) as update:
            answers = self.client.post_all([payload for _, payload in plan], on_done=lambda b: update(len(plan[b][0])))
        for (batch, _), answer in zip(plan, answers, strict=False):
            for i, text in zip(batch, self.parse_generations(answer), strict=False):
                out[i] = text
            self._count_finish_reasons(answer)
        return out

    def _count_finish_reasons(self, answer: Any) -> None:
        for choice in _choices(answer, self.args.base_url):
            self.generations += 1
            self.generations_cut_by_length += choice.get("finish_reason") == "length"

    def request_health(self) -> dict[str, int]:
        """What the sentinels read of the endpoint: payloads sent, those retried, generations cut by length."""
        return {
            "requests": self.client.payloads_posted,
            "retried": self.client.payloads_retried,
            "generations": self.generations,
            "cut_by_length": self.generations_cut_by_length,
            "cut_in_reasoning": self.generations_cut_in_reasoning,
        }

    @property
    def batch_size_for_generation(self) -> int:
        return self.args.batch_size

    def _generation_payload(self, batch: Sequence[GenerationRequest]) -> dict[str, Any]:
        gen_kwargs = copy.deepcopy(dict(batch[0].gen_kwargs))
        contexts = [r.context for r in batch]
        if self.args.tokenized_requests:
            tok = self._need_tokenizer("tokenized_requests=True")
            budget = int(gen_kwargs.get("max_gen_toks", self.args.max_gen_toks))
            encoded = tok.encode_many(contexts, add_special_tokens=self.args.add_bos_token)
            prompt: Any = [ids[-(self.max_length - budget) :] for ids in encoded]
        else:
            prompt = contexts[0] if self.args.batch_size <= 1 else contexts
        gen_kwargs.pop("do_sample", None)
        max_tokens = (
            gen_kwargs.pop("max_tokens")
            if "max_tokens" in gen_kwargs
            else gen_kwargs.pop("max_gen_toks", self.args.max_gen_toks)
        )
        return {
            "prompt": prompt,
            "model": self.args.model,
            "max_tokens": max_tokens,
            "temperature": gen_kwargs.pop("temperature", 0),
            "stop": self.stop_sequences(gen_kwargs.pop("until", None)),
            "seed": self.args.seed,
            **gen_kwargs,
        }

    def stop_sequences(self, until: Any) -> list[str]:
        """The task's `until` as a list, plus the EOS string (lm-eval's handle_stop_sequences)."""
        eos = self.tokenizer.eos_string if self.tokenizer is not None else self.args.eos_string
        return stops.with_eos(stops.until_list(until), eos)

    def parse_generations(self, answer: Any) -> list[str]:
        choices = sorted(_choices(answer, self.args.base_url), key=lambda c: int(c.get("index", 0)))
        return [str(c.get("text") or "") for c in choices]

    # -- identity -------------------------------------------------------------------------

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name.replace("/", "__") if self.tokenizer is not None else ""

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if chat_template is False or chat_template is None:
            return None
        if self.tokenizer is None or self.tokenizer.backend != "huggingface":
            return ""
        return str(getattr(self.tokenizer.impl, "chat_template", None) or "")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        if self.tokenizer is None or self.tokenizer.backend != "huggingface" or not self.args.tokenized_requests:
            raise UserError(
                f"--apply_chat_template with {self.kind} needs tokenizer_backend=huggingface and tokenized_requests=True."
            )
        return str(
            self.tokenizer.impl.apply_chat_template(
                chat_history,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
            )
        )

    def model_info(self) -> dict[str, Any]:
        return {"model_num_parameters": -1, "model_dtype": "", "model_revision": self.args.revision, "model_sha": ""}

    def tokenizer_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"max_length": self.max_length}
        if self.tokenizer is not None:
            info["eot_token_id"] = self.tokenizer.eot_token_id
        return info


class OpenAICompletionsLM(CompletionsLM):
    """`openai-completions`: api.openai.com by default, tiktoken, and a key that must be set."""

    kind = "openai-completions"

    @property
    def api_key(self) -> str:
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise UserError("openai-completions needs an API key: set the OPENAI_API_KEY environment variable.")
        return key


def _choices(answer: Any, url: str) -> list[dict[str, Any]]:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list):
        raise UserError(
            f"The server at {url} answered without a `choices` list; is base_url an OpenAI-compatible completions route?"
        )
    return choices


class _bar:
    """A tqdm bar as a context manager that yields its update function."""

    def __init__(self, total: int, desc: str, disable: bool) -> None:
        self._bar = tqdm(total=total, desc=desc, disable=disable)

    def __enter__(self) -> Callable[[int], None]:
        update: Callable[[int], None] = self._bar.update
        return update

    def __exit__(self, *exc: object) -> None:
        self._bar.close()
