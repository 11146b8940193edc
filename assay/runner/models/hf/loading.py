"""Loading a Hugging Face model and tokenizer from lm-eval's HFLM model_args.

Each function turns a few model_args into a loaded object, raising `UserError` for what a
user can get wrong (a missing path, a hub id with no network, a bad dtype). The resolution
rules (backend, max_length, pad token, tokenizer kwargs) follow lm-eval's HFLM so that the
same model_args give the same tokens; places where Assay deliberately differs say so.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import torch
import transformers

from assay.errors import UserError
from assay.runner.models import model_location

log = logging.getLogger(__name__)

#: HF tokenizers report this `model_max_length` when no limit is configured (int(1e30)).
TOKENIZER_INFINITY = 1000000000000000019884624838656
DEFAULT_MAX_LENGTH = 2048
#: config attributes holding the context size, checked in this order (as lm-eval).
_SEQLEN_ATTRS = ("n_positions", "max_position_embeddings", "n_ctx")
_DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the model lives and which share of the work this process runs."""

    device: torch.device
    rank: int
    world_size: int
    gpus: int
    """GPUs visible to this process (0 on CPU / MPS)."""


def parse_dtype(value: str | torch.dtype | None, *, arg: str = "dtype") -> torch.dtype | str | None:
    """`"auto"`, None, a torch dtype, or its name (`float16`, `bfloat16`, ...)."""
    if value is None or isinstance(value, torch.dtype) or value == "auto":
        return value
    if isinstance(value, str):
        name = _DTYPE_ALIASES.get(value, value).removeprefix("torch.")
        found = getattr(torch, name, None)
        if isinstance(found, torch.dtype):
            return found
    raise UserError(f"model_args {arg}={value!r} is not a torch dtype; use auto, float32, float16 or bfloat16.")


def resolve_placement(device: str | None, *, parallelize: bool) -> Placement:
    """Pick the device (auto-detect when None) and read rank/world size from torch.distributed.

    Under torch.distributed each rank takes its own GPU `cuda:{local_rank}`; the evaluator
    shards the requests, so the backend itself never runs a collective operation.
    """
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    rank = torch.distributed.get_rank() if distributed else 0
    world_size = torch.distributed.get_world_size() if distributed else 1
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if distributed and gpus and not parallelize and (device is None or device.startswith("cuda")):
        local_rank = int(os.environ.get("LOCAL_RANK", rank % gpus))
        return Placement(torch.device(f"cuda:{local_rank}"), rank, world_size, gpus)
    if device is None or device == "auto":
        if gpus:
            chosen = torch.device("cuda")
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            chosen = torch.device("mps")
        else:
            chosen = torch.device("cpu")
        return Placement(chosen, rank, world_size, gpus)
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"model_args device={device!r} is not a torch device; use cuda, cuda:N, mps or cpu.") from None
    if chosen.type == "cuda" and (not gpus or (chosen.index is not None and chosen.index >= gpus)):
        raise UserError(
            f"model_args device={device!r} asks for a GPU this machine does not have ({gpus} visible); use device=cpu or leave it unset."
        )
    if chosen.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError(
            f"model_args device={device!r} asks for Apple MPS, which is not available here; use device=cpu."
        )
    return Placement(chosen, rank, world_size, gpus)


def _hub_error(what: str, name: str, err: Exception) -> UserError:
    local_hint = "" if not model_location.looks_like_path(name) else f" (no such directory: {name})"
    return UserError(
        f"Could not load the {what} {name!r}{local_hint}: give an existing model directory, or a Hugging Face hub id with network access or a filled cache ({type(err).__name__}: {_first_line(err)})."
    )


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else ""


def check_local(name: str, what: str) -> None:
    """A name that is clearly a filesystem path must exist (hub ids are `org/name`)."""
    if model_location.looks_like_path(name) and not model_location.exists_locally(name):
        raise UserError(f"The {what} path {name!r} does not exist; give a model directory or a Hugging Face hub id.")


def load_config(
    pretrained: str, *, revision: str, trust_remote_code: bool, subfolder: str, gguf_file: str | None
) -> Any:
    check_local(pretrained, "model")
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code, "subfolder": subfolder}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        return transformers.AutoConfig.from_pretrained(pretrained, **kwargs)
    except (OSError, ValueError) as err:
        raise _hub_error("model", pretrained, err) from None


def choose_backend(config: Any, backend: str) -> str:
    """causal or seq2seq: forced by `backend`, else from the config's model_type as lm-eval.

    Seq2seq is checked first, because some model types (MBart) are listed as both.
    """
    if backend not in ("default", "causal", "seq2seq"):
        raise UserError(f"model_args backend={backend!r} is not one of default, causal, seq2seq.")
    if backend != "default":
        return backend
    from transformers.models.auto import modeling_auto

    model_type = getattr(config, "model_type", None)
    if model_type in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "seq2seq"
    return "causal"


def load_tokenizer(
    name: str,
    *,
    revision: str,
    subfolder: str,
    trust_remote_code: bool,
    use_fast_tokenizer: bool,
    gguf_file: str | None,
    add_bos_token: bool | None,
    explicit: bool,
) -> Any:
    """Same from_pretrained kwargs as lm-eval: `add_bos_token` only when set, gguf without use_fast."""
    check_local(name, "tokenizer")
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if gguf_file is not None and not explicit:
        kwargs["gguf_file"] = gguf_file
    else:
        kwargs["use_fast"] = use_fast_tokenizer
    if add_bos_token is not None:
        kwargs["add_bos_token"] = add_bos_token
    if subfolder:
        kwargs["subfolder"] = subfolder
    try:
        return transformers.AutoTokenizer.from_pretrained(name, **kwargs)
    except (OSError, ValueError) as err:
        raise _hub_error("tokenizer", name, err) from None


def configure_pad_token(tokenizer: Any, config: Any) -> None:
    """Existing pad token, else unk, else eos, else add `<|pad|>` (lm-eval's rule, in place)."""
    if getattr(tokenizer, "pad_token_id", None) is not None or getattr(tokenizer, "pad_token", None):
        return
    if getattr(tokenizer, "unk_token", None):
        tokenizer.pad_token_id = tokenizer.unk_token_id
    elif getattr(tokenizer, "eos_token", None):
        tokenizer.pad_token_id = tokenizer.eos_token_id
    elif getattr(config, "model_type", None) == "qwen":
        tokenizer.pad_token = "<|endoftext|>"  # Qwen's remote tokenizer refuses new special tokens
    elif type(tokenizer).__name__ in ("RWKVWorldTokenizer", "Rwkv5Tokenizer"):
        pass  # RWKV's world tokenizer pads with id 0 and cannot take a new token
    else:
        tokenizer.add_special_tokens({"pad_token": "<|pad|>"})


def resolve_max_length(config: Any, tokenizer: Any, override: int | None) -> int:
    """The argument, else the (text) config's context size, else the tokenizer's, else 2048."""
    if override:
        return int(override)
    cfg = getattr(config, "text_config", None) or config
    for attr in _SEQLEN_ATTRS:
        value = getattr(cfg, attr, None)
        if value is not None:
            return int(value)
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and limit != TOKENIZER_INFINITY:
        return int(limit)
    return DEFAULT_MAX_LENGTH


def device_map_args(
    *,
    placement: Placement,
    parallelize: bool,
    device_map: Any,
    max_memory_per_gpu: int | str | None,
    max_cpu_memory: int | str | None,
    offload_folder: str | None,
) -> dict[str, Any]:
    """from_pretrained kwargs placing the model: one device, or split over GPUs by accelerate.

    Deviation: lm-eval drops a user's `device_map` unless parallelize=True; Assay honours it.
    """
    if not parallelize:
        return {"device_map": device_map if device_map is not None else {"": str(placement.device)}}
    if max_memory_per_gpu is not None:
        max_memory: dict[Any, Any] = {index: max_memory_per_gpu for index in range(placement.gpus)}
    else:
        from accelerate.utils import get_max_memory

        max_memory = {k: v for k, v in get_max_memory().items() if k != "cpu"}
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", placement.world_size))
        if placement.world_size > 1 and local_world > 1:
            # each rank splits the model over its own share of the GPUs, as lm-eval does
            max_memory = {k: v for k, v in max_memory.items() if k % local_world == placement.rank % local_world}
    if max_cpu_memory is not None:
        max_memory["cpu"] = max_cpu_memory
    return {
        "device_map": device_map if device_map is not None else "auto",
        "max_memory": max_memory,
        "offload_folder": offload_folder,
    }


def load_model(
    auto_class: Any,
    pretrained: str,
    *,
    revision: str,
    subfolder: str,
    dtype: torch.dtype | str | None,
    trust_remote_code: bool,
    gguf_file: str | None,
    config: Any,
    placement_kwargs: dict[str, Any],
    autogptq: bool | str,
    gptqmodel: bool,
    extra: dict[str, Any],
) -> Any:
    """from_pretrained with the config's quantization settings, or an AutoGPTQ/GPTQModel load."""
    kwargs = dict(extra)
    if kwargs.get("load_in_4bit") and kwargs.get("bnb_4bit_compute_dtype"):
        kwargs["bnb_4bit_compute_dtype"] = parse_dtype(kwargs["bnb_4bit_compute_dtype"], arg="bnb_4bit_compute_dtype")
    if autogptq and gptqmodel:
        raise UserError("model_args autogptq and gptqmodel cannot both be set; choose one.")
    if autogptq:
        AutoGPTQForCausalLM = _require("auto_gptq", "autogptq").AutoGPTQForCausalLM
        return AutoGPTQForCausalLM.from_quantized(
            pretrained,
            trust_remote_code=trust_remote_code,
            model_basename=None if autogptq is True else Path(str(autogptq)).stem,
            use_safetensors=True if autogptq is True else str(autogptq).endswith(".safetensors"),
            **placement_kwargs,
            **kwargs,
        )
    if gptqmodel:
        GPTQModel = _require("gptqmodel", "gptqmodel").GPTQModel
        return GPTQModel.from_quantized(pretrained, trust_remote_code=trust_remote_code, **placement_kwargs, **kwargs)
    quantization = getattr(config, "quantization_config", None)
    if isinstance(quantization, dict):
        from transformers.quantizers import AutoQuantizationConfig  # type: ignore[attr-defined]  # not in __all__

        quantization = AutoQuantizationConfig.from_dict(quantization)
    if quantization is not None:
        kwargs.setdefault("quantization_config", quantization)
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    try:
        return auto_class.from_pretrained(
            pretrained,
            revision=revision,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            subfolder=subfolder,
            **placement_kwargs,
            **kwargs,
        )
    except TypeError as err:
        raise UserError(f"The model rejected an argument passed through model_args: {_first_line(err)}.") from None
    except OSError as err:
        raise _hub_error("model", pretrained, err) from None


def apply_peft(model: Any, tokenizer: Any, peft: str, *, revision: str) -> Any:
    """Wrap in a PEFT adapter, first resizing embeddings to a tokenizer with added tokens."""
    PeftModel = _require("peft", "peft").PeftModel
    cfg = getattr(model.config, "text_config", None)
    vocab_size = cfg.vocab_size if cfg is not None and hasattr(cfg, "vocab_size") else model.config.vocab_size
    if vocab_size != len(tokenizer):
        model.resize_token_embeddings(len(tokenizer))
    try:
        return PeftModel.from_pretrained(model, peft, revision=revision)
    except (OSError, ValueError) as err:
        raise _hub_error("PEFT adapter", peft, err) from None


def apply_delta(model: Any, auto_class: Any, delta: str, *, revision: str, dtype: Any, trust_remote_code: bool) -> None:
    """Add delta weights (same architecture) to the loaded weights, in place."""
    delta_model = auto_class.from_pretrained(delta, revision=revision, dtype=dtype, trust_remote_code=trust_remote_code)
    delta_state = delta_model.state_dict()
    for name, param in model.state_dict().items():
        if name not in delta_state:
            raise UserError(f"The delta model {delta!r} has no weights for layer {name}.")
        param.data += delta_state[name].to(param.device, param.dtype)
    del delta_model


def model_sha(pretrained: Any, config: Any) -> str:
    """The hub commit of the loaded revision ('' for a local directory), read offline.

    lm-eval asks the hub API (network); transformers records the resolved commit on the
    config when it loads from the hub, which is the same hash without a network call.
    """
    if not isinstance(pretrained, str) or Path(pretrained).expanduser().exists():
        return ""
    return str(getattr(config, "_commit_hash", None) or "")


def _require(module: str, arg: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise UserError(f"model_args {arg} needs the Python package {module!r}, which is not installed.") from None
