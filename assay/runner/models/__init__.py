"""The model registry: `--model NAME` → LM class, in one place.

Backends are imported lazily so that `assay ls` and the operator never import torch.
Third-party code can add a backend with `register_model("name")(cls)`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from assay.errors import UserError, suggest
from assay.extras import needs_extra, require_installed
from assay.runner.models.lm import LM

_BUILTIN: dict[str, str] = {
    "hf": "assay.runner.models.hf.model:HFLM",
    "huggingface": "assay.runner.models.hf.model:HFLM",
    "dummy": "assay.runner.models.dummy:DummyLM",
    "vllm": "assay.runner.models.vllm.engine:VLLMLM",
    "local-completions": "assay.runner.models.api.completions:CompletionsLM",
    "openai-completions": "assay.runner.models.api.completions:OpenAICompletionsLM",
    "local-chat-completions": "assay.runner.models.api.chat:ChatCompletionsLM",
    "openai-chat-completions": "assay.runner.models.api.chat:OpenAIChatCompletionsLM",
}
# The extra each backend's imports come from, and those packages (the API backends need none).
_HF_EXTRA = ("hf", ("torch", "transformers", "accelerate"))
_BACKEND_EXTRA: dict[str, tuple[str, tuple[str, ...]]] = {
    "hf": _HF_EXTRA,
    "huggingface": _HF_EXTRA,
    "vllm": ("vllm", ("vllm",)),
}
_REGISTERED: dict[str, type[LM]] = {}


def register_model(*names: str) -> Callable[[type[LM]], type[LM]]:
    def add(cls: type[LM]) -> type[LM]:
        for name in names:
            _REGISTERED[name] = cls
        return cls

    return add


def model_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def check_model_name(name: str) -> None:
    """UserError unless `name` is a known model; imports no backend (a run checks this first)."""
    if name not in _REGISTERED and name not in _BUILTIN:
        raise UserError(
            f"Unknown model {name!r}.{suggest(name, model_names())} Known models: {', '.join(model_names())}."
        )


def check_backend_installed(name: str) -> None:
    """UserError naming the extra when a built-in backend's packages are not installed; imports nothing."""
    if name not in _REGISTERED and name in _BACKEND_EXTRA:
        extra, modules = _BACKEND_EXTRA[name]
        require_installed(f"--model {name}", extra, *modules)


def get_model(name: str) -> type[LM]:
    if name in _REGISTERED:
        return _REGISTERED[name]
    check_model_name(name)
    module_name, _, class_name = _BUILTIN[name].partition(":")
    extra, modules = _BACKEND_EXTRA.get(name, ("", ()))
    with needs_extra(f"--model {name}", extra, *modules):
        module = importlib.import_module(module_name)
    backend: type[LM] = getattr(module, class_name)
    return backend
