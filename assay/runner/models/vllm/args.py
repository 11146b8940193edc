"""`--model vllm` settings: lm-eval's VLLM model_args as one typed record.

Names and defaults are lm-eval 0.4.13's. Keys lm-eval passes through to `vllm.LLM`
(enforce_eager, max_num_seqs, gpu_memory_utilization, enable_prefix_caching, ...) pass
through here too; Ray-only settings do not exist, since data parallelism is torchrun's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from assay.batch_size import BatchSize, parse_max
from assay.booleans import optional_bool
from assay.errors import UserError
from assay.runner.models import stops

#: vllm.LLM keyword arguments accepted as model_args (lm-eval passes its **kwargs on).
ENGINE_PASSTHROUGH = frozenset(
    {
        "enforce_eager",
        "max_num_seqs",
        "gpu_memory_utilization",
        "enable_prefix_caching",
        "swap_space",
        "kv_cache_dtype",
        "cpu_offload_gb",
        "max_num_batched_tokens",
        "distributed_executor_backend",
        "block_size",
        "enable_chunked_prefill",
        "disable_custom_all_reduce",
        "pipeline_parallel_size",
        "download_dir",
        "load_format",
        "hf_overrides",
    }
)
_IGNORED = frozenset({"device", "truncation_side"})
#: the ENGINE_PASSTHROUGH keys vLLM reads as booleans (read strictly: `enforce_eager=no` is false).
_ENGINE_FLAGS = frozenset(
    {"enforce_eager", "enable_prefix_caching", "enable_chunked_prefill", "disable_custom_all_reduce"}
)


@dataclasses.dataclass(frozen=True)
class VLLMArgs:
    pretrained: str
    dtype: str = "auto"
    revision: str | None = None
    trust_remote_code: bool = False
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    tokenizer_revision: str | None = None
    add_bos_token: bool | None = None
    prefix_token_id: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    quantization: str | None = None
    max_gen_toks: int = 256
    batch_size: int | None = None
    """None = all requests at once (lm-eval's "auto"): vLLM schedules them itself."""
    max_batch_size: int | None = None
    max_length: int | None = None
    seed: int = 1234
    lora_local_path: str | None = None
    max_lora_rank: int = 16
    enable_thinking: bool | None = None
    chat_template_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    think_end_token: str | None = None
    engine_extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_model_args(cls, model_args: Mapping[str, Any]) -> VLLMArgs:
        args = {k: v for k, v in model_args.items() if k not in _IGNORED}
        if not args.get("pretrained"):
            raise UserError("The vllm model needs model_args pretrained=<model directory or hub id>.")
        if args.get("max_length") is not None and args.get("max_model_len") is not None:
            raise UserError("model_args max_length and max_model_len mean the same; give one of them.")
        if args.get("max_model_len") is not None:
            args["max_length"] = args.pop("max_model_len")
        args.pop("max_model_len", None)
        extra = {k: args.pop(k) for k in list(args) if k in ENGINE_PASSTHROUGH}
        known = {f.name for f in dataclasses.fields(cls)} - {"engine_extra"}
        unknown = sorted(set(args) - known)
        if unknown:
            from assay.errors import suggest

            raise UserError(
                f"Unknown model_arg {unknown[0]!r} for the vllm model.{suggest(unknown[0], sorted(known | ENGINE_PASSTHROUGH))}"
            )
        args["batch_size"] = _batch_size(args.get("batch_size"))
        if "max_batch_size" in args:
            args["max_batch_size"] = parse_max(args["max_batch_size"], source="model_args max_batch_size")
        for name in ("trust_remote_code", "add_bos_token", "enable_thinking"):
            if name in args:
                value = optional_bool(args[name], name=f"model_args {name}")
                args[name] = bool(value) if name == "trust_remote_code" else value
        for name in sorted(_ENGINE_FLAGS & set(extra)):
            extra[name] = optional_bool(extra[name], name=f"model_args {name}")
        for name in ("tensor_parallel_size", "data_parallel_size", "max_gen_toks", "seed", "max_lora_rank"):
            if name in args:
                args[name] = int(args[name])
        if args.get("max_length") is not None:
            args["max_length"] = int(args["max_length"])
        args["chat_template_args"] = dict(args.get("chat_template_args") or {})
        return cls(**args, engine_extra=extra)

    def engine_kwargs(self) -> dict[str, Any]:
        """What `vllm.LLM(**...)` gets: lm-eval's model_args dict, pass-through keys on top."""
        kwargs: dict[str, Any] = {
            "model": self.pretrained,
            "revision": self.revision,
            "dtype": self.dtype,
            "tokenizer": self.tokenizer,
            "tokenizer_mode": self.tokenizer_mode,
            "tokenizer_revision": self.tokenizer_revision,
            "trust_remote_code": self.trust_remote_code,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_length,
            "max_num_seqs": self.engine_extra.get("max_num_seqs", self.max_batch_size),
            "quantization": self.quantization,
            "seed": self.seed,
            "enable_lora": bool(self.lora_local_path),
            "max_lora_rank": self.max_lora_rank,
        }
        kwargs.update({k: v for k, v in self.engine_extra.items() if k != "swap_space"})
        return {k: v for k, v in kwargs.items() if v is not None or k in ("tokenizer",)}

    def chat_template_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.chat_template_args)
        if self.enable_thinking is not None:
            kwargs["enable_thinking"] = self.enable_thinking
        return kwargs


def _batch_size(value: Any) -> int | None:
    """The shared parser (the CRD's forms); auto is None: vLLM schedules the requests itself."""
    if value is None:
        return None
    return BatchSize.parse(value, source="model_args batch_size").fixed


def normalize_gen_kwargs(
    gen_kwargs: Mapping[str, Any], default_max_gen_toks: int
) -> tuple[list[str], int, dict[str, Any]]:
    """(until, max_gen_toks, SamplingParams kwargs), as lm-eval's VLLM.modify_gen_kwargs.

    Token-budget aliases in lm-eval's priority; do_sample False (or unset with temperature
    0) means temperature 0; do_sample is dropped; special tokens are kept in the text.
    """
    kwargs = copy.deepcopy(dict(gen_kwargs))
    until = stops.until_list(kwargs.pop("until", None))
    max_gen_toks = stops.pop_max_gen_toks(kwargs, default_max_gen_toks)
    do_sample = kwargs.pop("do_sample", None)
    temperature = float(kwargs.get("temperature", 0.0))
    if do_sample is False or (do_sample is None and temperature <= 0.0):
        kwargs["temperature"] = 0.0
    return until, max_gen_toks, {"skip_special_tokens": False, "spaces_between_special_tokens": False, **kwargs}
