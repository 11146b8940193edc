"""The API backends' settings as one typed record: lm-eval's TemplateAPI model_args.

Names and defaults are lm-eval 0.4.13's (`local-completions`, `local-chat-completions`,
`openai-completions`, `openai-chat-completions`), so a `--model_args` string written for
lm-eval works here. The API key is never a model_arg: it comes from OPENAI_API_KEY.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay import endpoint_urls
from assay.batch_size import BatchSize
from assay.booleans import strict_bool
from assay.errors import UserError, suggest

TOKENIZER_BACKENDS = ("huggingface", "tiktoken", "auto", None)
#: accepted for lm-eval compatibility; they change nothing for text-only HTTP backends.
_IGNORED = frozenset({"truncate", "max_images", "device", "max_batch_size", "auth_token", "header"})
#: the record's boolean fields, read strictly (`verify_certificate=no` is false, `=off` a refusal).
_FLAGS = frozenset(
    {"tokenized_requests", "add_bos_token", "verify_certificate", "trust_remote_code", "use_fast_tokenizer"}
)


@dataclasses.dataclass(frozen=True)
class APIArgs:
    kind: str
    """The registered name: local-completions, local-chat-completions, openai-*."""
    base_url: str
    model: str | None = None
    tokenizer: str | None = None
    tokenizer_backend: str | None = "huggingface"
    tokenized_requests: bool = True
    num_concurrent: int = 1
    max_retries: int = 3
    timeout: float = 300
    max_gen_toks: int = 256
    max_length: int = 2048
    seed: int = 1234
    batch_size: int = 1
    add_bos_token: bool = False
    custom_prefix_token_id: int | None = None
    eos_string: str | None = None
    verify_certificate: bool = True
    ca_cert_path: str | None = None
    trust_remote_code: bool = False
    revision: str = "main"
    use_fast_tokenizer: bool = True
    think_end_token: str | None = None

    @property
    def chat(self) -> bool:
        return self.kind.endswith("chat-completions")

    @classmethod
    def from_model_args(cls, kind: str, model_args: Mapping[str, Any]) -> APIArgs:
        """lm-eval's keyword arguments → APIArgs; a bad or unknown one is a UserError naming it."""
        args = {k: v for k, v in model_args.items() if k not in _IGNORED}
        if "api_key" in args:
            raise UserError(
                f"model_args api_key is not how the {kind} model gets its key: set the OPENAI_API_KEY environment "
                "variable instead (on a cluster, spec.endpoint.apiKeySecret names the Secret that holds it), "
                "and remove api_key from model_args."
            )
        known = {f.name for f in dataclasses.fields(cls)} - {"kind"} | {"pretrained"}
        unknown = sorted(set(args) - known)
        if unknown:
            raise UserError(
                f"Unknown model_arg {unknown[0]!r} for the {kind} model.{suggest(unknown[0], sorted(known))}"
            )
        pretrained = args.pop("pretrained", None)
        args["model"] = args.get("model") or pretrained
        defaults = _defaults(kind)
        for key, value in defaults.items():
            if args.get(key) is None and key not in args:
                args[key] = value
        if not args.get("base_url"):
            raise UserError(
                f"The {kind} model needs model_args base_url=<URL of the server's {_route(kind)} endpoint>."
            )
        endpoint_urls.refuse_userinfo(str(args["base_url"]))
        backend = args.get("tokenizer_backend")
        backend = None if backend in ("None", "none", "") else backend
        if backend not in TOKENIZER_BACKENDS:
            raise UserError(f"model_args tokenizer_backend={backend!r} is not one of huggingface, tiktoken, none.")
        if backend == "auto":
            # lm-eval probes the server's /tokenize route; Assay asks for a local tokenizer.
            backend = "huggingface"
        args["tokenizer_backend"] = backend
        if backend is None:
            args["tokenized_requests"] = False
        for name in sorted(_FLAGS & set(args)):
            if args[name] is None:  # unset: the record's default
                del args[name]
            else:
                args[name] = strict_bool(args[name], name=f"model_args {name}")
        args["batch_size"] = _batch_size(args.get("batch_size", 1))
        for name in ("num_concurrent", "max_retries", "max_gen_toks", "max_length", "seed"):
            if name in args:
                args[name] = _int(name, args[name])
        if backend == "huggingface" and not (args.get("tokenizer") or args.get("model")):
            raise UserError(
                f"The {kind} model needs model_args tokenizer=<HF tokenizer dir or id> (or model=) to count tokens."
            )
        return cls(kind=kind, **args)


def _defaults(kind: str) -> dict[str, Any]:
    if kind == "openai-completions":
        return {"base_url": "https://api.openai.com/v1/completions", "tokenizer_backend": "tiktoken"}
    if kind == "openai-chat-completions":
        return {
            "base_url": "https://api.openai.com/v1/chat/completions",
            "tokenizer_backend": None,
            "tokenized_requests": False,
        }
    if kind == "local-chat-completions":
        return {"tokenizer_backend": None, "tokenized_requests": False}
    return {"tokenizer_backend": "auto"}


def _route(kind: str) -> str:
    return "/v1/chat/completions" if kind.endswith("chat-completions") else "/v1/completions"


def _batch_size(value: Any) -> int:
    """The shared parser (the CRD's forms); auto is 1, as lm-eval has no automatic size for APIs."""
    parsed = BatchSize.parse(value, source="model_args batch_size")
    return parsed.fixed if parsed.fixed is not None else 1


def _int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UserError(f"model_args {name}={value!r} is not an integer.") from None
