"""The `hf` backend: Hugging Face transformers models, giving lm-eval's HFLM numbers.

The class is a thin adapter: `hf_loading` turns model_args into a model and tokenizer,
`hf_encoding` reproduces lm-eval's tokenisation, `hf_scoring` runs loglikelihood and
rolling windows, `hf_generation` runs generate_until. It accepts lm-eval's HFLM model_args
by name; an unknown one is a `UserError` that names it.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence

import jinja2
import torch
import transformers
from tqdm import tqdm

from assay.errors import UserError, suggest
from assay.runner.models.instance import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult, RollingRequest
from assay.runner.models.lm import LM
from assay.runner.models import hf_loading
from assay.runner.models.hf_encoding import Encoder
from assay.runner.models.hf_generation import Generator
from assay.runner.models.hf_scoring import BatchPlan, Scorer, detect_batch_size, rolling_windows

log = logging.getLogger(__name__)

#: lm-eval's HFLM keyword arguments (its **kwargs go to from_pretrained: see _PASSTHROUGH).
_HFLM_ARGS = frozenset({
    "pretrained", "backend", "revision", "subfolder", "tokenizer", "truncation", "logits_cache",
    "max_length", "device", "dtype", "softmax_dtype", "mixed_precision_dtype", "batch_size",
    "max_batch_size", "trust_remote_code", "use_fast_tokenizer", "add_bos_token", "prefix_token_id",
    "parallelize", "max_memory_per_gpu", "max_cpu_memory", "offload_folder", "tp_plan", "peft", "delta",
    "autogptq", "gptqmodel", "gguf_file", "think_end_token", "enable_thinking", "chat_template_args",
})
#: extra model_args handed to `from_pretrained` as lm-eval does with its **kwargs.
_PASSTHROUGH = frozenset({
    "device_map", "attn_implementation", "load_in_8bit", "load_in_4bit", "bnb_4bit_compute_dtype",
    "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "low_cpu_mem_usage", "cache_dir", "token",
    "local_files_only", "use_safetensors", "variant", "quantization_config", "torch_dtype", "use_cache",
    "offload_state_dict", "rope_scaling", "use_flash_attention_2",
})


class HFLM(LM):
    """lm-eval's `hf` model on transformers' AutoModelForCausalLM / AutoModelForSeq2SeqLM."""

    def __init__(self, **model_args: Any) -> None:
        unknown = sorted(set(model_args) - _HFLM_ARGS - _PASSTHROUGH)
        if unknown:
            name = unknown[0]
            raise UserError(
                f"Unknown model_arg {name!r} for the hf model.{suggest(name, sorted(_HFLM_ARGS | _PASSTHROUGH))}"
            )
        if "pretrained" not in model_args or model_args["pretrained"] in (None, ""):
            raise UserError("The hf model needs model_args pretrained=<model directory or hub id>.")
        args = dict(model_args)
        extra = {k: args.pop(k) for k in list(args) if k in _PASSTHROUGH}
        if "torch_dtype" in extra:  # the old spelling of dtype
            args.setdefault("dtype", extra.pop("torch_dtype"))
        self._setup(extra=extra, **args)

    def _setup(
        self,
        *,
        pretrained: Any,
        extra: dict[str, Any],
        backend: str = "default",
        revision: str | None = "main",
        subfolder: str = "",
        tokenizer: Any = None,
        truncation: bool | None = False,
        logits_cache: bool = True,
        max_length: int | None = None,
        device: str | None = None,
        dtype: Any = "auto",
        softmax_dtype: Any = None,
        mixed_precision_dtype: Any = None,
        batch_size: int | str | None = 1,
        max_batch_size: int | None = 64,
        trust_remote_code: bool | None = False,
        use_fast_tokenizer: bool | None = True,
        add_bos_token: bool | None = None,
        prefix_token_id: int | None = None,
        parallelize: bool | None = False,
        max_memory_per_gpu: int | str | None = None,
        max_cpu_memory: int | str | None = None,
        offload_folder: str | None = "./offload",
        tp_plan: str | dict[str, Any] | None = None,
        peft: str | None = None,
        delta: str | None = None,
        autogptq: bool | str = False,
        gptqmodel: bool = False,
        gguf_file: str | None = None,
        think_end_token: str | int | None = None,
        enable_thinking: bool | None = None,
        chat_template_args: Mapping[str, Any] | None = None,
    ) -> None:
        if peft and delta:
            raise UserError("model_args peft and delta cannot both be set; choose one.")
        if tp_plan is not None and parallelize:
            raise UserError("model_args tp_plan and parallelize=True cannot both be set; choose one.")
        if enable_thinking and think_end_token is None:
            raise UserError("model_args enable_thinking=True needs think_end_token (the string or id that ends the reasoning).")
        self.batch_plan = BatchPlan.parse(batch_size, max_batch_size)
        dtype = hf_loading.parse_dtype(dtype)
        self.softmax_dtype = hf_loading.parse_dtype(softmax_dtype, arg="softmax_dtype")
        self.mixed_precision_dtype = hf_loading.parse_dtype(mixed_precision_dtype, arg="mixed_precision_dtype")
        self.revision = str(revision)
        self.pretrained = pretrained
        self.peft, self.delta = peft, delta

        if isinstance(pretrained, str):
            placement = hf_loading.resolve_placement(device, parallelize=bool(parallelize))
            config = hf_loading.load_config(
                pretrained, revision=self.revision, trust_remote_code=bool(trust_remote_code),
                subfolder=subfolder, gguf_file=gguf_file,
            )
        else:  # an already-built transformers model (Python API)
            model_device = getattr(pretrained, "device", torch.device("cpu"))
            placement = hf_loading.Placement(torch.device(model_device), 0, 1, 0)
            config = pretrained.config
        self.backend = hf_loading.choose_backend(config, backend)
        self._config = config
        self._device = placement.device
        self.rank, self.world_size = (0, 1) if tp_plan is not None else (placement.rank, placement.world_size)

        if isinstance(tokenizer, str) or tokenizer is None:
            name = tokenizer or (pretrained if isinstance(pretrained, str) else pretrained.name_or_path)
            self.tokenizer = hf_loading.load_tokenizer(
                name, revision=self.revision, subfolder=subfolder, trust_remote_code=bool(trust_remote_code),
                use_fast_tokenizer=bool(use_fast_tokenizer), gguf_file=gguf_file, add_bos_token=add_bos_token,
                explicit=bool(tokenizer),
            )
        else:
            self.tokenizer = tokenizer

        if isinstance(pretrained, str):
            auto_class = transformers.AutoModelForCausalLM if self.backend == "causal" else transformers.AutoModelForSeq2SeqLM
            if tp_plan is not None:
                placement_kwargs: dict[str, Any] = {"tp_plan": tp_plan}
            else:
                placement_kwargs = hf_loading.device_map_args(
                    placement=placement, parallelize=bool(parallelize), device_map=extra.pop("device_map", None),
                    max_memory_per_gpu=max_memory_per_gpu, max_cpu_memory=max_cpu_memory, offload_folder=offload_folder,
                )
            model = hf_loading.load_model(
                auto_class, pretrained, revision=self.revision, subfolder=subfolder, dtype=dtype,
                trust_remote_code=bool(trust_remote_code), gguf_file=gguf_file, config=config,
                placement_kwargs=placement_kwargs, autogptq=autogptq, gptqmodel=bool(gptqmodel), extra=extra,
            )
            if peft:
                model = hf_loading.apply_peft(model, self.tokenizer, peft, revision=self.revision)
            elif delta:
                hf_loading.apply_delta(
                    model, auto_class, delta, revision=self.revision, dtype=dtype, trust_remote_code=bool(trust_remote_code)
                )
        else:
            model = pretrained
        if isinstance(model, torch.nn.Module):
            model.eval()
            tie_weights = getattr(model, "tie_weights", None)
            if callable(tie_weights):
                tie_weights()
        self.model = model

        self.think_end_token: str | int | None = (
            int(think_end_token) if isinstance(think_end_token, str) and think_end_token.isdigit() else think_end_token
        )
        self.enable_thinking = enable_thinking
        self.chat_template_args = dict(chat_template_args or {})
        if enable_thinking is not None:
            self.chat_template_args["enable_thinking"] = enable_thinking
        self.truncation = bool(truncation)
        self.add_bos_token = add_bos_token
        hf_loading.configure_pad_token(self.tokenizer, config)
        self.max_length = hf_loading.resolve_max_length(model.config, self.tokenizer, max_length)
        self.encoder = Encoder(self.tokenizer, backend=self.backend, add_bos_token=add_bos_token, prefix_token_id=prefix_token_id)
        self.scorer = Scorer(
            model, backend=self.backend, max_length=self.max_length, device=self._device,
            logits_cache=bool(logits_cache), softmax_dtype=self.softmax_dtype,  # type: ignore[arg-type]
            mixed_precision_dtype=self.mixed_precision_dtype,  # type: ignore[arg-type]
        )
        self.generator = Generator(
            model, self.encoder, backend=self.backend, max_length=self.max_length, device=self._device,
            truncation=self.truncation, eot_token_id=self.eot_token_id, pad_token_id=self.tokenizer.pad_token_id,
            think_end_token=self.think_end_token, mixed_precision_dtype=self.mixed_precision_dtype,  # type: ignore[arg-type]
        )

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
            raise UserError("enable_thinking=True works with generation tasks only, not loglikelihood or multiple-choice ones.")
        pairs = self.encoder.encode_pairs([(r.context, r.continuation) for r in requests])
        bar, update = self._progress(len(pairs), "Running loglikelihood requests", disable_tqdm)
        try:
            return self.scorer.score(pairs, self.batch_plan, on_done=update)
        finally:
            bar.close()

    def loglikelihood_rolling(self, requests: Sequence[RollingRequest], *, disable_tqdm: bool = False) -> list[float]:
        token_lists = self.encoder.encode_many([r.text for r in requests])
        windows: list[tuple[int, tuple[list[int], list[int]]]] = []
        for index, tokens in enumerate(token_lists):
            for window in rolling_windows(tokens, prefix_token=self.prefix_token_id, max_length=self.max_length):
                windows.append((index, window))
        if self.batch_plan.fixed is not None:
            size = self.batch_plan.fixed
        else:
            # full-width windows dominate: probe with one of max_length tokens
            probe = ([self.prefix_token_id], [self.prefix_token_id] * self.max_length)
            size = detect_batch_size(self.device, self.batch_plan.max_batch_size, lambda n: self.scorer.trial(probe, n))
        totals = [0.0] * len(requests)
        bar, update = self._progress(len(windows), "Running loglikelihood_rolling requests", disable_tqdm)
        try:
            # windows go in request order, `size` at a time, like lm-eval, so shapes match
            for start in range(0, len(windows), size):
                chunk = windows[start : start + size]
                scores = self.scorer.score([w for _, w in chunk], self.batch_plan, override_batch=len(chunk), on_done=update)
                for (index, _), result in zip(chunk, scores):
                    totals[index] += result.logprob
        finally:
            bar.close()
        return totals

    def generate_until(self, requests: Sequence[GenerationRequest], *, disable_tqdm: bool = False) -> list[str]:
        bar, update = self._progress(len(requests), "Running generate_until requests", disable_tqdm)
        try:
            return self.generator.run(requests, self.batch_plan, update)
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
            return str(self.tokenizer.apply_chat_template(
                history, tokenize=False, add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt, **self.chat_template_args,
            ))

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
            "model_sha": hf_loading.model_sha(self.pretrained, self.config),
        }
        if self.peft:
            info["peft_sha"] = hf_loading.model_sha(self.peft, None)
        if self.delta:
            info["delta_sha"] = hf_loading.model_sha(self.delta, None)
        return info

    def tokenizer_info(self) -> dict[str, Any]:
        tok = self.tokenizer
        return {
            "tokenizer_pad_token": [tok.pad_token, str(tok.pad_token_id)],
            "tokenizer_eos_token": [tok.eos_token, str(tok.eos_token_id)],
            "tokenizer_bos_token": [tok.bos_token, str(tok.bos_token_id)],
            "eot_token_id": self.eot_token_id,
            "max_length": self.max_length,
        }
