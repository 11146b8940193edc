"""The `hf` backend: Hugging Face transformers models, giving lm-eval's HFLM numbers.

The class is a thin adapter: `args` checks model_args into one record, `loading` turns
that into a model and tokenizer, `assay.runner.models.encoding` reproduces lm-eval's
tokenisation, `scoring` runs loglikelihood and rolling windows, `generation` runs
generate_until. It accepts lm-eval's HFLM model_args
by name; an unknown one is a `UserError` that names it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import torch
import transformers
from tqdm import tqdm

from assay.batch_size import BatchSize
from assay.errors import UserError
from assay.runner.models import encoding, progress_label
from assay.runner.models.hf import lean_gelu, loading
from assay.runner.models.hf.args import HFArgs
from assay.runner.models.hf.batching import BatchPlan, detect_batch_size
from assay.runner.models.hf.generation import Generator
from assay.runner.models.hf.rolling import RollingScorer, split_model
from assay.runner.models.hf.scoring import Scorer
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM, with_run_settings
from assay.runner.models.token_pairs import TokenPair, rolling_windows

log = logging.getLogger(__name__)


class HFLM(LM):
    """lm-eval's `hf` model on transformers' AutoModelForCausalLM / AutoModelForSeq2SeqLM."""

    streams_answers = True  # every method reports each batch's answers to `answer_sink`

    def __init__(self, **model_args: Any) -> None:
        """lm-eval's signature: HFLM(pretrained=..., batch_size=..., ...); see `HFArgs`."""
        self._setup(HFArgs.from_model_args(model_args))

    @classmethod
    def from_args(cls, args: HFArgs) -> HFLM:
        """Build from an already checked record (the evaluator's typed path)."""
        lm = cls.__new__(cls)
        lm._setup(args)
        return lm

    @classmethod
    def from_run(
        cls,
        model_args: Mapping[str, Any],
        *,
        batch_size: BatchSize | None,
        max_batch_size: int | None,
        device: str | None,
    ) -> HFLM:
        given = with_run_settings(model_args, batch_size=batch_size, max_batch_size=max_batch_size, device=device)
        return cls.from_args(HFArgs.from_model_args(given))

    def _setup(self, args: HFArgs) -> None:
        self.args = args
        self.batch_plan = BatchPlan.of(args.batch_size, args.max_batch_size)
        self.softmax_dtype = loading.parse_dtype(args.softmax_dtype, arg="softmax_dtype")
        self.mixed_precision_dtype = loading.parse_dtype(args.mixed_precision_dtype, arg="mixed_precision_dtype")
        self.revision = args.revision
        self.pretrained = args.pretrained
        self.peft, self.delta = args.peft, args.delta
        dtype = loading.parse_dtype(args.dtype)
        placement, config = self._placement_and_config(args)
        self.backend = loading.choose_backend(config, args.backend)
        self._config = config
        self._device = placement.device
        self.rank, self.world_size = (0, 1) if args.tp_plan is not None else (placement.rank, placement.world_size)
        self.tokenizer = self._tokenizer(args)
        self.model = self._model(args, placement, config, dtype)
        self.think_end_token = args.think_end_token
        self.enable_thinking = args.enable_thinking
        self.chat_template_args = dict(args.chat_template_args)
        if args.enable_thinking is not None:
            self.chat_template_args["enable_thinking"] = args.enable_thinking
        self.truncation = args.truncation
        self.add_bos_token = args.add_bos_token
        loading.configure_pad_token(self.tokenizer, config)
        self.max_length = loading.resolve_max_length(self.model.config, self.tokenizer, args.max_length)
        self.encoder = encoding.Encoder(
            self.tokenizer, backend=self.backend, add_bos_token=args.add_bos_token, prefix_token_id=args.prefix_token_id
        )
        self.scorer = Scorer(
            self.model,
            backend=self.backend,
            max_length=self.max_length,
            device=self._device,
            logits_cache=args.logits_cache,
            softmax_dtype=self.softmax_dtype,  # type: ignore[arg-type]
            mixed_precision_dtype=self.mixed_precision_dtype,  # type: ignore[arg-type]
        )
        self.generator = Generator(
            self.model,
            self.encoder,
            backend=self.backend,
            max_length=self.max_length,
            device=self._device,
            truncation=self.truncation,
            eot_token_id=self.eot_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            think_end_token=self.think_end_token,
            mixed_precision_dtype=self.mixed_precision_dtype,  # type: ignore[arg-type]
        )

    @staticmethod
    def _placement_and_config(args: HFArgs) -> tuple[loading.Placement, Any]:
        pretrained = args.pretrained
        if isinstance(pretrained, str):
            placement = loading.resolve_placement(args.device, parallelize=args.parallelize)
            config = loading.load_config(
                pretrained,
                revision=args.revision,
                trust_remote_code=args.trust_remote_code,
                subfolder=args.subfolder,
                gguf_file=args.gguf_file,
            )
            return placement, config
        # an already-built transformers model (Python API)
        model_device = getattr(pretrained, "device", torch.device("cpu"))
        return loading.Placement(torch.device(model_device), 0, 1, 0), pretrained.config

    @staticmethod
    def _tokenizer(args: HFArgs) -> Any:
        tokenizer, pretrained = args.tokenizer, args.pretrained
        if not (isinstance(tokenizer, str) or tokenizer is None):
            return tokenizer
        name = tokenizer or (pretrained if isinstance(pretrained, str) else pretrained.name_or_path)
        return loading.load_tokenizer(
            name,
            revision=args.revision,
            subfolder=args.subfolder,
            trust_remote_code=args.trust_remote_code,
            use_fast_tokenizer=args.use_fast_tokenizer,
            gguf_file=args.gguf_file,
            add_bos_token=args.add_bos_token,
            explicit=bool(tokenizer),
        )

    def _model(self, args: HFArgs, placement: loading.Placement, config: Any, dtype: Any) -> Any:
        model = args.pretrained
        if isinstance(model, str):
            auto_class = (
                transformers.AutoModelForCausalLM if self.backend == "causal" else transformers.AutoModelForSeq2SeqLM
            )
            extra = dict(args.extra)
            if args.tp_plan is not None:
                placement_kwargs: dict[str, Any] = {"tp_plan": args.tp_plan}
            else:
                placement_kwargs = loading.device_map_args(
                    placement=placement,
                    parallelize=args.parallelize,
                    device_map=extra.pop("device_map", None),
                    max_memory_per_gpu=args.max_memory_per_gpu,
                    max_cpu_memory=args.max_cpu_memory,
                    offload_folder=args.offload_folder,
                )
            model = loading.load_model(
                auto_class,
                model,
                revision=args.revision,
                subfolder=args.subfolder,
                dtype=dtype,
                trust_remote_code=args.trust_remote_code,
                gguf_file=args.gguf_file,
                config=config,
                placement_kwargs=placement_kwargs,
                autogptq=args.autogptq,
                gptqmodel=args.gptqmodel,
                extra=extra,
            )
            if args.peft:
                model = loading.apply_peft(model, self.tokenizer, args.peft, revision=args.revision)
            elif args.delta:
                loading.apply_delta(
                    model,
                    auto_class,
                    args.delta,
                    revision=args.revision,
                    dtype=dtype,
                    trust_remote_code=args.trust_remote_code,
                )
            if self.mixed_precision_dtype is None:
                lean_gelu.lighten(model)
        if isinstance(model, torch.nn.Module):
            model.eval()
            tie_weights = getattr(model, "tie_weights", None)
            if callable(tie_weights):
                tie_weights()
        return model

    # -- properties lm-eval exposes -------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def config(self) -> Any:
        return self._config

    @property
    def eot_token_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def prefix_token_id(self) -> int:
        return self.encoder.prefix_token_id

    @property
    def batch_size(self) -> int | str:
        return self.batch_plan.fixed if self.batch_plan.fixed is not None else "auto"

    @property
    def batch_sizes(self) -> dict[int, int]:
        """Sizes auto detection chose, by schedule step (lm-eval's HFLM.batch_sizes)."""
        return dict(self.batch_plan.found)

    @property
    def tokenizer_name(self) -> str:
        return str(self.tokenizer.name_or_path).replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]:
        return self.encoder.encode(string, add_special_tokens)

    # -- requests ---------------------------------------------------------------------------

    def _progress(self, total: int, desc: str, disable_tqdm: bool) -> tuple[Any, Callable[[int], None]]:
        bar = tqdm(total=total, desc=desc, disable=disable_tqdm or self.rank != 0)
        return bar, bar.update

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, disable_tqdm: bool = False
    ) -> list[LoglikelihoodResult]:
        if self.enable_thinking:
            raise UserError(
                "enable_thinking=True works with generation tasks only, not loglikelihood or multiple-choice ones."
            )
        pairs = self.encoder.encode_pairs([(r.context, r.continuation) for r in requests])
        bar, update = self._progress(len(pairs), progress_label.bar_label("loglikelihood"), disable_tqdm)
        report = self._reporter(update)
        try:
            return self.scorer.score(pairs, self.batch_plan, on_done=report)
        finally:
            bar.close()

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        token_lists = self.encoder.encode_many([r.text for r in requests])
        windows: list[tuple[int, TokenPair]] = []
        for index, tokens in enumerate(token_lists):
            for window in rolling_windows(tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length):
                windows.append((index, window))
        if self.batch_plan.fixed is not None:
            size = self.batch_plan.fixed
        else:
            # full-width windows dominate: probe with one of max_length tokens
            probe = ([self.prefix_token_id], [self.prefix_token_id] * self.max_length)
            size = detect_batch_size(self.device, self.batch_plan.max_batch_size, lambda n: self.scorer.trial(probe, n))
        totals = [0.0] * len(requests)
        rolling = self._rolling_scorer()
        bar, update = self._progress(len(windows), progress_label.bar_label("loglikelihood_rolling"), disable_tqdm)
        # a request's total is final once its last window is scored; one without windows, now
        last_window = {index: position for position, (index, _) in enumerate(windows)}
        report = self._reporter(lambda n: None)
        report([(index, 0.0) for index in range(len(requests)) if index not in last_window])
        try:
            # windows go in request order, `size` at a time, like lm-eval, so shapes match
            for start in range(0, len(windows), size):
                chunk = windows[start : start + size]
                if rolling is not None:
                    logprobs = rolling.score([w for _, w in chunk])
                    update(len(chunk))
                else:
                    scored = self.scorer.score(
                        [w for _, w in chunk],
                        self.batch_plan,
                        override_batch=len(chunk),
                        on_done=lambda done: update(len(done)),
                    )
                    logprobs = [result.logprob for result in scored]
                for (index, _), logprob in zip(chunk, logprobs, strict=False):
                    totals[index] += logprob
                ended = range(start, start + len(chunk))
                report([(windows[p][0], totals[windows[p][0]]) for p in ended if last_window[windows[p][0]] == p])
        finally:
            bar.close()
        return totals

    def _reporter(self, update: Callable[[int], None]) -> Callable[[Sequence[tuple[int, Any]]], None]:
        """Counts a batch's finished answers on the progress bar and hands them to the sink."""
        sink = self.answer_sink

        def report(done: Sequence[tuple[int, Any]]) -> None:
            if not done:
                return
            update(len(done))
            if sink is not None:
                sink(done)

        return report

    def _rolling_scorer(self) -> RollingScorer | None:
        """The body → chunked-head path for rolling windows, where the model splits that way."""
        if not hasattr(self, "_rolling"):
            split = split_model(self.model, self.device) if self.backend == "causal" else None
            self._rolling = (
                None
                if split is None
                else RollingScorer(
                    *split,
                    device=self.device,
                    max_length=self.max_length,
                    softmax_dtype=self.softmax_dtype,  # type: ignore[arg-type]
                    autocast=self.scorer._autocast,
                )
            )
        return self._rolling

    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]:
        bar, update = self._progress(len(requests), progress_label.bar_label("generate_until"), disable_tqdm)
        try:
            return self.generator.run(requests, self.batch_plan, self._reporter(update))
        finally:
            bar.close()

    # -- chat templates ---------------------------------------------------------------------

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The tokenizer's template; a name picks one from a dict of templates."""
        if chat_template is False or chat_template is None:
            return None
        template = getattr(self.tokenizer, "chat_template", None)
        if template is None:
            return None
        if isinstance(template, dict):
            name = chat_template if isinstance(chat_template, str) else "default"
            if name not in template:
                raise UserError(
                    f"The tokenizer has no chat template named {name!r}; available: {', '.join(sorted(template))}."
                )
            return str(template[name])
        return str(template)

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        def render(history: list[dict[str, str]]) -> str:
            return str(
                self.tokenizer.apply_chat_template(
                    history,
                    tokenize=False,
                    add_generation_prompt=add_generation_prompt,
                    continue_final_message=not add_generation_prompt,
                    **self.chat_template_args,
                )
            )

        try:
            return render(chat_history)
        except jinja2.exceptions.TemplateError:
            # as lm-eval: templates that reject a system turn get the history without it
            log.warning("The chat template failed; retrying without the system message.")
            return render([m for m in chat_history if m["role"] != "system"])

    # -- metadata for the results JSON --------------------------------------------------------

    def model_info(self) -> dict[str, Any]:
        model = self.model
        if hasattr(model, "num_parameters"):
            params = int(model.num_parameters())
        elif hasattr(model, "parameters"):
            params = sum(p.numel() for p in model.parameters())
        else:
            params = -1
        info: dict[str, Any] = {
            "model_num_parameters": params,
            "model_dtype": str(getattr(model, "dtype", "")),
            "model_revision": self.revision,
            "model_sha": loading.model_sha(self.pretrained, self.config),
        }
        if self.peft:
            info["peft_sha"] = loading.model_sha(self.peft, None)
        if self.delta:
            info["delta_sha"] = loading.model_sha(self.delta, None)
        return info

    def speed_info(self) -> dict[str, Any]:
        """How the run computed, for the results' config: shared contexts and prompt prefixes, or why not."""
        blockers = {"shared_context": self.scorer.share_blocker, "shared_prompt_prefix": self.generator.prefix_blocker}
        return {key: "on" if blocker is None else f"off: {blocker}" for key, blocker in blockers.items()}

    def tokenizer_info(self) -> dict[str, Any]:
        return encoding.tokenizer_info(self.tokenizer, eot_token_id=self.eot_token_id, max_length=self.max_length)
