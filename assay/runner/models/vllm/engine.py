"""`--model vllm`: vLLM's engine in this process, giving lm-eval's `vllm` backend numbers.

lm-eval's VLLM rules, kept because they decide the numbers:
- tokenisation is HFLM's (`assay.runner.models.encoding.Encoder`): the BOS-prefix rule, add_bos_token;
- loglikelihood sends context+continuation left-truncated to max_length-1 tokens with
  `SamplingParams(temperature=0, prompt_logprobs=1, max_tokens=1)` and sums the prompt
  logprobs of the continuation tokens; is_greedy: each is its position's top-1;
- rolling windows predict max_length-2 tokens each;
- generate_until truncates the context to max_length - max_gen_toks, stops at `until`
  plus the EOS string, then cuts at the stops again.

Data parallelism is Assay's own: under `torchrun` every rank builds one engine over its
share of the documents (the evaluator splits and gathers); lm-eval's Ray path is not used.
Shared prefixes: vLLM's automatic prefix caching (`enable_prefix_caching`, on by default
where the platform supports it) prefills a few-shot context once across generation
requests; requests that ask for prompt logprobs (every loglikelihood) are computed in full,
since vLLM returns no logprobs for cached prompt tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tqdm import tqdm

from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.extras import install_sentence
from assay.runner.models import encoding, progress_label, stops
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM, with_run_settings
from assay.runner.models.token_pairs import TokenPair, left_truncated, rolling_windows
from assay.runner.models.vllm.args import VLLMArgs, normalize_gen_kwargs

INSTALL_HINT = (
    install_sentence("--model vllm", "vllm")[:-1]
    + " (GPU wheels; on CPU build the venv with .ci/vllm_venv.sh, see docs/served.md)."
)


def _import_vllm() -> Any:
    try:
        import vllm
    except ModuleNotFoundError as error:
        if error.name != "vllm":
            raise
        raise UserError(INSTALL_HINT) from None
    return vllm


class VLLMLM(LM):
    def __init__(self, **model_args: Any) -> None:
        self._setup(VLLMArgs.from_model_args(model_args))

    @classmethod
    def from_run(
        cls,
        model_args: Mapping[str, Any],
        *,
        batch_size: BatchSize | None,
        max_batch_size: int | None,
        device: str | None,
    ) -> VLLMLM:
        given = with_run_settings(model_args, batch_size=batch_size)
        if max_batch_size is not None:
            given.setdefault("max_batch_size", max_batch_size)
        lm = cls.__new__(cls)
        lm._setup(VLLMArgs.from_model_args(given))
        return lm

    def _setup(self, args: VLLMArgs) -> None:
        vllm = _import_vllm()
        self.args = args
        self._vllm = vllm
        self.rank, self.world_size = _rank_and_world()
        if args.data_parallel_size > 1 and self.world_size != args.data_parallel_size:
            raise UserError(
                f"model_args data_parallel_size={args.data_parallel_size} runs one engine per rank: launch with"
                f" torchrun --nproc-per-node {args.data_parallel_size} -m assay run ... (this run has {self.world_size} rank(s))."
            )
        self.model = vllm.LLM(**args.engine_kwargs())
        self.tokenizer = self.model.get_tokenizer()
        self.encoder = encoding.Encoder(
            self.tokenizer, backend="causal", add_bos_token=args.add_bos_token, prefix_token_id=args.prefix_token_id
        )
        self.max_length = args.max_length or int(self.model.llm_engine.model_config.max_model_len)
        self.lora_request = None
        if args.lora_local_path:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("assay_lora", 1, args.lora_local_path)

    # -- scoring ----------------------------------------------------------------------------

    def _generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        tokens_prompt = self._vllm.TokensPrompt
        inputs = [tokens_prompt(prompt_token_ids=p) for p in prompts]
        kwargs: dict[str, Any] = {"use_tqdm": False}
        if self.lora_request is not None:
            kwargs["lora_request"] = self.lora_request
        return list(self.model.generate(inputs, sampling_params=params, **kwargs))

    def score_tokens(self, pairs: Sequence[TokenPair], desc: str, disable_tqdm: bool) -> list[LoglikelihoodResult]:
        limit = self.max_length - 1  # vLLM needs room for one generated token
        truncated = [left_truncated(pair, limit) for pair in pairs]
        inputs, ctxlens = [tokens for tokens, _ in truncated], [ctxlen for _, ctxlen in truncated]
        params = self._vllm.SamplingParams(temperature=0, prompt_logprobs=1, max_tokens=1, detokenize=False)
        results: list[LoglikelihoodResult] = []
        bar = tqdm(total=len(inputs), desc=desc, disable=disable_tqdm or self.rank != 0)
        step = self.args.batch_size or max(1, len(inputs))
        try:
            for start in range(0, len(inputs), step):
                chunk = list(range(start, min(len(inputs), start + step)))
                outputs = self._generate([inputs[i] for i in chunk], params)
                for i, output in zip(chunk, outputs, strict=False):
                    results.append(_parse_prompt_logprobs(inputs[i], output.prompt_logprobs, ctxlens[i]))
                bar.update(len(chunk))
        finally:
            bar.close()
        return results

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        pairs = self.encoder.encode_pairs([(r.context, r.continuation) for r in requests])
        return self.score_tokens(pairs, progress_label.bar_label("loglikelihood"), disable_tqdm)

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        owners, windows = [], []
        for index, tokens in enumerate(self.encoder.encode_many([r.text for r in requests])):
            for window in rolling_windows(
                tokens, prefix_token=self.encoder.prefix_token_id, max_seq_len=self.max_length - 2
            ):
                owners.append(index)
                windows.append(window)
        totals = [0.0] * len(requests)
        for owner, result in zip(
            owners,
            self.score_tokens(windows, progress_label.bar_label("loglikelihood_rolling"), disable_tqdm),
            strict=False,
        ):
            totals[owner] += result.logprob
        return totals

    # -- generation -------------------------------------------------------------------------

    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]:
        eos = str(self.tokenizer.decode(self.eot_token_id)) or str(getattr(self.tokenizer, "eos_token", "") or "")
        encoded = self.encoder.encode_many([r.context for r in requests])
        prompts, params, untils = [], [], []
        for tokens, request in zip(encoded, requests, strict=False):
            until, budget, kwargs = normalize_gen_kwargs(request.gen_kwargs, self.args.max_gen_toks)
            until = stops.with_eos(until, eos or None)  # an empty EOS text is no stop string
            if len(tokens) + budget > self.max_length:
                tokens = tokens[-(self.max_length - budget) :] if self.max_length > budget else []
            stop = [s for s in until if s == eos] if self.args.think_end_token else until
            prompts.append(tokens)
            params.append(self._vllm.SamplingParams(max_tokens=budget, stop=stop, **kwargs))
            untils.append(until)
        bar = tqdm(
            total=len(requests), desc=progress_label.bar_label("generate_until"), disable=disable_tqdm or self.rank != 0
        )
        try:
            outputs = self._generate(prompts, params)
            bar.update(len(requests))
        finally:
            bar.close()
        return [
            stops.cut_at_stops(out.outputs[0].text, until, self.args.think_end_token)
            for out, until in zip(outputs, untils, strict=False)
        ]

    # -- identity ---------------------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.name_or_path).replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        if chat_template is False or chat_template is None:
            return None
        return str(getattr(self.tokenizer, "chat_template", None) or "")

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        return str(
            self.tokenizer.apply_chat_template(
                chat_history,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
                **self.args.chat_template_kwargs(),
            )
        )

    def model_info(self) -> dict[str, Any]:
        return {
            "model_num_parameters": -1,
            "model_dtype": str(self.args.dtype),
            "model_revision": self.args.revision,
            "model_sha": "",
        }

    def close(self) -> None:
        # Shut the engine core down while the interpreter is whole: at exit the core process
        # may get SIGTERM before the client's threads are joined, and the C++ runtime then
        # aborts a run that had already written its results (rc 134, about half the time on CPU).
        engine_core = getattr(getattr(self.model, "llm_engine", None), "engine_core", None)
        if engine_core is not None:
            engine_core.shutdown()
        self.model = None

    def tokenizer_info(self) -> dict[str, Any]:
        return encoding.tokenizer_info(self.tokenizer, eot_token_id=self.eot_token_id, max_length=self.max_length)


def _parse_prompt_logprobs(tokens: list[int], prompt_logprobs: Any, ctxlen: int) -> LoglikelihoodResult:
    total, greedy = 0.0, True
    for token, options in zip(tokens[ctxlen:], list(prompt_logprobs)[ctxlen:], strict=False):
        values = {t: float(getattr(v, "logprob", v)) for t, v in options.items()}
        total += values[token]
        if greedy and max(values, key=lambda t: values[t]) != token:
            greedy = False
    return LoglikelihoodResult(total, greedy)


def _rank_and_world() -> tuple[int, int]:
    """One engine per torchrun rank: the evaluator shards documents by these."""
    try:
        import torch.distributed as dist
    except ModuleNotFoundError:
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1
