"""The `hf` backend's settings as one typed record, checked once.

lm-eval's HFLM takes ~30 keyword arguments plus `**kwargs` for `from_pretrained`; a run's
`--model_args` string, `--batch_size`/`--max_batch_size`/`--device` and Python callers
all end up here. Names and defaults are HFLM's, so existing model_args keep working.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay.batch_size import BatchSize, parse_max
from assay.booleans import optional_bool
from assay.errors import UserError, suggest

#: extra model_args handed to `from_pretrained` as lm-eval does with its **kwargs.
PASSTHROUGH = frozenset(
    {
        "device_map",
        "attn_implementation",
        "load_in_8bit",
        "load_in_4bit",
        "bnb_4bit_compute_dtype",
        "bnb_4bit_quant_type",
        "bnb_4bit_use_double_quant",
        "low_cpu_mem_usage",
        "cache_dir",
        "token",
        "local_files_only",
        "use_safetensors",
        "variant",
        "quantization_config",
        "torch_dtype",
        "use_cache",
        "offload_state_dict",
        "rope_scaling",
        "use_flash_attention_2",
    }
)

#: the PASSTHROUGH keys `from_pretrained` reads as booleans (read strictly, as HFArgs' own flags).
PASSTHROUGH_FLAGS = frozenset(
    {
        "load_in_8bit",
        "load_in_4bit",
        "bnb_4bit_use_double_quant",
        "low_cpu_mem_usage",
        "local_files_only",
        "use_safetensors",
        "use_cache",
        "offload_state_dict",
        "use_flash_attention_2",
    }
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HFArgs:
    pretrained: Any
    """A model directory or hub id, or an already built transformers model (Python API)."""
    backend: str = "default"
    """causal, seq2seq, or default (decided from the model's config)."""
    revision: str = "main"
    subfolder: str = ""
    tokenizer: Any = None
    """A tokenizer name or object; None: the model's own."""
    truncation: bool = False
    logits_cache: bool = True
    max_length: int | None = None
    device: str | None = None
    """None: auto-detect (cuda, mps, cpu), where lm-eval defaults to cuda."""
    dtype: Any = "auto"
    softmax_dtype: Any = None
    mixed_precision_dtype: Any = None
    batch_size: BatchSize = BatchSize(1)
    max_batch_size: int | None = 64
    trust_remote_code: bool = False
    use_fast_tokenizer: bool = True
    add_bos_token: bool | None = None
    prefix_token_id: int | None = None
    parallelize: bool = False
    max_memory_per_gpu: int | str | None = None
    max_cpu_memory: int | str | None = None
    offload_folder: str | None = "./offload"
    tp_plan: str | dict[str, Any] | None = None
    peft: str | None = None
    delta: str | None = None
    autogptq: bool | str = False
    gptqmodel: bool = False
    gguf_file: str | None = None
    think_end_token: str | int | None = None
    """The text or token id that ends a reasoning block; all-digit text is an id."""
    enable_thinking: bool | None = None
    chat_template_args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """model_args passed through to `from_pretrained` (see PASSTHROUGH)."""

    @classmethod
    def from_model_args(cls, model_args: Mapping[str, Any]) -> HFArgs:
        """HFLM's keyword arguments → HFArgs; raises UserError naming a bad or unknown one."""
        args = dict(model_args)
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        unknown = sorted(set(args) - known - PASSTHROUGH)
        if unknown:
            raise UserError(
                f"Unknown model_arg {unknown[0]!r} for the hf model.{suggest(unknown[0], sorted(known | PASSTHROUGH))}"
            )
        if args.get("pretrained") in (None, ""):
            raise UserError("The hf model needs model_args pretrained=<model directory or hub id>.")
        extra = {k: args.pop(k) for k in list(args) if k in PASSTHROUGH}
        for flag in sorted(PASSTHROUGH_FLAGS & set(extra)):
            extra[flag] = optional_bool(extra[flag], name=f"model_args {flag}")
        if "torch_dtype" in extra:  # the old spelling of dtype
            args.setdefault("dtype", extra.pop("torch_dtype"))
        # lm-eval's HFLM takes None for several flags and treats it as false; text is read
        # strictly (`trust_remote_code=no` is false, `=on` a refusal), never as bool(str).
        for flag in (
            "truncation",
            "trust_remote_code",
            "parallelize",
            "gptqmodel",
            "logits_cache",
            "use_fast_tokenizer",
        ):
            if flag in args:
                args[flag] = bool(optional_bool(args[flag], name=f"model_args {flag}"))
        for flag in ("add_bos_token", "enable_thinking"):
            if flag in args:
                args[flag] = optional_bool(args[flag], name=f"model_args {flag}")
        _check_combinations(args)
        if args.get("batch_size") is not None:
            args["batch_size"] = BatchSize.parse(args["batch_size"], source="model_args batch_size")
        else:
            args.pop("batch_size", None)
        if "max_batch_size" in args:
            args["max_batch_size"] = parse_max(args["max_batch_size"], source="model_args max_batch_size")
        think_end = args.get("think_end_token")
        if isinstance(think_end, str) and think_end.isdigit():
            args["think_end_token"] = int(think_end)
        if "revision" in args:
            args["revision"] = str(args["revision"])
        args["chat_template_args"] = dict(args.get("chat_template_args") or {})
        return cls(**args, extra=extra)


def _check_combinations(args: Mapping[str, Any]) -> None:
    if args.get("peft") and args.get("delta"):
        raise UserError("model_args peft and delta cannot both be set; choose one.")
    if args.get("tp_plan") is not None and args.get("parallelize"):
        raise UserError("model_args tp_plan and parallelize=True cannot both be set; choose one.")
    if args.get("enable_thinking") and args.get("think_end_token") is None:
        raise UserError(
            "model_args enable_thinking=True needs think_end_token (the string or id that ends the reasoning)."
        )
